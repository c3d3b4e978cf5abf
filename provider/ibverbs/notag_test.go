//go:build !(linux && cgo && ibverbs)

package ibverbs_test

import "testing"

func TestBuildTag(t *testing.T) {
	t.Skip("provider/ibverbs is built only with -tags ibverbs, cgo on Linux and libibverbs-dev: go test -tags ibverbs ./provider/ibverbs")
}
