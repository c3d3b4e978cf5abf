//go:build linux

package soft

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
)

// Loopback addresses of this file's devices (other test packages use
// 127.0.1-5.x).
var (
	asyncAddrA = netip.MustParseAddr("127.0.9.1")
	asyncAddrB = netip.MustParseAddr("127.0.9.2")
)

// udpLoopDevices returns two soft devices on UDP sockets on loopback, with
// engine settings cfg, closed at the end of the test.
func udpLoopDevices(t *testing.T, cfg engine.Config) (*Device, *Device) {
	t.Helper()
	var devs [2]*Device
	for i, a := range []netip.Addr{asyncAddrA, asyncAddrB} {
		c, err := udp.Listen(a, udp.Options{})
		if err != nil {
			t.Skipf("UDP socket on %v: %v", a, err)
		}
		d, err := New(Options{Name: "async" + a.String(), Conn: c, Engine: cfg})
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	return devs[0], devs[1]
}

// asyncEvent waits up to 10 s for the next asynchronous event of ctx.
func asyncEvent(t *testing.T, ctx verbs.Context) verbs.AsyncEvent {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := ctx.GetAsyncEvent(c)
	if err != nil {
		t.Fatalf("no asynchronous event: %v", err)
	}
	return ev
}

// asyncNoEvent fails if ctx has an asynchronous event within 50 ms.
func asyncNoEvent(t *testing.T, ctx verbs.Context) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if ev, err := ctx.GetAsyncEvent(c); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unexpected asynchronous event %v (%+v), err %v", ev.Type, ev, err)
	}
}

// TestCQOverrun overfills a send CQ over real UDP sockets on loopback: 16
// signaled RDMA WRITEs into a CQ of 4 entries nobody polls. As libibverbs
// specifies (and rdma_rxe's rxe_cq_post does), the CQ goes into error with
// IBV_EVENT_CQ_ERR; the QP it serves goes to ERROR with IBV_EVENT_QP_FATAL
// and its posted receives are flushed into its own (healthy) receive CQ. The
// 4 completions that fit are delivered in order, the 12 that did not are
// counted, the CQ takes nothing more, and the other context sees no event.
// The engine's TestCQOverrun checks the send, shared and receive CQ cases
// without sockets.
func TestCQOverrun(t *testing.T) {
	da, db := udpLoopDevices(t, engine.Config{})
	a := newEnd(t, da, verbs.QPTRC, 1<<16)
	b := newEnd(t, db, verbs.QPTRC, 1<<16)
	// A's QP: a 4-entry send CQ, its own receive CQ (replacing newEnd's QP).
	scq, err := a.ctx.CreateCQ(4, nil)
	must(t, err)
	rcq, err := a.ctx.CreateCQ(64, nil)
	must(t, err)
	must(t, a.qp.Destroy())
	a.qp, err = a.pd.CreateQP(&verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128}})
	must(t, err)
	connect(t, a, b)
	other, err := da.Open()
	must(t, err)

	const nrecv, nwrite = 3, 16
	for i := range nrecv {
		_, err := a.qp.PostRecv([]verbs.RecvWR{{WRID: 100 + uint64(i), SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}}})
		must(t, err)
	}
	before := da.Stats()
	for i := range nwrite {
		wr := verbs.SendWR{WRID: uint64(i + 1), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList:     []verbs.SGE{{Addr: a.mr.Addr() + uint64(i*64), Length: 64, LKey: a.mr.LKey()}},
			RemoteAddr: b.mr.Addr() + uint64(i*64), RKey: b.mr.RKey()}
		_, err := a.qp.PostSend([]verbs.SendWR{wr})
		must(t, err)
	}
	ev := asyncEvent(t, a.ctx)
	if ev.Type != verbs.EventCQErr || ev.CQ != scq {
		t.Fatalf("first event %v (%+v), want CQ_ERR of the send CQ", ev.Type, ev)
	}
	ev = asyncEvent(t, a.ctx)
	if ev.Type != verbs.EventQPFatal || ev.QP != a.qp {
		t.Fatalf("second event %v (%+v), want QP_FATAL of the QP", ev.Type, ev)
	}
	asyncNoEvent(t, a.ctx)
	asyncNoEvent(t, other)
	if !scq.(*CQ).Overrun() || rcq.(*CQ).Overrun() {
		t.Fatalf("overrun: send CQ %v, receive CQ %v; want true, false", scq.(*CQ).Overrun(), rcq.(*CQ).Overrun())
	}
	attr, err := a.qp.Query()
	must(t, err)
	if attr.State != verbs.QPSErr {
		t.Fatalf("QP state %v after the overrun, want ERR", attr.State)
	}
	// The completions that fitted, in order.
	got := wait(t, scq, 4)
	for i, w := range got {
		if w.WRID != uint64(i+1) || w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRDMAWrite {
			t.Errorf("send completion %d: %+v, want WRID %d SUCCESS RDMA_WRITE", i, w, i+1)
		}
	}
	// The receives, flushed in order into the healthy CQ.
	got = wait(t, rcq, nrecv)
	for i, w := range got {
		if w.WRID != 100+uint64(i) || w.Status != verbs.WCWRFlushErr || w.Opcode != verbs.WCRecv {
			t.Errorf("receive completion %d: %+v, want WRID %d WR_FLUSH_ERR RECV", i, w, 100+i)
		}
	}
	// The lost ones are counted; the CQ in error takes nothing more, not
	// even after it was drained.
	st := da.Stats()
	if n := st.CQOverruns - before.CQOverruns; n != nwrite-4 {
		t.Errorf("CQOverruns %d, want %d", n, nwrite-4)
	}
	if n := st.AsyncEvents - before.AsyncEvents; n != 2 {
		t.Errorf("AsyncEvents %d, want 2", n)
	}
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 99, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}})
	must(t, err) // posting in ERROR is allowed: the WR is flushed
	deadline := time.Now().Add(10 * time.Second)
	for da.Stats().CQOverruns-before.CQOverruns != nwrite-4+1 {
		if time.Now().After(deadline) {
			t.Fatalf("the WR posted in ERROR was neither completed nor counted: %+v", da.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if n := scq.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Errorf("the CQ in error took %d more completions", n)
	}
	// B's side is unharmed: every WRITE landed.
	db.Stats() // orders B's writes before the reads below (race detector)
	for i := range nwrite {
		if b.buf[i*64] != a.buf[i*64] {
			t.Fatalf("WRITE %d did not land", i)
		}
	}
}

// TestGetAsyncEventCancel: with no event, GetAsyncEvent returns the
// context's error.
func TestGetAsyncEventCancel(t *testing.T) {
	da, _ := pipeDevices(t)
	ctx, err := da.Open()
	must(t, err)
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ctx.GetAsyncEvent(c); !errors.Is(err, context.Canceled) {
		t.Fatalf("GetAsyncEvent on a cancelled context: %v, want context.Canceled", err)
	}
}
