//go:build linux

package soft

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/packetio/tee"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// TestAcksLast: a responder that holds the ACK of a message back for a
// reply (an AckDelay long enough that only the reply's post sends it)
// sends the reply first and the ACK after it in a Transmit of its own when
// the device is AcksLast, and the ACK first, with the reply, when it is
// not; both messages complete either way.
func TestAcksLast(t *testing.T) {
	for _, last := range []bool{false, true} {
		got := ackOrder(t, last)
		want := []wire.Opcode{wire.RCAcknowledge, wire.RCSendOnly}
		if last {
			want = []wire.Opcode{wire.RCSendOnly, wire.RCAcknowledge}
		}
		if !slices.Equal(got, want) {
			t.Errorf("AcksLast %v: the responder sent %v, want %v", last, got, want)
		}
	}
}

// ackOrder runs one message from a to b and b's reply over a pipe, and
// returns the opcodes of the packets b sent.
func ackOrder(t *testing.T, acksLast bool) []wire.Opcode {
	addrA, addrB := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	ca, cb := pipe.New(addrA, addrB, pipe.Options{})
	var mu sync.Mutex
	var sent []wire.Opcode
	rec := func(_ time.Time, d tee.Dir, _, _ netip.Addr, _ uint16, pkt []byte) {
		if d == tee.Out && len(pkt) > 0 {
			mu.Lock()
			sent = append(sent, wire.Opcode(pkt[0]))
			mu.Unlock()
		}
	}
	da, err := New(Options{Name: "acka", Conn: ca})
	e2eMust(t, err)
	t.Cleanup(func() { da.Close() })
	db, err := New(Options{Name: "ackb", Conn: tee.New(cb, rec), AcksLast: acksLast,
		Engine: engine.Config{AckDelay: int64(10 * time.Second)}})
	e2eMust(t, err)
	t.Cleanup(func() { db.Close() })
	ra, rb := e2eNewRes(t, da, 64), e2eNewRes(t, db, 64)
	cqa, cqb := ra.cq(t, 8), rb.cq(t, 8)
	qa, qb := ra.qp(t, verbs.QPTRC, cqa, cqa, nil, 4), rb.qp(t, verbs.QPTRC, cqb, cqb, nil, 4)
	e2eConnect(t, verbs.MTU1024, qa, da, 100, qb, db, 200)
	_, err = qa.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: ra.sge(0, 32)}})
	e2eMust(t, err)
	_, err = qb.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: rb.sge(0, 32)}})
	e2eMust(t, err)
	send := []verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: ra.sge(32, 8)}}
	_, err = qa.PostSend(send)
	e2eMust(t, err)
	if wc := e2ePoll(t, "b's receive", cqb, 1); wc[0].Status != verbs.WCSuccess {
		t.Fatalf("b's receive: %v", wc[0].Status)
	}
	send[0].SGList = rb.sge(32, 8)
	_, err = qb.PostSend(send)
	e2eMust(t, err)
	// a: its SEND's completion (the ACK came) and its receive (the reply).
	for _, wc := range e2ePoll(t, "a's completions", cqa, 2) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("a: %v", wc.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(sent)
}
