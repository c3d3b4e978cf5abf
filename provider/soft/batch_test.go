package soft

import (
	"testing"
	"time"

	"github.com/goroce/goroce/engine"

	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
)

// TestSendsFillGSOMessages: eight 64 KiB SENDs posted at once to an idle RC
// QP over real UDP sockets with GSO (path MTU 4096: 16 packets of equal
// size each) leave in one transmit call as nine GSO messages, eight of the
// kernel's 15 packets at most and one of the 8 left: the packets of one
// message run on into the next's GSO message. A batch of one GSO message's
// 64 packets (DefaultBatch before it was four) took two transmit calls and
// ten GSO messages, each batch ending with a short one. All eight arrive
// whole in the peer's receives. The congestion control is off: its first
// window (32 packets) would send the rest a round trip later.
func TestSendsFillGSOMessages(t *testing.T) {
	env := perfLoopback()
	da, db := env.devices(t, Options{Spin: -1, Engine: engine.Config{Congestion: engine.CCOff}})
	if o := da.conn.(*udp.Conn).Offloads(); !o.GSO {
		t.Skip("no UDP GSO on loopback here: " + o.GSOReason)
	}
	const msgs, size = 8, 64 << 10
	a, b := perfEnd(t, da, msgs*size, msgs), perfEnd(t, db, msgs*size, msgs)
	connectPerf(t, a, b, verbs.MTU4096, 0)
	for i := range a.buf {
		a.buf[i] = byte(i*7 + i>>16)
	}
	recvs := make([]verbs.RecvWR, msgs)
	sends := make([]verbs.SendWR, msgs)
	for i := range msgs {
		off := uint64(i * size)
		recvs[i] = verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{{Addr: b.mr.Addr() + off, Length: size, LKey: b.mr.LKey()}}}
		sends[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: a.mr.Addr() + off, Length: size, LKey: a.mr.LKey()}}}
	}
	if _, err := b.qp.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	before := da.conn.Stats()
	if _, err := a.qp.PostSend(sends); err != nil {
		t.Fatal(err)
	}
	sent, received := 0, 0
	wc := make([]verbs.WC, 16)
	deadline := time.Now().Add(10 * time.Second)
	for sent < msgs || received < msgs {
		k := a.cq.Poll(wc)
		k += b.cq.Poll(wc[k:])
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("WR %d (%v): %v", w.WRID, w.Opcode, w.Status)
			}
			if w.Opcode == verbs.WCRecv {
				if w.ByteLen != size {
					t.Fatalf("receive %d: %d bytes, want %d", w.WRID, w.ByteLen, size)
				}
				received++
			} else {
				sent++
			}
		}
		if k == 0 && time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d of %d sends and %d receives completed", sent, msgs, received)
		}
	}
	db.Stats() // the receiver wrote under its mutex; read after taking it
	for i := range a.buf {
		if b.buf[i] != a.buf[i] {
			t.Fatalf("byte %d: %#x, want %#x", i, b.buf[i], a.buf[i])
		}
	}
	s := da.conn.Stats()
	pkts := msgs * size / 4096
	if out := s.PacketsOut - before.PacketsOut; out != uint64(pkts) {
		t.Fatalf("%d packets out, want %d (no retransmission on loopback)", out, pkts)
	}
	gso, segs, calls := s.GSOMessages-before.GSOMessages, s.GSOSegments-before.GSOSegments, s.TxBatches-before.TxBatches
	t.Logf("%d packets in %d GSO messages (%d segments), %d transmit calls", pkts, gso, segs, calls)
	if calls != 1 || gso != 9 || segs != uint64(pkts) {
		t.Errorf("%d packets in %d GSO messages (%d segments) and %d transmit calls, want 9 messages of all %d in 1 call",
			pkts, gso, segs, calls, pkts)
	}
}
