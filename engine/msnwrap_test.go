package engine

import (
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// TestMSNWraps: the responder's message sequence number is 24 bits and
// wraps after 2^24 messages, as the PSN does. Before, an MSN past 0xFFFFFF
// made every later ACK unbuildable and the engine sent empty packets: an RC
// connection stalled after 16,777,216 messages. Each operation family that
// counts a message (SEND, WRITE with immediate, READ, atomic) crosses the
// wrap here, and every ACK's MSN is checked.
func TestMSNWraps(t *testing.T) {
	l, a, b := rcLink(t)
	b.qp.resp.msn = wire.MSNMask - 2
	l.capture = []captured{}
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, SGList: a.sge(0, 64)},
		{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, SGList: a.sge(0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 3, Opcode: verbs.WRRDMARead, SGList: a.sge(64, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, SGList: a.sge(128, 8), RemoteAddr: b.mr.Addr() + 256, RKey: b.mr.RKey(), CompareAdd: 1},
		{WRID: 5, Opcode: verbs.WRSend, SGList: a.sge(0, 64)},
	}
	for i := range wrs {
		wrs[i].Flags = verbs.SendSignaled
	}
	for i := 0; i < 3; i++ {
		_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(10 + i), SGList: b.sge(512, 64)}})
		must(t, err)
	}
	_, err := a.qp.PostSend(wrs)
	must(t, err)
	for l.step() {
	}
	wcs := a.poll(a.scq)
	if len(wcs) != len(wrs) {
		t.Fatalf("%d send completions, want %d: %+v", len(wcs), len(wrs), wcs)
	}
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess {
			t.Errorf("WR %d: %v", wc.WRID, wc.Status)
		}
	}
	if got := b.qp.resp.msn; got != 2 {
		t.Errorf("responder MSN after 5 messages from %#x: %#x, want 2", wire.MSNMask-2, got)
	}
	var last uint32
	acks := 0
	for _, c := range l.capture {
		if len(c.pkt) == 0 {
			t.Fatalf("an empty packet was sent %v -> %v", c.src, c.dst)
		}
		var p wire.Packet
		must(t, wire.Parse(c.pkt, &p))
		if ae := p.AETH(); ae != nil && c.src == l.b.Local() {
			acks++
			last = ae.MSN()
		}
	}
	if acks == 0 || last != 2 {
		t.Errorf("%d responses, last MSN %#x, want 2", acks, last)
	}
	if s := l.a.Stats(); s.TxBuildErrors != 0 {
		t.Errorf("requester TxBuildErrors %d", s.TxBuildErrors)
	}
	if s := l.b.Stats(); s.TxBuildErrors != 0 {
		t.Errorf("responder TxBuildErrors %d", s.TxBuildErrors)
	}
}
