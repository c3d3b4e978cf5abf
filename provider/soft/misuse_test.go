//go:build linux

package soft

import (
	"errors"
	"net/netip"
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

// TestDestroyFlushes: destroying a QP with work outstanding completes every
// send and receive WR with WR_FLUSH_ERR, in order, and later posts fail with
// verbs.ErrDestroyed (they are not lost silently). The smoke, through the
// device and over a UDP socket, of the misuse the engine's tests cover
// (engine: TestQueueFull, TestDestroyFlushes, TestRNRRetryExceeded).
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
