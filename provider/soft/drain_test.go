//go:build linux

package soft

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/verbs"
)

// TestWaitResponses: the ACK of a received message, held back for a reply
// far longer than the test (AckDelay 10 s), leaves as soon as
// WaitResponses is called, which returns once it has: the peer's SEND
// completes within the second, and Responses is 0.
func TestWaitResponses(t *testing.T) {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
	peer, err := New(Options{Name: "drainpeer", Conn: ca})
	e2eMust(t, err)
	t.Cleanup(func() { peer.Close() })
	d, err := New(Options{Name: "drain", Conn: cb, Engine: engine.Config{AckDelay: int64(10 * time.Second)}})
	e2eMust(t, err)
	t.Cleanup(func() { d.Close() })
	rp, rd := e2eNewRes(t, peer, 64), e2eNewRes(t, d, 64)
	cqp, cqd := rp.cq(t, 8), rd.cq(t, 8)
	qp, qd := rp.qp(t, verbs.QPTRC, cqp, cqp, nil, 4), rd.qp(t, verbs.QPTRC, cqd, cqd, nil, 4)
	e2eConnect(t, verbs.MTU1024, qp, peer, 10, qd, d, 20)
	_, err = qd.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: rd.sge(0, 32)}})
	e2eMust(t, err)
	_, err = qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: rp.sge(0, 8)}})
	e2eMust(t, err)
	if wc := e2ePoll(t, "the receive", cqd, 1); wc[0].Status != verbs.WCSuccess {
		t.Fatalf("the receive: %v", wc[0].Status)
	}
	q := qd.(*QP)
	t0 := time.Now()
	if !q.WaitResponses(5 * time.Second) {
		t.Fatalf("WaitResponses: %d responses still queued after 5 s", q.Responses())
	}
	if took := time.Since(t0); took > time.Second {
		t.Errorf("WaitResponses took %v: the held ACK waited for its delay", took)
	}
	if n := q.Responses(); n != 0 {
		t.Errorf("Responses: %d after WaitResponses", n)
	}
	wc := make([]verbs.WC, 1)
	for t1 := time.Now(); cqp.Poll(wc) == 0; time.Sleep(100 * time.Microsecond) {
		if time.Since(t1) > time.Second {
			t.Fatal("the peer's SEND did not complete within a second of WaitResponses")
		}
	}
	if wc[0].Status != verbs.WCSuccess {
		t.Errorf("the peer's SEND: %v", wc[0].Status)
	}
}
