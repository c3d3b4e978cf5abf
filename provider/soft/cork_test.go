package soft

import (
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
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
// with a packet in flight are held while fewer than corkLimit packets wait
// (three quarters of a GSO message), and the post that completes them
// sends them, in one transmit call, while the driver waits in Receive,
// without waking it. The peer is
// a bare UDP socket that never acknowledges, and the retransmission
// timeout is seconds long: nothing but a post can send them.
func TestCorkReleasedByPosts(t *testing.T) {
	c := newCorkRig(t)
	corked := corkLimit - 1
	before := c.conn.Stats()
	for i := 1; i <= corked; i++ {
		c.post(i, false)
	}
	if got := c.receive(1, 50*time.Millisecond); len(got) != 0 {
		t.Fatalf("%d posts behind an unacknowledged packet: %d packets sent, want none yet", corked, len(got))
	}
	c.post(corked+1, false)
	c.expect(1, corked+1, before, "after the post that ends the cork")
}

// TestCorkEndsEarly: the two things that end a cork before corkLimit
// packets wait (kickQP), over the rig of TestCorkReleasedByPosts. A
// signaled post whose completion is the next the application can wait
// for (engine.QP.PostSendAwaited) sends what is corked with it, at once;
// a signaled post behind an outstanding one stays corked. A push (what a
// Poll that finds its CQ empty does when it has the packet path; with the
// driver asleep in Receive, as here, the Poll wakes it instead, and its
// round sends everything) sends what is corked when that is at least
// pushMin packets, and leaves fewer corked.
func TestCorkEndsEarly(t *testing.T) {
	c := newCorkRig(t)
	push := pushMin
	before := c.conn.Stats()
	for i := 1; i <= 3; i++ {
		c.post(i, false)
	}
	c.post(4, true)
	c.expect(1, 4, before, "after the first signaled post")

	before = c.conn.Stats()
	for i := 5; i <= 7; i++ {
		c.post(i, false)
	}
	c.post(8, true) // WR 4, signaled, is outstanding: not awaited
	if got := c.receive(1, 50*time.Millisecond); len(got) != 0 {
		t.Fatalf("a signaled post behind an outstanding one: %d packets sent, want none yet", len(got))
	}
	c.d.push()
	if got := c.receive(1, 50*time.Millisecond); len(got) != 0 {
		t.Fatalf("a push with 4 posts corked (fewer than %d): %d packets sent, want none", push, len(got))
	}
	for i := 9; i < 5+push; i++ {
		c.post(i, false)
	}
	if got := c.receive(1, 50*time.Millisecond); len(got) != 0 {
		t.Fatalf("%d posts corked: %d packets sent before the push", push, len(got))
	}
	c.d.push()
	c.expect(5, push, before, "after the push")

	// An empty Poll: the driver's wake sends what is corked, however little.
	before = c.conn.Stats()
	c.post(5+push, false)
	var wc [4]verbs.WC
	if n := c.a.cq.Poll(wc[:]); n != 0 {
		t.Fatalf("%d completions; the peer acknowledges nothing", n)
	}
	if got := c.receive(1, 5*time.Second); len(got) != 1 || got[0] != uint32(105+push) {
		t.Fatalf("after an empty Poll: PSNs %v, want [%d]", got, 105+push)
	}
}

// corkRig is a soft device on a udp Conn whose RC QP sends to a bare UDP
// socket (conn's peer) that never acknowledges, with a retransmission
// timeout of seconds; its first WRITE (PSN 100) has gone out, and the
// driver sleeps in Receive until the retransmission timer.
type corkRig struct {
	t    *testing.T
	d    *Device
	conn *udp.Conn // the device's
	peer *udp.Conn
	a    *end
}

func newCorkRig(t *testing.T) *corkRig {
	env := perfLoopback()
	ca, cb := env.conns(t)
	t.Cleanup(func() { cb.Close() })
	// No congestion control: its tail loss probe would resend the
	// unacknowledged packet after a millisecond, and what is corked with it.
	da, err := New(Options{Name: "corka", Conn: ca, SourcePort: ca.LocalAddrPort().Port(), Spin: -1, Engine: engine.Config{Congestion: engine.CCOff}})
	must(t, err)
	t.Cleanup(func() { da.Close() })
	if !da.duplex {
		t.Fatal("the udp Conn is not taken as full duplex")
	}
	c := &corkRig{t: t, d: da, conn: ca, peer: cb, a: perfEnd(t, da, 1<<16, 128)}
	qp := c.a.qp
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: 0x99, RQPSN: 100,
		AHAttr: verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: verbs.GIDFromAddr(env.b)}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 100, Timeout: 20, RetryCnt: 7, RNRRetry: 7},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	c.post(0, false) // to an idle QP: sent at once
	if got := c.receive(1, 5*time.Second); len(got) != 1 || got[0] != 100 {
		t.Fatalf("first WRITE: PSNs %v, want [100]", got)
	}
	// The driver settles in Receive, until the retransmission timer: only
	// a round of its own could send the corked posts.
	waitAsleep(t, da, true)
	return c
}

// post posts WRITE i, 64 bytes, signaled or not.
func (c *corkRig) post(i int, signaled bool) {
	c.t.Helper()
	wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite,
		SGList: []verbs.SGE{{Addr: c.a.mr.Addr(), Length: 64, LKey: c.a.mr.LKey()}}, RemoteAddr: 0x1000, RKey: 1}
	if signaled {
		wr.Flags = verbs.SendSignaled
	}
	_, err := c.a.qp.PostSend([]verbs.SendWR{wr})
	must(c.t, err)
}

// receive takes what reaches the peer within d: the PSNs.
func (c *corkRig) receive(want int, d time.Duration) []uint32 {
	c.t.Helper()
	var psns []uint32
	until := time.Now().Add(d)
	for len(psns) < want && time.Now().Before(until) {
		pkts, err := c.peer.Receive(until)
		must(c.t, err)
		for _, p := range pkts {
			psns = append(psns, uint32(wire.BTH(p.Buf).PSN()))
		}
	}
	return psns
}

// expect checks that WRITEs first .. first+n-1 (PSN 100 + their number)
// reached the peer, in one transmit call since before, without a wake of
// the driver: sent by the post or Poll, not the driver.
func (c *corkRig) expect(first, n int, before packetio.Stats, when string) {
	c.t.Helper()
	got := c.receive(n, 5*time.Second)
	if len(got) != n {
		c.t.Fatalf("%s: %d packets, want %d", when, len(got), n)
	}
	for i, psn := range got {
		if psn != uint32(100+first+i) {
			c.t.Fatalf("%s: packet %d: PSN %d, want %d", when, i, psn, 100+first+i)
		}
	}
	after := c.conn.Stats()
	if k := after.TxBatches - before.TxBatches; k != 1 {
		c.t.Errorf("%s: %d WRITEs went out in %d transmit calls, want 1", when, n, k)
	}
	if k := after.Wakes - before.Wakes; k != 0 {
		c.t.Errorf("%s: the driver was woken %d times, want 0: the posts sent without it", when, k)
	}
}

// TestPostRecvRingsNoDoorbell: receives posted while the driver sleeps in
// Receive neither ring its doorbell nor wake it (a receive gives it nothing
// to do), and a SEND that comes later still lands in the first of them and
// completes.
func TestPostRecvRingsNoDoorbell(t *testing.T) {
	env := perfLoopback()
	da, db := env.devices(t, Options{Spin: -1})
	a, b := perfEnd(t, da, 1<<16, 128), perfEnd(t, db, 1<<16, 128)
	connectPerf(t, a, b, verbs.MTU1024, 16)
	waitAsleep(t, db, false)
	bell, wakes := db.doorbell.Load(), db.conn.(*udp.Conn).Stats().Wakes
	for i := range 64 {
		_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{{Addr: b.mr.Addr() + uint64(i)*64, Length: 64, LKey: b.mr.LKey()}}}})
		must(t, err)
	}
	if got := db.doorbell.Load(); got != bell {
		t.Errorf("64 receives rang the doorbell %d times, want 0", got-bell)
	}
	if got := db.conn.(*udp.Conn).Stats().Wakes; got != wakes {
		t.Errorf("64 receives woke the driver %d times, want 0", got-wakes)
	}
	copy(a.buf, "hello, receiver")
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 7, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 15, LKey: a.mr.LKey()}}}})
	must(t, err)
	wc := make([]verbs.WC, 4)
	for deadline := time.Now().Add(5 * time.Second); ; {
		n := b.cq.Poll(wc)
		if n > 0 {
			if wc[0].Status != verbs.WCSuccess || wc[0].WRID != 0 || wc[0].ByteLen != 15 || string(b.buf[:15]) != "hello, receiver" {
				t.Fatalf("receive completion %+v, data %q", wc[0], b.buf[:15])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no receive completion after 5 s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// waitAsleep waits until d's driver sleeps in Receive (with a timer armed,
// if timer): asleep at two looks 5 ms apart, it is blocked, not between the
// short polls of a round, and has no wake pending.
func waitAsleep(t *testing.T, d *Device, timer bool) {
	t.Helper()
	asleep := func() bool { return d.sleeping.Load() && (!timer || d.sleepUntil.Load() != 0) }
	for settle := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if asleep() {
			time.Sleep(5 * time.Millisecond)
			if asleep() {
				return
			}
		}
		if time.Now().After(settle) {
			t.Fatalf("the driver of %s did not go to sleep (timer armed: %v)", d.Name(), timer)
		}
	}
}
