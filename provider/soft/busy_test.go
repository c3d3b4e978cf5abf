package soft

import (
	"bytes"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// TestBusyPingPong: two busy devices (Options.Busy: drivers that never
// block) over UDP on loopback complete a 64-byte SEND ping-pong, every
// message and reply arriving intact and in order, while the application
// polls its CQs without ever waiting on a channel; then each Close returns
// with its driver stopped (the package's TestMain fails the test if a
// goroutine is left spinning).
func TestBusyPingPong(t *testing.T) {
	env := perfLoopback()
	da, db := env.devices(t, Options{Busy: true})
	x, y := newEnd(t, da, verbs.QPTRC, 64<<10), newEnd(t, db, verbs.QPTRC, 64<<10)
	connect(t, x, y)
	const size, rounds = 64, 200
	send := func(e *end, round int) {
		t.Helper()
		// Each round's message in memory of its own: a send's memory must
		// not change until its completion, which this loop does not await
		// (a resend, such as a tail loss probe's, reads it again).
		off := 2048 + round*size
		msg := e.buf[off : off+size]
		for i := range msg {
			msg[i] = byte(round + i)
		}
		_, err := e.qp.PostSend([]verbs.SendWR{{WRID: uint64(round), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: e.mr.Addr() + uint64(off), Length: size, LKey: e.mr.LKey()}}}})
		must(t, err)
	}
	recv := func(e *end) {
		t.Helper()
		_, err := e.qp.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{{Addr: e.mr.Addr() + 1024, Length: size, LKey: e.mr.LKey()}}}})
		must(t, err)
	}
	// await polls e's CQ without waiting until a receive completes (send
	// completions are checked and counted), for at most 10 s.
	sent := map[*end]int{}
	await := func(e *end, round int) {
		t.Helper()
		wc := make([]verbs.WC, 1) // one at a time: the receive ends the loop
		deadline := time.Now().Add(10 * time.Second)
		for {
			k := e.cq.Poll(wc)
			for _, w := range wc[:k] {
				if w.Status != verbs.WCSuccess {
					t.Fatalf("round %d: completion %v", round, w.Status)
				}
				if w.Opcode != verbs.WCRecv {
					sent[e]++
					continue
				}
				want := make([]byte, size)
				for i := range want {
					want[i] = byte(round + i)
				}
				if got := e.buf[1024 : 1024+size]; !bytes.Equal(got, want) {
					t.Fatalf("round %d: received % x, want % x", round, got[:8], want[:8])
				}
				return
			}
			if k == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("round %d: no message in 10 s", round)
				}
				runtime.Gosched()
			}
		}
	}
	recv(y)
	for r := 0; r < rounds; r++ {
		recv(x)
		send(x, r)
		await(y, r)
		recv(y)
		send(y, r)
		await(x, r)
	}
	// The last sends' completions: ACKs the drivers' timers (AckDelay)
	// release, with nobody posting anything.
	wc := make([]verbs.WC, 4)
	deadline := time.Now().Add(10 * time.Second)
	for _, e := range []*end{x, y} {
		for sent[e] < rounds {
			k := e.cq.Poll(wc)
			for _, w := range wc[:k] {
				if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCSend {
					t.Fatalf("completion %v %v, want a successful send", w.Opcode, w.Status)
				}
				sent[e]++
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d send completions", sent[e], rounds)
			}
			runtime.Gosched()
		}
	}
	for _, d := range []*Device{da, db} {
		closed := make(chan error, 1)
		go func() { closed <- d.Close() }()
		select {
		case err := <-closed:
			must(t, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Close did not return in 10 s: its busy driver still runs", d.Name())
		}
		select {
		case <-d.done:
		default:
			t.Fatalf("%s: closed with its driver still running", d.Name())
		}
	}
}

// TestAckAside: a busy device's flush sets its ACKs (and NAKs) aside, only
// those and only while there is room, and sends them after the flush's other
// packets in a Transmit of their own, in order, each with its address and
// port, allocating nothing; a device that is not busy sets none aside.
func TestAckAside(t *testing.T) {
	ack := func(id byte) []byte {
		b := make([]byte, 20)
		b[0], b[19] = byte(wire.RCAcknowledge), id
		return b
	}
	peer := netip.MustParseAddr("10.0.0.2")
	addr := func(byte) netip.Addr { return peer } // the pipe's one destination; ports tell the packets apart
	a, b := pipe.New(netip.MustParseAddr("10.0.0.1"), peer, pipe.Options{})
	t.Cleanup(func() { a.Close(); b.Close() })
	d := &Device{conn: a, opts: Options{Busy: true}, ackScratch: make([]ackCopy, 3)}

	req := make([]byte, 100)
	req[0] = byte(wire.RCSendOnly)
	long := append(ack(9), make([]byte, ackScratchLen)...) // no ACK is that long
	for i, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"ack", ack(1), true},
		{"request", req, false},
		{"too long", long, false},
		{"ack", ack(2), true},
		{"empty", nil, false},
		{"ack", ack(3), true},
		{"no room", ack(4), false},
	} {
		n := 0
		for _, s := range d.ackScratch {
			if s.n > 0 {
				n++
			}
		}
		if got := d.ackAside(n, tc.b, addr(byte(i)), uint16(1000+i)); got != tc.want {
			t.Errorf("%d %s: set aside %v, want %v", i, tc.name, got, tc.want)
		}
	}
	if n := d.sendAside(3); n != 3 {
		t.Fatalf("sendAside sent %d, want 3", n)
	}
	if s := a.Stats(); s.TxBatches != 1 || s.PacketsOut != 3 {
		t.Errorf("stats %+v: want one Transmit of 3 packets", s)
	}
	var got []packetio.Packet
	for deadline := time.Now().Add(5 * time.Second); len(got) < 3 && time.Now().Before(deadline); {
		pkts, err := b.Receive(time.Now().Add(100 * time.Millisecond))
		must(t, err)
		for _, p := range pkts {
			p.Buf = bytes.Clone(p.Buf)
			got = append(got, p)
		}
	}
	want := []struct {
		id   byte
		from int
	}{{1, 0}, {2, 3}, {3, 5}}
	if len(got) != len(want) {
		t.Fatalf("received %d packets, want %d", len(got), len(want))
	}
	for i, w := range want {
		if !bytes.Equal(got[i].Buf, ack(w.id)) || got[i].Port != uint16(1000+w.from) {
			t.Errorf("packet %d: % x from port %d, want ACK %d from port %d", i, got[i].Buf, got[i].Port, w.id, 1000+w.from)
		}
	}
	a5, at5 := ack(5), addr(5)
	if n := testing.AllocsPerRun(100, func() {
		if !d.ackAside(0, a5, at5, 5) {
			t.Fatal("not set aside")
		}
	}); n != 0 {
		t.Errorf("ackAside allocates %v times", n)
	}
	idle := &Device{conn: a, ackScratch: nil}
	if idle.ackAside(0, ack(1), addr(1), 1) {
		t.Error("a device that is not busy set an ACK aside")
	}
}
