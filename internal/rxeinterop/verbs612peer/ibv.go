//go:build linux && cgo && ibverbs

package main

import (
	"github.com/goroce/goroce/provider/ibverbs"
	"github.com/goroce/goroce/verbs"
)

func openIbverbs(name string) (verbs.Context, error) { return ibverbs.Open(name) }
