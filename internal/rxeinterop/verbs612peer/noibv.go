//go:build !(linux && cgo && ibverbs)

package main

import (
	"errors"

	"github.com/goroce/goroce/verbs"
)

func openIbverbs(string) (verbs.Context, error) {
	return nil, errors.New("built without the ibverbs provider (build tag ibverbs)")
}
