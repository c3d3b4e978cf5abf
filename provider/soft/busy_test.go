package soft

import (
	"bytes"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio"
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
	x, y := newEnd(t, da, verbs.QPTRC, 4096), newEnd(t, db, verbs.QPTRC, 4096)
	connect(t, x, y)
	const size, rounds = 64, 200
	send := func(e *end, round int) {
		t.Helper()
		msg := e.buf[:size]
		for i := range msg {
			msg[i] = byte(round + i)
		}
		_, err := e.qp.PostSend([]verbs.SendWR{{WRID: uint64(round), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: e.mr.Addr(), Length: size, LKey: e.mr.LKey()}}}})
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

// TestAcksLast: a busy device moves a batch's ACKs behind its other packets,
// keeping the order within each group and each packet's address and port,
// and leaves batches needing no move as they are; it allocates nothing.
func TestAcksLast(t *testing.T) {
	ack := func(id byte) packetio.Packet {
		b := make([]byte, 20, 256)
		b[0], b[19] = byte(wire.RCAcknowledge), id
		return packetio.Packet{Buf: b, Addr: netip.AddrFrom4([4]byte{10, 0, 0, id}), Port: uint16(id)}
	}
	req := func(id byte) packetio.Packet {
		b := make([]byte, 100, 256)
		b[0], b[99] = byte(wire.RCSendOnly), id
		return packetio.Packet{Buf: b, Addr: netip.AddrFrom4([4]byte{10, 0, 1, id}), Port: 1000 + uint16(id)}
	}
	// A packet's identity: its opcode and id, address and port.
	key := func(p packetio.Packet) string {
		return fmt.Sprintf("%#x/%d/%v/%d", p.Buf[0], p.Buf[len(p.Buf)-1], p.Addr, p.Port)
	}
	for _, tc := range []struct {
		name      string
		in, order []packetio.Packet
	}{
		{"ack then request", []packetio.Packet{ack(1), req(2)}, []packetio.Packet{req(2), ack(1)}},
		{"interleaved", []packetio.Packet{ack(1), req(2), ack(3), req(4), ack(5)}, []packetio.Packet{req(2), req(4), ack(1), ack(3), ack(5)}},
		{"requests first", []packetio.Packet{req(1), req(2), ack(3)}, []packetio.Packet{req(1), req(2), ack(3)}},
		{"acks only", []packetio.Packet{ack(1), ack(2)}, []packetio.Packet{ack(1), ack(2)}},
		{"requests only", []packetio.Packet{req(1), req(2)}, []packetio.Packet{req(1), req(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Device{ackScratch: make([]ackCopy, 8)}
			batch := append([]packetio.Packet(nil), tc.in...)
			bufs := make([]*byte, len(batch))
			for i := range batch {
				bufs[i] = &batch[i].Buf[:1][0]
			}
			d.acksLast(batch)
			for i := range batch {
				if got, want := key(batch[i]), key(tc.order[i]); got != want {
					t.Errorf("packet %d: %s, want %s", i, got, want)
				}
				if len(batch[i].Buf) != len(tc.order[i].Buf) {
					t.Errorf("packet %d: %d bytes, want %d", i, len(batch[i].Buf), len(tc.order[i].Buf))
				}
				if &batch[i].Buf[:1][0] != bufs[i] {
					t.Errorf("packet %d: moved to another buffer: the lent batch's buffers must stay in place", i)
				}
			}
		})
	}
	d := &Device{ackScratch: make([]ackCopy, 8)}
	batch := []packetio.Packet{ack(1), req(2), ack(3), req(4)}
	if n := testing.AllocsPerRun(100, func() { d.acksLast(batch) }); n != 0 {
		t.Errorf("acksLast allocates %v times", n)
	}
}
