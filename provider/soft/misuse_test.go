//go:build linux

package soft

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/verbs"
)

// silentPeer is an address on loopback where nothing listens: a QP aimed at
// it never hears back.
var silentPeer = netip.MustParseAddr("127.0.9.8")

// misuseQP is an RC QP of d in RTS aimed at QP 0x77 of the silent peer, with
// its own send and receive CQs.
func misuseQP(t *testing.T, d *Device, sendWR, recvWR uint32) (verbs.QP, verbs.CQ, verbs.CQ, verbs.MR) {
	t.Helper()
	r := e2eNewRes(t, d, 1<<16)
	scq, rcq := r.cq(t, 64), r.cq(t, 64)
	qp, err := r.pd.CreateQP(&verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: sendWR, MaxRecvWR: recvWR}})
	must(t, err)
	e2eRCToRTS(t, qp, verbs.MTU1024, 0x77, verbs.GIDFromAddr(silentPeer), 0, 0)
	return qp, scq, rcq, r.mr
}

// TestQueueFull: a full send or receive queue makes the post return the WRs
// that fit and an error naming the queue and its depth (verbs.ErrQueueFull);
// nothing blocks, nothing is dropped.
func TestQueueFull(t *testing.T) {
	da, _ := udpLoopDevices(t, engine.Config{})
	qp, _, _, mr := misuseQP(t, da, 4, 2)
	sge := []verbs.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}
	wrs := make([]verbs.SendWR, 6)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: sge, RemoteAddr: 0x1000, RKey: 1}
	}
	n, err := qp.PostSend(wrs)
	if n != 4 || !errors.Is(err, verbs.ErrQueueFull) || !strings.Contains(err.Error(), "send queue") || !strings.Contains(err.Error(), "max_send_wr 4") {
		t.Errorf("PostSend of 6 into a send queue of 4: %d posted, %v", n, err)
	}
	rwrs := []verbs.RecvWR{{WRID: 1, SGList: sge}, {WRID: 2, SGList: sge}, {WRID: 3, SGList: sge}}
	n, err = qp.PostRecv(rwrs)
	if n != 2 || !errors.Is(err, verbs.ErrQueueFull) || !strings.Contains(err.Error(), "receive queue") || !strings.Contains(err.Error(), "max_recv_wr 2") {
		t.Errorf("PostRecv of 3 into a receive queue of 2: %d posted, %v", n, err)
	}
	t.Logf("%v", err)
}

// TestDestroyFlushes: destroying a QP with work outstanding completes every
// send and receive WR with WR_FLUSH_ERR, in order, and later posts fail with
// verbs.ErrDestroyed (they are not lost silently).
func TestDestroyFlushes(t *testing.T) {
	da, _ := udpLoopDevices(t, engine.Config{})
	qp, scq, rcq, mr := misuseQP(t, da, 8, 8)
	sge := []verbs.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}
	_, err := qp.PostRecv([]verbs.RecvWR{{WRID: 10, SGList: sge}, {WRID: 11, SGList: sge}})
	must(t, err)
	_, err = qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sge},
		{WRID: 2, Opcode: verbs.WRRDMARead, SGList: sge, RemoteAddr: 0x1000, RKey: 1}, // unsignaled: flushed all the same
		{WRID: 3, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: sge, RemoteAddr: 0x1000, RKey: 1},
	})
	must(t, err)
	time.Sleep(5 * time.Millisecond) // let the first packets go out
	must(t, qp.Destroy())
	for _, c := range []struct {
		name  string
		cq    verbs.CQ
		wrids []uint64
	}{{"send", scq, []uint64{1, 2, 3}}, {"receive", rcq, []uint64{10, 11}}} {
		got := wait(t, c.cq, len(c.wrids))
		for i, w := range got {
			if w.WRID != c.wrids[i] || w.Status != verbs.WCWRFlushErr {
				t.Errorf("%s completion %d: %+v, want WRID %d WR_FLUSH_ERR", c.name, i, w, c.wrids[i])
			}
		}
	}
	_, err = qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRSend, SGList: sge}})
	if !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("PostSend after Destroy: %v, want verbs.ErrDestroyed", err)
	}
	_, err = qp.PostRecv([]verbs.RecvWR{{WRID: 12, SGList: sge}})
	if !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("PostRecv after Destroy: %v, want verbs.ErrDestroyed", err)
	}
	must(t, qp.Destroy()) // twice: harmless
	time.Sleep(10 * time.Millisecond)
	e2eNoMore(t, "send CQ", scq)
	e2eNoMore(t, "receive CQ", rcq)
}

// TestRNRRetryExceeded: a peer that never posts a receive answers every
// SEND with an RNR NAK; after rnr_retry retries the SEND completes with
// RNR_RETRY_EXC_ERR, the QP goes to ERROR and the WRs behind it are
// flushed, in order.
func TestRNRRetryExceeded(t *testing.T) {
	const rnrRetry = 2
	da, db := udpLoopDevices(t, engine.Config{})
	a, b := newEnd(t, da, verbs.QPTRC, 4096), newEnd(t, db, verbs.QPTRC, 4096)
	vanishRCToRTS(t, b.qp, a.qp.Num(), da.GID(), 0, 14, 7) // min_rnr_timer 1: 0.01 ms
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: b.qp.Num(), MaxDestRdAtomic: 1, MinRNRTimer: 1,
		AHAttr: verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: db.GID(), PortNum: 1}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: rnrRetry, MaxRdAtomic: 1},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	sa, sb := da.Stats(), db.Stats()
	sge := []verbs.SGE{{Addr: a.mr.Addr(), Length: 16, LKey: a.mr.LKey()}}
	_, err := a.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sge},
		{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: sge, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	})
	must(t, err)
	got := wait(t, a.cq, 2)
	if got[0].WRID != 1 || got[0].Status != verbs.WCRNRRetryExcErr || got[1].WRID != 2 || got[1].Status != verbs.WCWRFlushErr {
		t.Fatalf("completions %+v, want WRID 1 RNR_RETRY_EXC_ERR, WRID 2 WR_FLUSH_ERR", got)
	}
	attr, err := a.qp.Query()
	must(t, err)
	if attr.State != verbs.QPSErr {
		t.Errorf("QP state %v, want ERR", attr.State)
	}
	if n := da.Stats().RNRReceived - sa.RNRReceived; n != rnrRetry+1 {
		t.Errorf("%d RNR NAKs received, want rnr_retry + 1 = %d", n, rnrRetry+1)
	}
	if n := db.Stats().RNRSent - sb.RNRSent; n != rnrRetry+1 {
		t.Errorf("%d RNR NAKs sent, want %d", n, rnrRetry+1)
	}
}
