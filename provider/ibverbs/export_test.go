//go:build linux && cgo && ibverbs

package ibverbs

// CgoNoop is one empty cgo call, for the benchmarks' baseline.
var CgoNoop = cgoNoop
