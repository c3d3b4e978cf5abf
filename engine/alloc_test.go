package engine

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// TestPostPollAllocs: posting, moving packets, and polling allocate nothing
// in steady state.
func TestPostPollAllocs(t *testing.T) {
	l := newLink(t)
	l.a.cfg.Clock, l.b.cfg.Clock = verbs.Now, verbs.Now // stamping completions is on the hot path too
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	connectRC(t, a, b, verbs.MTU1024)
	wr := []verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 4096), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}
	rwr := []verbs.RecvWR{{WRID: 2, SGList: b.sge(8192, 4096)}}
	swr := []verbs.SendWR{{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 2000)}}
	wc := make([]verbs.WC, 8)
	round := func() {
		if _, err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if _, err := b.qp.PostRecv(rwr); err != nil {
			t.Fatal(err)
		}
		if _, err := a.qp.PostSend(swr); err != nil {
			t.Fatal(err)
		}
		for l.step() {
		}
		n := a.scq.Poll(wc) + b.rcq.Poll(wc)
		if n != 3 {
			t.Fatalf("%d completions", n)
		}
	}
	round()
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%v allocations per post/transfer/poll round", allocs)
	}
}

// BenchmarkPostPoll measures posting and retiring unsignaled-then-signaled
// WRITEs through the engine, both ends in one goroutine: the in-process
// post+poll rate, completions stamped as a provider stamps them.
func BenchmarkPostPoll(b *testing.B) { benchPostPoll(b, false) }

// BenchmarkPostPollOneByOne is BenchmarkPostPoll with the link moving one
// packet at a time (Output, Input), without output batches or DiffICRC4:
// what the batches gain, in one binary.
func BenchmarkPostPollOneByOne(b *testing.B) { benchPostPoll(b, true) }

func benchPostPoll(b *testing.B, single bool) {
	l := newLink(b)
	l.single = single
	l.a.cfg.Clock, l.b.cfg.Clock = verbs.Now, verbs.Now
	x, y := newSide(b, l.a, verbs.QPTRC, 1<<16), newSide(b, l.b, verbs.QPTRC, 1<<16)
	connectRC(b, x, y, verbs.MTU4096)
	const batch = 32
	wrs := make([]verbs.SendWR, batch)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: x.sge(0, 64), RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
	}
	wrs[batch-1].Flags = verbs.SendSignaled
	wc := make([]verbs.WC, batch)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		if _, err := x.qp.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
		for l.step() {
		}
		if x.scq.Poll(wc) != 1 {
			b.Fatal("no completion")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "MWQE/s")
}

// TestCompletionClock: with Config.Clock set, every completion carries the
// clock's reading at the moment the engine produced it (a receive when its
// packet is input, a send when its acknowledgement is), not a later one;
// without it, none.
func TestCompletionClock(t *testing.T) {
	l := newLink(t)
	var clock int64 = 1000
	tick := func() int64 { return clock }
	l.a.cfg.Clock, l.b.cfg.Clock = tick, tick
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	connectRC(t, a, b, verbs.MTU1024)
	_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 2, SGList: b.sge(0, 64)}})
	must(t, err)
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 64)}})
	must(t, err)
	buf := make([]byte, wire.MaxPMTU+128)
	n, _, ok := l.a.Output(l.now, buf)
	if !ok {
		t.Fatal("no SEND packet")
	}
	clock = 2000 // the receiver processes the SEND
	l.b.Input(l.now, buf[:n], l.a.Local(), wire.RoCEv2Port)
	n, _, ok = l.b.Output(l.now, buf)
	if !ok {
		t.Fatal("no ACK")
	}
	clock = 3000 // the requester takes the ACK
	l.a.Input(l.now, buf[:n], l.b.Local(), wire.RoCEv2Port)
	clock = 4000 // the application polls late
	wc := make([]verbs.WC, 2)
	if k := b.rcq.Poll(wc); k != 1 || wc[0].Timestamp != 2000 {
		t.Errorf("receive: %d completions, %+v, want Timestamp 2000", k, wc[0])
	}
	if k := a.scq.Poll(wc); k != 1 || wc[0].Timestamp != 3000 {
		t.Errorf("send: %d completions, %+v, want Timestamp 3000", k, wc[0])
	}
	l.a.cfg.Clock = nil
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	must(t, err)
	if w := collect(l, t, a.scq, 1); w[0].Timestamp != 0 {
		t.Errorf("without a Clock: Timestamp %d, want 0", w[0].Timestamp)
	}
}

// TestPendingOutput: the estimate a driver lends packet buffers by is at
// least the packets Output then gives (a WRITE's, a READ response's, an
// ACK's), caps at the limit, and is 0 when there is nothing to send.
func TestPendingOutput(t *testing.T) {
	l := newLink(t)
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	connectRC(t, a, b, verbs.MTU1024)
	drain := func(e *Engine) int {
		n := 0
		for {
			k, _, _, ok := e.OutputFrom(l.now, l.buf)
			if !ok {
				return n
			}
			if k > 0 {
				n++
			}
		}
	}
	if n := l.a.PendingOutput(64); n != 0 {
		t.Fatalf("idle: %d pending", n)
	}
	// Three WRITEs of 3 packets each.
	for i := range 3 {
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: a.sge(0, 3000), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		must(t, err)
	}
	est := l.a.PendingOutput(64)
	if capped := l.a.PendingOutput(4); capped != 4 {
		t.Errorf("limit 4: %d", capped)
	}
	if got := drain(l.a); got != 9 || est < got {
		t.Errorf("WRITEs: estimated %d, output %d (want 9)", est, got)
	}
	if n := l.a.PendingOutput(64); n != 0 {
		t.Errorf("after the WRITEs went: %d pending", n)
	}
	// A READ of 5 packets on a fresh pair: the responder's estimate covers
	// its response.
	l = newLink(t)
	a, b = newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	connectRC(t, a, b, verbs.MTU1024)
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 9, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(0, 5000), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	must(t, err)
	k, _, _, ok := l.a.OutputFrom(l.now, l.buf)
	if !ok {
		t.Fatal("no READ request")
	}
	l.b.Input(l.now, l.buf[:k], l.a.Local(), wire.RoCEv2Port)
	est = l.b.PendingOutput(64)
	if got := drain(l.b); got != 5 || est < got {
		t.Errorf("READ response: estimated %d, output %d (want 5)", est, got)
	}
}

// TestPostSendAwaited: a signaled WR is awaited when every signaled WR
// posted before it has completed (perftest's CQ moderation: the first of
// every 100), not while an earlier one is outstanding, nor when an earlier
// WR of the same post is signaled; unsignaled WRs never are; on a QP that
// signals all, only a post to an idle QP is; a QP flushed back to RESET
// and connected again starts afresh.
func TestPostSendAwaited(t *testing.T) {
	l, a, b := rcLink(t)
	post := func(wrs ...verbs.SendWR) bool {
		t.Helper()
		n, awaited, err := a.qp.PostSendAwaited(wrs)
		must(t, err)
		if n != len(wrs) {
			t.Fatalf("posted %d of %d", n, len(wrs))
		}
		return awaited
	}
	wr := func(id uint64, sig bool) verbs.SendWR {
		w := verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SGList: a.sge(0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		if sig {
			w.Flags = verbs.SendSignaled
		}
		return w
	}
	completed := func(n int) {
		t.Helper()
		if got := collect(l, t, a.scq, n); len(got) != n {
			t.Fatalf("%d completions, want %d", len(got), n)
		}
	}
	if post(wr(1, false)) {
		t.Error("an unsignaled WR is awaited")
	}
	if !post(wr(2, true)) {
		t.Error("the first signaled WR is not awaited")
	}
	if post(wr(3, false)) || post(wr(4, true)) {
		t.Error("a signaled WR behind an outstanding one is awaited")
	}
	completed(2)
	if !post(wr(5, true)) {
		t.Error("a signaled WR after the earlier ones completed is not awaited")
	}
	completed(1)
	if post(wr(6, true), wr(7, false), wr(8, true)) {
		t.Error("a signaled WR behind a signaled one of the same post is awaited")
	}
	if post(wr(9, false), wr(10, false)) {
		t.Error("unsignaled WRs are awaited")
	}
	completed(2)
	if !post(wr(11, false), wr(12, true)) {
		t.Error("a post ending in the only signaled WR is not awaited")
	}
	completed(1)
	// A post that stops at a bad WR: what it posted counts.
	bad := wr(14, true)
	bad.SGList = append(a.sge(0, 8), a.sge(8, 8)...)
	bad.Opcode = verbs.WRAtomicFetchAndAdd
	n, awaited, perr := a.qp.PostSendAwaited([]verbs.SendWR{wr(13, true), bad})
	if n != 1 || !awaited || !errors.Is(perr, verbs.ErrInvalidWR) {
		t.Errorf("signaled WR, then a bad one: posted %d, awaited %v, %v; want 1, true, ErrInvalidWR", n, awaited, perr)
	}
	if post(wr(15, true)) {
		t.Error("a signaled WR behind one posted before a bad WR is awaited")
	}
	completed(2)

	// A QP that signals all: a post to an idle QP only.
	l = newLink(t)
	a, b = newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	var err error
	a.qp, err = l.a.CreateQP(&QPInit{Type: verbs.QPTRC, PD: a.pd, SendCQ: a.scq, RecvCQ: a.rcq, SigAll: true,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4}})
	must(t, err)
	connectRC(t, a, b, verbs.MTU1024)
	if !post(wr(1, false)) || post(wr(2, false)) {
		t.Error("signal-all QP: want the first post awaited, the second not")
	}
	completed(2)
	if !post(wr(3, false)) {
		t.Error("signal-all QP: a post to an idle QP is not awaited")
	}
	completed(1)

	// Reset with a signaled WR outstanding: the next connection's first
	// signaled WR is awaited.
	post(wr(4, false))
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState))
	must(t, b.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState))
	connectRC(t, a, b, verbs.MTU1024)
	if !post(wr(5, false)) {
		t.Error("after a reset: a post to the idle QP is not awaited")
	}
}
