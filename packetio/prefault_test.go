package packetio

import (
	"bytes"
	"testing"
)

// Prefault leaves a fresh buffer as it was (all zero) at any length, the
// empty one and one byte past a page included.
func TestPrefault(t *testing.T) {
	for _, n := range []int{0, 1, 4095, 4096, 4097, 3<<20 + 1} {
		b := make([]byte, n)
		Prefault(b)
		if !bytes.Equal(b, make([]byte, n)) {
			t.Errorf("%d bytes: changed", n)
		}
	}
}
