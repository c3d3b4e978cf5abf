package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/goroce/goroce/verbs"
)

var winSeeds, winOps = 10, 300

// TestLossWindow keeps up to 8 mixed operations in flight, SENDs included,
// posting as completions come, with loss, duplication and reordering.
func TestLossWindow(t *testing.T) {
	for seed := uint64(1); seed <= uint64(winSeeds); seed++ {
		l := newLink(t)
		r := rand.New(rand.NewPCG(seed, 3))
		l.drop = func(int) bool { return r.IntN(100) < 5 }
		l.dup = func() bool { return r.IntN(100) < 1 }
		l.hold = func() bool { return r.IntN(100) < 2 }
		a, b := newSide(t, l.a, verbs.QPTRC, 1<<20), newSide(t, l.b, verbs.QPTRC, 1<<20)
		connectRC(t, a, b, verbs.MTU1024)
		posted, done := 0, 0
		var faa uint64
		wc := make([]verbs.WC, 16)
		for rounds := 0; done < winOps; rounds++ {
			if rounds > 2_000_000 {
				t.Fatalf("seed %d: stuck at %d/%d", seed, done, winOps)
			}
			for posted < winOps && posted-done < 8 {
				n := 1 + r.IntN(6000)
				w := verbs.SendWR{WRID: uint64(posted), Flags: verbs.SendSignaled, RKey: b.mr.RKey()}
				switch r.IntN(4) {
				case 0:
					w.Opcode, w.SGList, w.RemoteAddr = verbs.WRRDMAWrite, a.sge(0, n), b.mr.Addr()
				case 1:
					w.Opcode, w.SGList, w.RemoteAddr = verbs.WRRDMARead, a.sge(65536, n), b.mr.Addr()
				case 2:
					w.Opcode, w.SGList, w.RemoteAddr, w.CompareAdd = verbs.WRAtomicFetchAndAdd, a.sge(200000, 8), b.mr.Addr()+300000, 1
					faa++
				case 3:
					w.Opcode, w.SGList = verbs.WRSend, a.sge(0, n)
					_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(posted), SGList: b.sge(400000, 8192)}})
					must(t, err)
				}
				_, err := a.qp.PostSend([]verbs.SendWR{w})
				must(t, err)
				posted++
			}
			if !l.step() {
				if d := min0(l.a.NextDeadline(), l.b.NextDeadline()); d > l.now {
					l.now = d
				}
				l.a.Tick(l.now)
				l.b.Tick(l.now)
			}
			b.rcq.Poll(wc)
			k := a.scq.Poll(wc)
			for _, w := range wc[:k] {
				if w.WRID != uint64(done) || w.Status != verbs.WCSuccess {
					q := a.qp
					t.Logf("req %+v head %d", q.req, q.sq.head.Load())
					for i := q.sq.head.Load(); i < q.sq.posted(); i++ {
						t.Logf("  wqe %d %v %+v", i, q.sq.slots[i&q.sq.mask].wr.Opcode, q.sqst[i&q.sq.mask])
					}
					t.Fatalf("seed %d: WC %+v want WRID %d (a %+v b %+v)", seed, w, done, l.a.Stats(), l.b.Stats())
				}
				done++
			}
		}
		if v := nativeU64(b.buf[300000:]); v != faa {
			t.Fatalf("seed %d: FAA total %d, want %d", seed, v, faa)
		}
	}
}
