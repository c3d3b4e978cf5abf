package packetio

import (
	"bytes"
	"slices"
	"testing"
)

// Prefault leaves a fresh buffer as it was (all zero) at any length, the
// empty one and one element past a page included, for bytes and wider
// elements.
func TestPrefault(t *testing.T) {
	for _, n := range []int{0, 1, 4095, 4096, 4097, 3<<20 + 1} {
		b := make([]byte, n)
		Prefault(b)
		if !bytes.Equal(b, make([]byte, n)) {
			t.Errorf("%d bytes: changed", n)
		}
		w := make([]int64, n)
		Prefault(w)
		if !slices.Equal(w, make([]int64, n)) {
			t.Errorf("%d int64s: changed", n)
		}
	}
}
