//go:build !(linux && cgo && ibverbs)

package main

import "github.com/goroce/goroce/verbs"

// hwProviders are the providers of the devices other than the soft one that
// this build can open: none without -tags ibverbs.
func hwProviders() []verbs.Provider { return nil }
