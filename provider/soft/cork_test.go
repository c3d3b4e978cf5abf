package soft

import (
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// TestCorkedPosts: single 64-byte WRITEs posted back to back over real UDP
// sockets, 128 in flight at most (perftest's write_bw), all complete with
// the data in place, and the posts made while 16 or more packets were in
// flight went out with the ACKs' batches: far fewer transmit calls than
// posts. A cork that lost a post would leave its WRITE uncompleted, and
// the test would time out waiting for it.
func TestCorkedPosts(t *testing.T) {
	env := perfLoopback()
	da, db := env.devices(t, Options{Spin: -1})
	a, b := perfEnd(t, da, 1<<16, 128), perfEnd(t, db, 1<<16, 128)
	connectPerf(t, a, b, verbs.MTU1024, 16)
	const posts, depth, size = 4096, 128, 64
	for i := range a.buf {
		a.buf[i] = byte(i*13 + 1)
	}
	before := da.conn.Stats().TxBatches
	wc := make([]verbs.WC, 16)
	posted, done := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for done < posts {
		for posted < posts && posted-done < depth {
			off := uint64(posted%1024) * size
			wr := verbs.SendWR{WRID: uint64(posted), Opcode: verbs.WRRDMAWrite,
				SGList:     []verbs.SGE{{Addr: a.mr.Addr() + off, Length: size, LKey: a.mr.LKey()}},
				RemoteAddr: b.mr.Addr() + off, RKey: b.mr.RKey()}
			if posted%16 == 15 || posted == posts-1 {
				wr.Flags = verbs.SendSignaled
			}
			_, err := a.qp.PostSend([]verbs.SendWR{wr})
			must(t, err)
			posted++
		}
		k := a.cq.Poll(wc)
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("WR %d: %v", w.WRID, w.Status)
			}
			done = int(w.WRID) + 1
		}
		if k == 0 && time.Now().After(deadline) {
			t.Fatalf("%d of %d WRITEs completed after 20 s (%d posted)", done, posts, posted)
		}
	}
	batches := da.conn.Stats().TxBatches - before
	db.Stats()                   // the receiver wrote under its mutex; read after taking it
	for i := range 1024 * size { // every slot was written, the last 4096 / 1024 times
		if b.buf[i] != a.buf[i] {
			t.Fatalf("byte %d: %#x, want %#x", i, b.buf[i], a.buf[i])
		}
	}
	t.Logf("%d posts went out in %d transmit calls", posts, batches)
	if batches >= posts/4 {
		t.Errorf("%d posts went out in %d transmit calls: not corked", posts, batches)
	}
}
