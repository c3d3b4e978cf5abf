package engine

import (
	"testing"

	"github.com/goroce/goroce/verbs"
)

// withQP replaces s's QP by one whose send and receive CQs are scq and rcq.
func (s *side) withQP(t *testing.T, scq, rcq *CQ) {
	t.Helper()
	s.qp.Destroy()
	s.scq, s.rcq = scq, rcq
	var err error
	s.qp, err = s.e.CreateQP(&QPInit{Type: verbs.QPTRC, PD: s.pd, SendCQ: scq, RecvCQ: rcq,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128}})
	must(t, err)
}

// events collects e's asynchronous events.
func events(e *Engine) *[]AsyncEvent {
	evs := new([]AsyncEvent)
	e.cfg.OnAsyncEvent = func(ev AsyncEvent) { *evs = append(*evs, ev) }
	return evs
}

// pollAll returns every completion cq holds.
func pollAll(cq *CQ) []verbs.WC {
	var got []verbs.WC
	var w [16]verbs.WC
	for n := cq.Poll(w[:]); n > 0; n = cq.Poll(w[:]) {
		got = append(got, w[:n]...)
	}
	return got
}

// TestCQOverrun: a CQ with no room for a completion goes into error, as
// libibverbs specifies and rdma_rxe's rxe_cq_post does: IBV_EVENT_CQ_ERR,
// then IBV_EVENT_QP_FATAL for each QP it serves, which goes to ERROR and
// flushes into its other CQ; the completions that fitted stay, in order,
// the lost ones are counted, and the CQ takes nothing more. provider/soft's
// TestCQOverrun checks the same over real UDP sockets, through the device's
// verbs and its contexts' events.
func TestCQOverrun(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, l *link, a, b *side)
	}{
		{"send_cq", overrunSend},
		{"shared_cq", overrunShared},
		{"receive_cq", overrunReceive},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLink(t)
			c.run(t, l, newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16))
		})
	}
}

// overrunSend: 16 signaled RDMA WRITEs into a send CQ of 4 entries nobody
// polls; the QP's posted receives are flushed into its own (healthy)
// receive CQ.
func overrunSend(t *testing.T, l *link, a, b *side) {
	scq, rcq := NewCQ(4), NewCQ(64)
	a.withQP(t, scq, rcq)
	connectRC(t, a, b, verbs.MTU1024)
	evs := events(l.a)
	const nrecv, nwrite = 3, 16
	for i := range nrecv {
		_, err := a.qp.PostRecv([]verbs.RecvWR{{WRID: 100 + uint64(i), SGList: a.sge(0, 64)}})
		must(t, err)
	}
	fill(a.buf[:nwrite*64], 3)
	before := l.a.Stats()
	for i := range nwrite {
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i + 1), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: a.sge(i*64, 64), RemoteAddr: b.mr.Addr() + uint64(i*64), RKey: b.mr.RKey()}})
		must(t, err)
	}
	l.run(t, func() bool { return len(*evs) >= 2 })
	for l.step() {
	}
	if len(*evs) != 2 || (*evs)[0].Type != verbs.EventCQErr || (*evs)[0].CQ != scq || (*evs)[1].Type != verbs.EventQPFatal || (*evs)[1].QP != a.qp {
		t.Fatalf("events %+v, want CQ_ERR of the send CQ, then QP_FATAL of the QP", *evs)
	}
	if !scq.Overrun() || rcq.Overrun() {
		t.Fatalf("overrun: send CQ %v, receive CQ %v; want true, false", scq.Overrun(), rcq.Overrun())
	}
	if s := a.qp.State(); s != verbs.QPSErr {
		t.Fatalf("QP state %v after the overrun, want ERR", s)
	}
	got := pollAll(scq)
	if len(got) != 4 {
		t.Errorf("%d send completions, want the 4 that fitted", len(got))
	}
	for i, w := range got {
		if w.WRID != uint64(i+1) || w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRDMAWrite {
			t.Errorf("send completion %d: %+v, want WRID %d SUCCESS RDMA_WRITE", i, w, i+1)
		}
	}
	got = pollAll(rcq)
	if len(got) != nrecv {
		t.Errorf("%d receive completions, want %d", len(got), nrecv)
	}
	for i, w := range got {
		if w.WRID != 100+uint64(i) || w.Status != verbs.WCWRFlushErr || w.Opcode != verbs.WCRecv {
			t.Errorf("receive completion %d: %+v, want WRID %d WR_FLUSH_ERR RECV", i, w, 100+i)
		}
	}
	st := l.a.Stats()
	if n := st.CQOverruns - before.CQOverruns; n != nwrite-4 {
		t.Errorf("CQOverruns %d, want %d", n, nwrite-4)
	}
	if n := st.AsyncEvents - before.AsyncEvents; n != 2 {
		t.Errorf("AsyncEvents %d, want 2", n)
	}
	// Posting in ERROR is allowed: the WR is flushed, into a CQ in error
	// that takes nothing more, not even after it was drained: counted.
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 99, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}})
	must(t, err)
	for l.step() {
	}
	if n := l.a.Stats().CQOverruns - before.CQOverruns; n != nwrite-4+1 {
		t.Errorf("the WR posted in ERROR was neither completed nor counted: CQOverruns %d, want %d", n, nwrite-4+1)
	}
	if n := len(pollAll(scq)); n != 0 {
		t.Errorf("the CQ in error took %d more completions", n)
	}
	// B's side is unharmed: every WRITE landed.
	for i := range nwrite {
		if b.buf[i*64] != a.buf[i*64] {
			t.Fatalf("WRITE %d did not land", i)
		}
	}
}

// overrunShared: one CQ of 2 entries serves the send and receive queues of
// two QPs; its overrun takes both QPs to ERROR, with one QP_FATAL each
// after the CQ_ERR.
func overrunShared(t *testing.T, l *link, a, b *side) {
	cq := NewCQ(2)
	a.withQP(t, cq, cq)
	a2, b2 := newSide(t, l.a, verbs.QPTRC, 4096), newSide(t, l.b, verbs.QPTRC, 4096)
	a2.withQP(t, cq, cq)
	connectRC(t, a, b, verbs.MTU1024)
	connectRC(t, a2, b2, verbs.MTU1024)
	evs := events(l.a)
	for i := range 3 {
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i + 1), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		must(t, err)
	}
	l.run(t, func() bool { return len(*evs) >= 3 })
	for l.step() {
	}
	if len(*evs) != 3 || (*evs)[0].Type != verbs.EventCQErr || (*evs)[0].CQ != cq {
		t.Fatalf("events %+v, want CQ_ERR, then QP_FATAL of each QP", *evs)
	}
	seen := map[*QP]bool{}
	for _, ev := range (*evs)[1:] {
		if ev.Type != verbs.EventQPFatal || ev.QP == nil || seen[ev.QP] {
			t.Fatalf("event %v (%+v), want QP_FATAL of each QP once", ev.Type, ev)
		}
		seen[ev.QP] = true
	}
	for i, qp := range []*QP{a.qp, a2.qp} {
		if s := qp.State(); s != verbs.QPSErr {
			t.Errorf("QP %d: state %v, want ERR", i, s)
		}
	}
	if got := pollAll(cq); len(got) != 2 || got[0].WRID != 1 || got[1].WRID != 2 {
		t.Errorf("completions %+v, want WRIDs 1 and 2", got)
	}
}

// overrunReceive: the receive CQ overruns (rdma_rxe's responder
// RESPST_ERR_CQ_OVERFLOW): 4 SENDs into a QP whose receive CQ holds 2. The
// receiver gets CQ_ERR and QP_FATAL, its QP goes to ERROR, the completions
// that fitted are there and the lost ones counted; the sender, whose later
// SENDs the receiver no longer takes, ends with RETRY_EXC_ERR and flushes,
// each WR completing once, in order.
func overrunReceive(t *testing.T, l *link, a, b *side) {
	rcq := NewCQ(2)
	b.withQP(t, NewCQ(64), rcq)
	connectRC(t, a, b, verbs.MTU1024) // 4.2 ms ACK timeout, retry_cnt 7
	evs := events(l.b)
	const n = 4
	for i := range n {
		_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(10 + i), SGList: b.sge(i*64, 64)}})
		must(t, err)
	}
	before := l.b.Stats()
	for i := range n {
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(1 + i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 16)}})
		must(t, err)
	}
	sent := collect(l, t, a.scq, n)
	if len(*evs) != 2 || (*evs)[0].Type != verbs.EventCQErr || (*evs)[0].CQ != rcq || (*evs)[1].Type != verbs.EventQPFatal || (*evs)[1].QP != b.qp {
		t.Fatalf("events %+v, want CQ_ERR of the receive CQ, then QP_FATAL of the QP", *evs)
	}
	got := pollAll(rcq)
	if len(got) != 2 {
		t.Errorf("%d receive completions, want the 2 that fitted", len(got))
	}
	for i, w := range got {
		if w.WRID != uint64(10+i) || w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRecv || w.ByteLen != 16 {
			t.Errorf("receive completion %d: %+v, want WRID %d SUCCESS", i, w, 10+i)
		}
	}
	if s := b.qp.State(); s != verbs.QPSErr {
		t.Errorf("receiver QP %v, want ERR", s)
	}
	// The sender: successes, then RETRY_EXC_ERR, then flushes, in order.
	succ := 0
	for succ < n && sent[succ].Status == verbs.WCSuccess {
		succ++
	}
	for i, w := range sent {
		want := verbs.WCWRFlushErr
		switch {
		case i < succ:
			want = verbs.WCSuccess
		case i == succ:
			want = verbs.WCRetryExcErr
		}
		if w.WRID != uint64(1+i) || w.Status != want {
			t.Errorf("send completion %d: %+v, want WRID %d %v", i, w, 1+i, want)
		}
	}
	if succ < 2 || succ == n {
		t.Errorf("%d SENDs succeeded, want at least the 2 that fitted and not all %d", succ, n)
	}
	if lost := l.b.Stats().CQOverruns - before.CQOverruns; lost != n-2 {
		t.Errorf("CQOverruns %d, want %d (the receives that did not fit, completed or flushed)", lost, n-2)
	}
	for l.step() {
	}
	if k := len(pollAll(a.scq)); k != 0 {
		t.Errorf("the sender's CQ took %d more completions", k)
	}
	if k := len(pollAll(rcq)); k != 0 {
		t.Errorf("the receive CQ in error took %d more completions", k)
	}
}
