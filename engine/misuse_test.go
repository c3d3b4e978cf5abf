package engine

import (
	"errors"
	"fmt"
	"slices"
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

// misuseStep is one call of TestStateMachineMisuse: what it does, and the
// error it must return (nil: none), whose text names every word of names.
type misuseStep struct {
	what   string
	call   func() error
	target error
	names  []string
}

// misuse is TestStateMachineMisuse's world: an RC QP of a (qp) to be
// connected to one of b (peer), a UD QP of a, and the attributes of each
// transition.
type misuse struct {
	t                          *testing.T
	l                          *link
	a, b                       *side
	qp, peer, ud               *QP
	send                       []verbs.SendWR
	initAttr, rtrAttr, rtsAttr *verbs.QPAttr
	initMask, rtrMask, rtsMask verbs.QPAttrMask
}

func newMisuse(t *testing.T) *misuse {
	l := newLink(t)
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	m := &misuse{t: t, l: l, a: a, b: b, qp: a.qp, peer: b.qp, ud: newSide(t, l.a, verbs.QPTUD, 64).qp,
		send:     []verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 16)}},
		initAttr: &verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
		initMask: verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags,
		rtrAttr: &verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: b.qp.Num(), RQPSN: 5, MaxDestRdAtomic: 1,
			MinRNRTimer: 12, AHAttr: verbs.AHAttr{DGID: verbs.GIDFromAddr(l.b.Local()), PortNum: 1}},
		rtrMask: verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer,
		rtsAttr: &verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 9, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		rtsMask: verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic,
	}
	return m
}

func (m *misuse) modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) func() error {
	return func() error { return m.qp.Modify(attr, mask) }
}

// rtrWith returns the RTR attributes changed by f.
func (m *misuse) rtrWith(f func(*verbs.QPAttr)) *verbs.QPAttr {
	x := *m.rtrAttr
	f(&x)
	return &x
}

// posts calls post and checks that it posted want WRs.
func (m *misuse) posts(post func() (int, error), want int) func() error {
	return func() error {
		n, err := post()
		if n != want {
			m.t.Errorf("%d WRs posted, want %d", n, want)
		}
		return err
	}
}

func (m *misuse) state(want verbs.QPState) func() error {
	return func() error {
		if s := m.qp.State(); s != want {
			m.t.Fatalf("QP state %v, want %v", s, want)
		}
		return nil
	}
}

// stateSteps walk the RC QP from RESET to RTS, trying each refused
// transition on the way.
func (m *misuse) stateSteps() []misuseStep {
	qp, send, a := m.qp, m.send, m.a
	initAttr, initMask, rtrAttr, rtrMask, rtsAttr, rtsMask := m.initAttr, m.initMask, m.rtrAttr, m.rtrMask, m.rtsAttr, m.rtsMask
	mtu := func(code verbs.MTU) *verbs.QPAttr { return m.rtrWith(func(x *verbs.QPAttr) { x.PathMTU = code }) }
	return []misuseStep{
		{"PostSend in RESET", m.posts(func() (int, error) { return qp.PostSend(send) }, 0), verbs.ErrInvalidState, []string{"RESET"}},
		{"PostRecv in RESET", m.posts(func() (int, error) { return qp.PostRecv([]verbs.RecvWR{{WRID: 2, SGList: a.sge(0, 16)}}) }, 0), verbs.ErrInvalidState, []string{"RESET"}},
		{"RESET -> RTR", m.modify(rtrAttr, rtrMask), verbs.ErrInvalidState, []string{"RESET", "RTR"}},
		{"RESET -> RTS", m.modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState), verbs.ErrInvalidState, []string{"RESET", "RTS"}},
		{"RESET -> INIT without ACCESS_FLAGS", m.modify(initAttr, initMask&^verbs.AttrAccessFlags), verbs.ErrInvalidAttr, []string{"ACCESS_FLAGS"}},
		{"RESET -> INIT without PORT and PKEY_INDEX", m.modify(initAttr, initMask&^(verbs.AttrPort|verbs.AttrPKeyIndex)), verbs.ErrInvalidAttr, []string{"PORT", "PKEY_INDEX"}},
		{"RESET -> INIT with PATH_MTU", m.modify(initAttr, initMask|verbs.AttrPathMTU), verbs.ErrInvalidAttr, []string{"PATH_MTU"}},
		{"RESET -> INIT of an RC QP with QKEY", m.modify(initAttr, initMask|verbs.AttrQKey), verbs.ErrInvalidAttr, []string{"QKEY"}},
		{"still RESET", m.state(verbs.QPSReset), nil, nil},

		{"RESET -> INIT", m.modify(initAttr, initMask), nil, nil},
		{"PostSend in INIT", m.posts(func() (int, error) { return qp.PostSend(send) }, 0), verbs.ErrInvalidState, []string{"INIT"}},
		{"INIT -> RTS", m.modify(rtsAttr, rtsMask), verbs.ErrInvalidState, []string{"INIT", "RTS"}},
		{"INIT -> RTR without DEST_QPN", m.modify(rtrAttr, rtrMask&^verbs.AttrDestQPN), verbs.ErrInvalidAttr, []string{"DEST_QPN"}},
		{"INIT -> RTR with SQ_PSN", m.modify(rtrAttr, rtrMask|verbs.AttrSQPSN), verbs.ErrInvalidAttr, []string{"SQ_PSN"}},
		{"INIT -> RTR with path MTU code 0", m.modify(mtu(0), rtrMask), verbs.ErrInvalidAttr, []string{"path MTU", "0"}},
		{"INIT -> RTR with path MTU code 6", m.modify(mtu(6), rtrMask), verbs.ErrInvalidAttr, []string{"path MTU", "6"}},
		{"INIT -> RTR with path MTU code 7", m.modify(mtu(7), rtrMask), verbs.ErrInvalidAttr, []string{"path MTU", "7"}},
		{"INIT -> RTR with path MTU code 255", m.modify(mtu(255), rtrMask), verbs.ErrInvalidAttr, []string{"path MTU", "255"}},
		{"INIT -> RTR to a GID that is not IPv4-mapped", m.modify(m.rtrWith(func(x *verbs.QPAttr) { x.AHAttr.DGID = verbs.GID{0xfe, 0x80, 15: 1} }), rtrMask),
			verbs.ErrInvalidAttr, []string{"GID"}},
		{"INIT -> RTR claiming CUR_STATE RTS", m.modify(&verbs.QPAttr{State: verbs.QPSRTR, CurState: verbs.QPSRTS}, rtrMask|verbs.AttrCurState),
			verbs.ErrInvalidState, []string{"INIT", "RTS"}},
		{"still INIT", m.state(verbs.QPSInit), nil, nil},

		{"INIT -> RTR", m.modify(rtrAttr, rtrMask), nil, nil},
		{"RTR -> RTS without SQ_PSN", m.modify(rtsAttr, rtsMask&^verbs.AttrSQPSN), verbs.ErrInvalidAttr, []string{"SQ_PSN"}},
		{"RTR -> RTS with DEST_QPN", m.modify(rtsAttr, rtsMask|verbs.AttrDestQPN), verbs.ErrInvalidAttr, []string{"DEST_QPN"}},
		{"RTR -> RTS with retry_cnt 8", m.modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 9, Timeout: 14, RetryCnt: 8, RNRRetry: 7, MaxRdAtomic: 1}, rtsMask),
			verbs.ErrInvalidAttr, []string{"retry_cnt"}},
		{"still RTR", m.state(verbs.QPSRTR), nil, nil},
		{"RTR -> RTS", m.modify(rtsAttr, rtsMask), nil, nil},
		{"RTS -> RTR", m.modify(rtrAttr, rtrMask), verbs.ErrInvalidState, []string{"RTS", "RTR"}},
	}
}

// wrSteps post bad work requests on the RC QP in RTS (the bad one is
// named, those before it post) and misuse the UD QP (a send needs an
// address handle; RDMA is refused).
func (m *misuse) wrSteps() []misuseStep {
	qp, ud, a, b := m.qp, m.ud, m.a, m.b
	ah := testAH{verbs.AHAttr{DGID: verbs.GIDFromAddr(m.l.b.Local()), PortNum: 1}}
	return []misuseStep{
		{"atomic with a 4-byte SGE", m.posts(func() (int, error) {
			return qp.PostSend([]verbs.SendWR{m.send[0],
				{WRID: 0xBAD, Opcode: verbs.WRAtomicFetchAndAdd, SGList: a.sge(0, 4), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		}, 1), verbs.ErrInvalidWR, []string{"0xbad", "8-byte"}},
		{"atomic at a misaligned address", m.posts(func() (int, error) {
			return qp.PostSend([]verbs.SendWR{{WRID: 0xBAD2, Opcode: verbs.WRAtomicCmpAndSwp, SGList: a.sge(8, 8), RemoteAddr: b.mr.Addr() + 4, RKey: b.mr.RKey()}})
		}, 0), verbs.ErrInvalidWR, []string{"aligned"}},
		{"5 SGEs, max_send_sge 4", m.posts(func() (int, error) {
			return qp.PostSend([]verbs.SendWR{{WRID: 0xBAD3, Opcode: verbs.WRSend, SGList: slices.Repeat(a.sge(0, 1), 5)}})
		}, 0), verbs.ErrInvalidWR, []string{"max_send_sge"}},

		{"UD RESET -> INIT without QKEY", func() error {
			return ud.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort)
		}, verbs.ErrInvalidAttr, []string{"QKEY"}},
		{"UD RESET -> INIT with ACCESS_FLAGS", func() error {
			return ud.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: 1, AccessFlags: verbs.AccessRemoteWrite},
				verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey|verbs.AttrAccessFlags)
		}, verbs.ErrInvalidAttr, []string{"ACCESS_FLAGS"}},
		{"UD to RTS", func() error {
			must(m.t, ud.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
			must(m.t, ud.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState))
			return ud.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState|verbs.AttrSQPSN)
		}, nil, nil},
		{"UD send without an AH", m.posts(func() (int, error) {
			return ud.PostSend([]verbs.SendWR{{WRID: 0xAD, Opcode: verbs.WRSend, SGList: a.sge(0, 16), RemoteQPN: m.peer.Num(), RemoteQKey: 1}})
		}, 0), verbs.ErrInvalidWR, []string{"address handle", "0xad"}},
		{"RDMA WRITE on a UD QP", m.posts(func() (int, error) {
			return ud.PostSend([]verbs.SendWR{{WRID: 0xAE, Opcode: verbs.WRRDMAWrite, SGList: a.sge(0, 16), AH: ah, RemoteQPN: 1, RemoteQKey: 1}})
		}, 0), verbs.ErrInvalidWR, []string{"RDMA_WRITE", "UD"}},
	}
}

// works connects the peer and checks that the SEND posted in RTS before
// the bad WR reaches it.
func (m *misuse) works() {
	t, qp, peer, a, b := m.t, m.qp, m.peer, m.a, m.b
	must(t, peer.Modify(m.initAttr, m.initMask))
	must(t, peer.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: qp.Num(), RQPSN: 9, MaxDestRdAtomic: 1,
		MinRNRTimer: 12, AHAttr: verbs.AHAttr{DGID: verbs.GIDFromAddr(m.l.a.Local()), PortNum: 1}}, m.rtrMask))
	must(t, peer.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 5, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}, m.rtsMask))
	_, err := peer.PostRecv([]verbs.RecvWR{{WRID: 3, SGList: b.sge(0, 64)}})
	must(t, err)
	if w := collect(m.l, t, a.scq, 1); w[0] != (verbs.WC{WRID: 1, Status: verbs.WCSuccess, Opcode: verbs.WCSend, QPNum: qp.Num()}) {
		t.Errorf("send completion %+v", w[0])
	}
	if w := collect(m.l, t, b.rcq, 1); w[0] != (verbs.WC{WRID: 3, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: 16, QPNum: peer.Num(), SrcQP: qp.Num()}) {
		t.Errorf("receive completion %+v", w[0])
	}
	if string(b.buf[:16]) != "sixteen bytes ok" {
		t.Errorf("message %q", b.buf[:16])
	}
	for _, cq := range []*CQ{a.scq, a.rcq} {
		var w [4]verbs.WC
		if n := cq.Poll(w[:]); n != 0 {
			t.Errorf("more completions: %+v", w[:n])
		}
	}
}

// TestStateMachineMisuse: the QP state machine and work requests refuse
// misuse with errors that match the verbs sentinels and name the problem,
// and a refused call changes nothing: the QP still connects and works
// afterwards. provider/soft's netns misuse tries some of them through the
// device.
func TestStateMachineMisuse(t *testing.T) {
	m := newMisuse(t)
	copy(m.a.buf, "sixteen bytes ok") // gathered when the SEND goes out
	for _, s := range slices.Concat(m.stateSteps(), m.wrSteps()) {
		err := s.call()
		switch {
		case s.target == nil && err != nil:
			t.Fatalf("%s: %v", s.what, err)
		case s.target != nil && !errors.Is(err, s.target):
			t.Errorf("%s: error %v, want one matching %q", s.what, err, s.target)
		case s.target != nil:
			for _, w := range s.names {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not name %q", s.what, err, w)
				}
			}
			t.Logf("%s: %v", s.what, err)
		}
	}
	m.works()
}
