//go:build !linux

package netns

import "testing"

// NewRouter skips the test: network namespaces are Linux only.
func NewRouter(t testing.TB, opts RouterOptions) *Router {
	t.Helper()
	t.Skip("netns: network namespaces are Linux only")
	return nil
}
