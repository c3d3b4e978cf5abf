package engine

import (
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// outputAll takes every packet e has to send now and returns their opcodes.
func outputAll(e *Engine, now int64, buf []byte, deliver *Engine) []wire.Opcode {
	var ops []wire.Opcode
	for {
		n, _, ok := e.Output(now, buf)
		if !ok {
			return ops
		}
		ops = append(ops, wire.BTH(buf[:n]).Opcode())
		if deliver != nil {
			deliver.Input(now, buf[:n], e.Local(), wire.RoCEv2Port)
		}
	}
}

// ackDelay is the responder's Config.AckDelay in the AckDelay tests.
const ackDelay = 5000

// ackDelayLink connects x on l.a to y on l.b, whose responder holds ACKs
// back for ackDelay.
func ackDelayLink(t *testing.T) (*link, *side, *side) {
	l := newLink(t)
	l.b.cfg.AckDelay = ackDelay
	x, y := newSide(t, l.a, verbs.QPTRC, 1<<12), newSide(t, l.b, verbs.QPTRC, 1<<12)
	connectRC(t, x, y, verbs.MTU1024)
	return l, x, y
}

// TestAckDelay: with Config.AckDelay the ACK of a SEND waits for the
// responder's own next request (and goes out just before it) or for the
// delay to end, whichever is first; the deadline says when; ACKs of plain
// WRITEs are never held.
func TestAckDelay(t *testing.T) {
	l, x, y := ackDelayLink(t)
	recv := func(s *side) {
		if _, err := s.qp.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: s.sge(2048, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(s *side, op verbs.WROpcode) {
		wr := verbs.SendWR{WRID: 1, Opcode: op, Flags: verbs.SendSignaled, SGList: s.sge(0, 64)}
		if op == verbs.WRRDMAWrite {
			wr.RemoteAddr, wr.RKey = y.mr.Addr(), y.mr.RKey()
		}
		if _, err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}

	// A SEND: its ACK is held, and the deadline is when it must go.
	recv(y)
	send(x, verbs.WRSend)
	if ops := outputAll(l.a, l.now, l.buf, l.b); len(ops) != 1 || ops[0] != wire.RCSendOnly {
		t.Fatalf("x sent %v", ops)
	}
	if ops := outputAll(l.b, l.now, l.buf, nil); len(ops) != 0 {
		t.Fatalf("y sent %v at once, want its ACK held", ops)
	}
	if d := l.b.NextDeadline(); d != l.now+ackDelay {
		t.Fatalf("y's deadline %d, want %d", d, l.now+ackDelay)
	}
	// y's reply releases the ACK, ahead of the reply.
	recv(x)
	send(y, verbs.WRSend)
	if ops := outputAll(l.b, l.now+1, l.buf, l.a); len(ops) != 2 || ops[0] != wire.RCAcknowledge || ops[1] != wire.RCSendOnly {
		t.Fatalf("y sent %v, want ACK then SEND ONLY", ops)
	}
	var sends, recvs int
	l.run(t, func() bool {
		for _, w := range x.poll(x.scq) {
			if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCSend {
				t.Fatalf("x's send completion %+v", w)
			}
			sends++
		}
		for _, w := range x.poll(x.rcq) {
			if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRecv {
				t.Fatalf("x's receive completion %+v", w)
			}
			recvs++
		}
		return sends == 1 && recvs == 1
	})

	// With no reply the ACK goes out when the delay ends, not before.
	l.now += 10 * ackDelay
	recv(y)
	send(x, verbs.WRSend)
	outputAll(l.a, l.now, l.buf, l.b)
	if ops := outputAll(l.b, l.now+ackDelay-1, l.buf, nil); len(ops) != 0 {
		t.Fatalf("y sent %v before the delay ended", ops)
	}
	if ops := outputAll(l.b, l.now+ackDelay, l.buf, l.a); len(ops) != 1 || ops[0] != wire.RCAcknowledge {
		t.Fatalf("y sent %v when the delay ended, want the ACK", ops)
	}

	// A plain WRITE completes no receive: its ACK is never held.
	send(x, verbs.WRRDMAWrite)
	outputAll(l.a, l.now, l.buf, l.b)
	if ops := outputAll(l.b, l.now, l.buf, nil); len(ops) != 1 || ops[0] != wire.RCAcknowledge {
		t.Fatalf("y sent %v for a WRITE, want its ACK at once", ops)
	}
}

// TestAckDelayStream: two SENDs taken in before the responder sends
// anything are a stream, not a request awaiting its reply: their ACK goes
// out at once, not after the delay.
func TestAckDelayStream(t *testing.T) {
	l, x, y := ackDelayLink(t)
	rwr := verbs.RecvWR{WRID: 9, SGList: y.sge(2048, 64)}
	if _, err := y.qp.PostRecv([]verbs.RecvWR{rwr, rwr}); err != nil {
		t.Fatal(err)
	}
	wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: x.sge(0, 64)}
	if _, err := x.qp.PostSend([]verbs.SendWR{wr, wr}); err != nil {
		t.Fatal(err)
	}
	if ops := outputAll(l.a, l.now, l.buf, l.b); len(ops) != 2 {
		t.Fatalf("x sent %v, want two SEND ONLY", ops)
	}
	ops := outputAll(l.b, l.now, l.buf, l.a)
	if len(ops) != 1 || ops[0] != wire.RCAcknowledge {
		t.Fatalf("y sent %v, want one ACK at once", ops)
	}
	if d := l.b.NextDeadline(); d != 0 && d <= l.now+ackDelay {
		t.Errorf("y's deadline %d: an ACK still held", d)
	}
	if w := x.poll(x.scq); len(w) != 0 {
		t.Fatalf("unsignaled SENDs completed: %+v", w)
	}
	// The ACK covered both: x has nothing in flight.
	if n := x.qp.InFlight(); n != 0 {
		t.Errorf("x has %d packets in flight after the ACK", n)
	}
}

// TestAckDelayStreamNoAckReq: a held ACK goes as soon as a message that
// asks for none follows (a stream whose requester has more queued), before
// the delay ends and before the stream's next ACK request.
func TestAckDelayStreamNoAckReq(t *testing.T) {
	l, x, y := ackDelayLink(t)
	rwr := verbs.RecvWR{WRID: 9, SGList: y.sge(2048, 64)}
	if _, err := y.qp.PostRecv([]verbs.RecvWR{rwr, rwr, rwr}); err != nil {
		t.Fatal(err)
	}
	wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: x.sge(0, 64)}
	if _, err := x.qp.PostSend([]verbs.SendWR{wr, wr, wr}); err != nil {
		t.Fatal(err)
	}
	// One packet at a time: the first asks (no ACK is awaited yet), the
	// second does not (a third is queued).
	step := func() bool {
		n, _, ok := l.a.Output(l.now, l.buf)
		if !ok {
			t.Fatal("x has nothing to send")
		}
		l.b.Input(l.now, l.buf[:n], l.a.Local(), wire.RoCEv2Port)
		return wire.BTH(l.buf[:n]).AckReq()
	}
	if !step() {
		t.Fatal("the first SEND does not ask for an ACK")
	}
	if ops := outputAll(l.b, l.now, l.buf, nil); len(ops) != 0 {
		t.Fatalf("y sent %v at once for a lone SEND, want its ACK held", ops)
	}
	if step() {
		t.Fatal("the second SEND of three asks for an ACK")
	}
	if ops := outputAll(l.b, l.now, l.buf, l.a); len(ops) != 1 || ops[0] != wire.RCAcknowledge {
		t.Fatalf("y sent %v behind a SEND that asked for no ACK, want the held ACK at once", ops)
	}
}
