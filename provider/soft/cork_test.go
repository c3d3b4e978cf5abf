package soft

import (
	"github.com/goroce/goroce/wire"
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

// TestCorkReleasedByPosts: on a duplex Conn (packetio/udp), posts to a QP
// with a packet in flight are held while fewer than three quarters of a
// batch wait, and the post that completes them sends them, in one transmit
// call, while the driver waits in Receive, without waking it. The peer is
// a bare UDP socket that never acknowledges, and the retransmission
// timeout is seconds long: nothing but a post can send them.
func TestCorkReleasedByPosts(t *testing.T) {
	env := perfLoopback()
	ca, cb := env.conns(t)
	t.Cleanup(func() { cb.Close() })
	da, err := New(Options{Name: "corka", Conn: ca, SourcePort: ca.LocalAddrPort().Port(), Spin: -1})
	must(t, err)
	t.Cleanup(func() { da.Close() })
	if !da.duplex {
		t.Fatal("the udp Conn is not taken as full duplex")
	}
	a := perfEnd(t, da, 1<<16, 128)
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: 0x99, RQPSN: 100,
		AHAttr: verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: verbs.GIDFromAddr(env.b)}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 100, Timeout: 20, RetryCnt: 7, RNRRetry: 7},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	post := func(i int) {
		t.Helper()
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite,
			SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}, RemoteAddr: 0x1000, RKey: 1}})
		must(t, err)
	}
	// receive takes what reaches the peer within d: the PSNs.
	receive := func(want int, d time.Duration) []uint32 {
		t.Helper()
		var psns []uint32
		until := time.Now().Add(d)
		for len(psns) < want && time.Now().Before(until) {
			pkts, err := cb.Receive(until)
			must(t, err)
			for _, p := range pkts {
				psns = append(psns, uint32(wire.BTH(p.Buf).PSN()))
			}
		}
		return psns
	}
	post(0) // to an idle QP: sent at once
	if got := receive(1, 5*time.Second); len(got) != 1 || got[0] != 100 {
		t.Fatalf("first WRITE: PSNs %v, want [100]", got)
	}
	// The driver settles in Receive, until the retransmission timer: only
	// a round of its own could send the corked posts. Asleep at two looks
	// 5 ms apart, it is blocked, not between the short polls of a round.
	asleep := func() bool { return da.sleeping.Load() && da.sleepUntil.Load() != 0 }
	for settle := time.Now().Add(5 * time.Second); ; {
		if asleep() {
			time.Sleep(5 * time.Millisecond)
			if asleep() {
				break
			}
		}
		if time.Now().After(settle) {
			t.Fatal("the driver did not go to sleep with the retransmission timer armed")
		}
		time.Sleep(time.Millisecond)
	}
	corked := da.opts.Batch*3/4 - 1
	before := ca.Stats()
	for i := 1; i <= corked; i++ {
		post(i)
	}
	if got := receive(1, 50*time.Millisecond); len(got) != 0 {
		t.Fatalf("%d posts behind an unacknowledged packet: %d packets sent, want none yet", corked, len(got))
	}
	post(corked + 1)
	got := receive(corked+1, 5*time.Second)
	if len(got) != corked+1 {
		t.Fatalf("after the post that ends the cork: %d packets, want %d", len(got), corked+1)
	}
	for i, psn := range got {
		if psn != uint32(101+i) {
			t.Fatalf("packet %d: PSN %d, want %d", i, psn, 101+i)
		}
	}
	after := ca.Stats()
	if n := after.TxBatches - before.TxBatches; n != 1 {
		t.Errorf("%d corked WRITEs went out in %d transmit calls, want 1", corked+1, n)
	}
	if n := after.Wakes - before.Wakes; n != 0 {
		t.Errorf("the driver was woken %d times, want 0: the posts sent without it", n)
	}
}
