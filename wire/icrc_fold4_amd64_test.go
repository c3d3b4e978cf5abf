//go:build amd64 && !purego

package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestICRC4Variants runs each four-lane pass the processor has (icrc4z on
// 512-bit registers, icrc4y on 256-bit ones) directly, whichever icrc4
// picks: over every length the pass takes, it seals four packets as Set
// does each, and its diffs are 0 for them and not 0 for a packet with one
// bit changed.
func TestICRC4Variants(t *testing.T) {
	variants := map[string]func(uint64, *[4][]byte, int, *[4]uint32){}
	if haveCLMUL4Z {
		variants["icrc4z"] = icrc4z
	}
	if haveCLMUL4Y {
		variants["icrc4y"] = icrc4y
	}
	if len(variants) == 0 {
		t.Skip("the processor has no VPCLMULQDQ: neither four-lane pass runs here")
	}
	c, err := NewFlowICRC(Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC001})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(41, 42))
	for name, pass := range variants {
		for n := Lane4MinLen; n <= Lane4MaxLen; n++ {
			var pkts, want [4][]byte
			for j := range pkts {
				pkts[j] = make([]byte, n)
				for k := range pkts[j] {
					pkts[j][k] = byte(r.Uint32())
				}
				want[j] = append([]byte(nil), pkts[j]...)
				if err := c.Set(want[j]); err != nil {
					t.Fatal(err)
				}
			}
			h := uint64(c.headers(pkts[0]))
			pass(h, &pkts, n-ICRCLen, nil)
			for j := range pkts {
				if !bytes.Equal(pkts[j], want[j]) {
					t.Fatalf("%s, %d bytes: packet %d sealed %x, Set %x", name, n, j, pkts[j][n-ICRCLen:], want[j][n-ICRCLen:])
				}
			}
			bad := r.IntN(4)
			at := r.IntN(n - ICRCLen)
			if at == 4 {
				at = 8 // the BTH's byte 4 is masked (taken as ones)
			}
			pkts[bad][at] ^= 1 << r.IntN(8)
			var d [4]uint32
			pass(h, &pkts, n-ICRCLen, &d)
			for j, v := range d {
				if (v != 0) != (j == bad) {
					t.Fatalf("%s, %d bytes: diffs %x, want only packet %d's not 0", name, n, d, bad)
				}
			}
		}
	}
}
