package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestLossMixed: WRITE, READ and atomics with 5 % loss both ways.
func TestLossMixed(t *testing.T) {
	for seed := uint64(1); seed <= uint64(lossSeeds); seed++ {
		l := newLink(t)
		r := rand.New(rand.NewPCG(seed, 2))
		l.drop = func(int) bool { return r.IntN(100) < 5 }
		l.dup = func() bool { return r.IntN(100) < 2 }
		l.hold = func() bool { return r.IntN(100) < 3 }
		a, b := newSide(t, l.a, verbs.QPTRC, 1<<20), newSide(t, l.b, verbs.QPTRC, 1<<20)
		connectRC(t, a, b, verbs.MTU1024)
		var wrs []verbs.SendWR
		for i := 0; i < lossOps; i++ {
			n := 1 + r.IntN(8192)
			switch i % 4 {
			case 0:
				wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, n), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			case 1:
				wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(65536, n), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			case 2:
				wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: a.sge(200000, 8), RemoteAddr: b.mr.Addr() + 300000, RKey: b.mr.RKey(), CompareAdd: 1})
			case 3:
				wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 5), RemoteAddr: b.mr.Addr() + 400000, RKey: b.mr.RKey()})
			}
		}
		for i := 0; i < len(wrs); i += 8 {
			_, err := a.qp.PostSend(wrs[i : i+8])
			must(t, err)
			got := collect(l, t, a.scq, 8)
			for j, w := range got {
				if w.WRID != uint64(i+j) || w.Status != verbs.WCSuccess {
					t.Fatalf("seed %d: WC %+v want WRID %d (a %+v)", seed, w, i+j, l.a.Stats())
				}
			}
		}
		if v := nativeU64(b.buf[300000:]); v != uint64(lossOps/4) {
			t.Fatalf("seed %d: FAA total %d, want %d (executed twice?)", seed, v, lossOps/4)
		}
	}
}

var lossSeeds, lossOps = 20, 40
