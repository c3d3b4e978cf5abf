package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// misuseQP is an RC QP of l.a in RTS aimed at QP 0x77 of l.b, where no such
// QP exists (it never hears back), with its own send and receive CQs.
func misuseQP(t *testing.T, l *link, sendWR, recvWR uint32) (*QP, *CQ, *CQ, *MR) {
	t.Helper()
	e := l.a
	pd := e.AllocPD()
	mr, err := e.MRs.Register(make([]byte, 1<<16), verbs.AccessLocalWrite, pd)
	must(t, err)
	scq, rcq := NewCQ(64), NewCQ(64)
	qp, err := e.CreateQP(&QPInit{Type: verbs.QPTRC, PD: pd, SendCQ: scq, RecvCQ: rcq, Cap: verbs.QPCap{MaxSendWR: sendWR, MaxRecvWR: recvWR}})
	must(t, err)
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: 0x77, MaxDestRdAtomic: 1,
		AHAttr: verbs.AHAttr{DGID: verbs.GIDFromAddr(l.b.Local())}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	return qp, scq, rcq, mr
}

// TestQueueFull: a full send or receive queue makes the post return the WRs
// that fit and an error naming the queue and its depth (verbs.ErrQueueFull);
// nothing blocks, nothing is dropped.
func TestQueueFull(t *testing.T) {
	l := newLink(t)
	qp, _, _, mr := misuseQP(t, l, 4, 2)
	sge := []verbs.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}
	wrs := make([]verbs.SendWR, 6)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: sge, RemoteAddr: 0x1000, RKey: 1}
	}
	rwrs := []verbs.RecvWR{{WRID: 1, SGList: sge}, {WRID: 2, SGList: sge}, {WRID: 3, SGList: sge}}
	for _, c := range []struct {
		name  string
		post  func() (int, error)
		want  int
		names []string
	}{
		{"PostSend of 6 into a send queue of 4", func() (int, error) { return qp.PostSend(wrs) }, 4, []string{"send queue", "max_send_wr 4"}},
		{"PostRecv of 3 into a receive queue of 2", func() (int, error) { return qp.PostRecv(rwrs) }, 2, []string{"receive queue", "max_recv_wr 2"}},
	} {
		n, err := c.post()
		if n != c.want || !errors.Is(err, verbs.ErrQueueFull) {
			t.Errorf("%s: %d posted, %v", c.name, n, err)
			continue
		}
		for _, s := range c.names {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not name %s", c.name, err, s)
			}
		}
		t.Logf("%s: %v", c.name, err)
	}
}

// TestDestroyFlushes: destroying a QP with work outstanding (the first
// packets sent) completes every send and receive WR with WR_FLUSH_ERR, in
// order, and later posts fail with verbs.ErrDestroyed (they are not lost
// silently); a second Destroy is harmless.
func TestDestroyFlushes(t *testing.T) {
	l := newLink(t)
	qp, scq, rcq, mr := misuseQP(t, l, 8, 8)
	sge := []verbs.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}
	_, err := qp.PostRecv([]verbs.RecvWR{{WRID: 10, SGList: sge}, {WRID: 11, SGList: sge}})
	must(t, err)
	_, err = qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sge},
		{WRID: 2, Opcode: verbs.WRRDMARead, SGList: sge, RemoteAddr: 0x1000, RKey: 1}, // unsignaled: flushed all the same
		{WRID: 3, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: sge, RemoteAddr: 0x1000, RKey: 1},
	})
	must(t, err)
	if !l.step() {
		t.Fatal("nothing sent")
	}
	qp.Destroy()
	for _, c := range []struct {
		name  string
		cq    *CQ
		wrids []uint64
	}{{"send", scq, []uint64{1, 2, 3}}, {"receive", rcq, []uint64{10, 11}}} {
		var w [8]verbs.WC
		got := w[:c.cq.Poll(w[:])]
		if len(got) != len(c.wrids) {
			t.Errorf("%s: %d completions %+v, want %d", c.name, len(got), got, len(c.wrids))
		}
		for i, w := range got {
			if i >= len(c.wrids) || w.WRID != c.wrids[i] || w.Status != verbs.WCWRFlushErr {
				t.Errorf("%s completion %d: %+v, want WRID %d WR_FLUSH_ERR", c.name, i, w, c.wrids[min(i, len(c.wrids)-1)])
			}
		}
	}
	if _, err := qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRSend, SGList: sge}}); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("PostSend after Destroy: %v, want verbs.ErrDestroyed", err)
	}
	if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: 12, SGList: sge}}); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("PostRecv after Destroy: %v, want verbs.ErrDestroyed", err)
	}
	qp.Destroy() // twice: harmless
	for l.step() {
	}
	l.a.Tick(l.now + 1e12)
	for name, cq := range map[string]*CQ{"send": scq, "receive": rcq} {
		var w [8]verbs.WC
		if n := cq.Poll(w[:]); n != 0 {
			t.Errorf("%s CQ: %d more completions %+v", name, n, w[:n])
		}
	}
}

// TestRNRRetryExceeded: a peer that never posts a receive answers every
// SEND with an RNR NAK; after rnr_retry retries the SEND completes with
// RNR_RETRY_EXC_ERR, the QP goes to ERROR and the WRs behind it are
// flushed, in order.
func TestRNRRetryExceeded(t *testing.T) {
	for _, rnrRetry := range []uint8{0, 2, 6} {
		t.Run(fmt.Sprintf("rnr_retry_%d", rnrRetry), func(t *testing.T) {
			l := newLink(t)
			a, b := newSide(t, l.a, verbs.QPTRC, 4096), newSide(t, l.b, verbs.QPTRC, 4096)
			connectRCRetry(t, a, b, verbs.MTU1024, rnrRetry)
			sa, sb := l.a.Stats(), l.b.Stats()
			_, err := a.qp.PostSend([]verbs.SendWR{
				{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 16)},
				{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 16), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
			})
			must(t, err)
			got := collect(l, t, a.scq, 2)
			if got[0].WRID != 1 || got[0].Status != verbs.WCRNRRetryExcErr || got[1].WRID != 2 || got[1].Status != verbs.WCWRFlushErr {
				t.Fatalf("completions %+v, want WRID 1 RNR_RETRY_EXC_ERR, WRID 2 WR_FLUSH_ERR", got)
			}
			if s := a.qp.State(); s != verbs.QPSErr {
				t.Errorf("QP state %v, want ERR", s)
			}
			if n := l.a.Stats().RNRReceived - sa.RNRReceived; n != uint64(rnrRetry)+1 {
				t.Errorf("%d RNR NAKs received, want rnr_retry + 1 = %d", n, rnrRetry+1)
			}
			if n := l.b.Stats().RNRSent - sb.RNRSent; n != uint64(rnrRetry)+1 {
				t.Errorf("%d RNR NAKs sent, want %d", n, rnrRetry+1)
			}
		})
	}
}
