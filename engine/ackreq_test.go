package engine

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// sendAll takes every packet e has to send now, delivers each to peer, and
// returns the indexes (in sending order) of those that carry AckReq.
func sendAll(t *testing.T, e *Engine, now int64, buf []byte, peer *Engine) (asked []int, n int) {
	t.Helper()
	for {
		k, _, ok := e.Output(now, buf)
		if !ok {
			return asked, n
		}
		if wire.BTH(buf[:k]).AckReq() {
			asked = append(asked, n)
		}
		n++
		peer.Input(now, buf[:k], e.Local(), wire.RoCEv2Port)
	}
}

// TestAckReqBurst: a burst of WRITEs posted together asks for an ACK on its
// first message's last packet (no ACK is awaited yet), then every AckEvery
// packets, on each signaled WR's last packet, and on its last packet; the
// responder answers with no more ACKs than that, and the last retires
// everything.
func TestAckReqBurst(t *testing.T) {
	cases := []struct {
		name     string
		n, size  int   // WRITEs and bytes each (path MTU 1024)
		signaled []int // indexes of signaled WRs
		want     []int // packets (in sending order) with AckReq
		cc       bool  // under the default congestion control (else CCOff)
	}{
		{name: "one WRITE", n: 1, size: 64, want: []int{0}},
		{name: "a burst", n: 10, size: 64, want: []int{0, 9}},
		{name: "a signaled WR in the burst", n: 10, size: 64, signaled: []int{4}, want: []int{0, 4, 9}},
		{name: "three-packet WRITEs", n: 4, size: 3000, want: []int{2, 11}},
		{name: "a long burst", n: 200, size: 64, want: []int{0, 64, 128, 192, 199}},
		{name: "a long message", n: 1, size: 150 * 1024, want: []int{63, 127, 149}},
		// The path's first window (initWindow) ends the burst until ACKs
		// come: its last packet asks for one.
		{name: "a long burst, congestion control on", n: 200, size: 64, want: []int{0, initWindow - 1}, cc: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLinkCC(t, CCOff)
			if c.cc {
				l = newLinkCC(t, CCDefault)
			}
			x, y := newSide(t, l.a, verbs.QPTRC, 1<<18), newSide(t, l.b, verbs.QPTRC, 1<<18)
			connectRC(t, x, y, verbs.MTU1024)
			wrs := make([]verbs.SendWR, c.n)
			for i := range wrs {
				wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: x.sge(0, c.size),
					RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
			}
			for _, i := range c.signaled {
				wrs[i].Flags = verbs.SendSignaled
			}
			if _, err := x.qp.PostSend(wrs); err != nil {
				t.Fatal(err)
			}
			asked, _ := sendAll(t, l.a, l.now, l.buf, l.b)
			if !slices.Equal(asked, c.want) {
				t.Fatalf("packets with AckReq %v, want %v", asked, c.want)
			}
			if !x.qp.AckAwaited() {
				t.Error("AckAwaited false with the burst's last packet unacknowledged")
			}
			acks := outputAll(l.b, l.now, l.buf, l.a)
			if len(acks) == 0 || len(acks) > len(c.want) {
				t.Fatalf("the responder sent %v for %d requests of an ACK", acks, len(c.want))
			}
			for _, op := range acks {
				if op != wire.RCAcknowledge {
					t.Fatalf("the responder sent %v, want ACKs", acks)
				}
			}
			if n := x.qp.InFlight(); n != 0 || x.qp.AckAwaited() {
				t.Errorf("%d packets in flight after the responder's ACKs, AckAwaited %v", n, x.qp.AckAwaited())
			}
			if w := x.poll(x.scq); len(w) != len(c.signaled) {
				t.Errorf("%d completions, want %d (the signaled WRs)", len(w), len(c.signaled))
			}
		})
	}
}

// TestAckReqWindow: a window smaller than twice AckEvery lowers AckEvery,
// so that a window's packets always include one that asks for the ACK that
// reopens it: a burst longer than the window completes, and no AckEvery
// packets in a row go without one that asks.
func TestAckReqWindow(t *testing.T) {
	mk := func(addr string) *Engine {
		e, err := New(Config{Local: netip.MustParseAddr(addr), SourcePort: wire.RoCEv2Port, Window: 16})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := mk("10.0.0.1"), mk("10.0.0.2")
	if a.cfg.AckEvery != 8 {
		t.Fatalf("AckEvery %d with a window of 16, want 8", a.cfg.AckEvery)
	}
	l := &link{a: a, b: b, now: 1, buf: make([]byte, wire.MaxPMTU+128)}
	x, y := newSide(t, a, verbs.QPTRC, 1<<16), newSide(t, b, verbs.QPTRC, 1<<16)
	connectRC(t, x, y, verbs.MTU1024)
	wrs := make([]verbs.SendWR, 40)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: x.sge(0, 64),
			RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
	}
	wrs[39].Flags = verbs.SendSignaled
	if _, err := x.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	var asked []int
	sent := 0
	for range 20 { // rounds: the requester's packets, then the responder's ACKs
		got, n := sendAll(t, a, l.now, l.buf, b)
		for _, i := range got {
			asked = append(asked, sent+i)
		}
		sent += n
		outputAll(b, l.now, l.buf, a)
		if sent == 40 {
			break
		}
		if n == 0 {
			t.Fatalf("stalled after %d packets (AckReq on %v)", sent, asked)
		}
	}
	prev := -1
	for _, i := range append(asked, 40) {
		if i-prev > 8 {
			t.Errorf("packets with AckReq %v: %d in a row ask for nothing, want at most 7", asked, i-prev-1)
		}
		prev = i
	}
	if len(asked) == 0 || asked[len(asked)-1] != 39 {
		t.Errorf("packets with AckReq %v: the last does not ask", asked)
	}
	if w := x.poll(x.scq); len(w) != 1 || w[0].Status != verbs.WCSuccess {
		t.Errorf("completions %+v, want the signaled WR's", w)
	}
}
