//go:build amd64 && !purego

package wire

import (
	"math/rand/v2"
	"testing"
)

// TestClmulRegister4: the four-lane pass gives each lane clmulRegister's
// register, at every length it takes.
func TestClmulRegister4(t *testing.T) {
	if !haveCLMUL4 {
		t.Skip("no AVX-512 VPCLMULQDQ")
	}
	r := rand.New(rand.NewPCG(31, 32))
	for n := 17; n <= foldMax; n++ {
		var bufs [4][]byte
		var p [4]*byte
		var v [4]uint64
		var out [4]uint32
		for j := range 4 {
			bufs[j] = make([]byte, n)
			for i := range bufs[j] {
				bufs[j][i] = byte(r.Uint32())
			}
			p[j], v[j] = &bufs[j][0], r.Uint64()
		}
		clmulRegister4(&v, &p, n, &out)
		for j := range 4 {
			if got, want := out[j], clmulRegister(v[j], bufs[j]); got != want {
				t.Fatalf("%d bytes, lane %d: %#x, want %#x", n, j, got, want)
			}
		}
	}
}
