package engine

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/wire"
)

// lowIDEngine returns an engine and a function that inputs a packet to
// no QP from peer with IPv4 Identification id (DF set) at GRO train
// position seg, and says whether its ICRC check dropped it or passed it
// (past the check it counts as UnknownQPDrops).
func lowIDEngine(t *testing.T) (*Engine, func(id, seg uint16) (icrc, passed uint64)) {
	e, err := New(Config{Local: netip.MustParseAddr("10.0.0.2"), SourcePort: wire.RoCEv2Port})
	if err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddr("10.0.0.1")
	pkt := func(id uint16) []byte {
		fl := wire.Flow{Src: peer, Dst: e.Local(), SrcPort: 0xC000, ID: id}
		f, err := wire.AppendFrame(nil, &fl, &wire.Header{Opcode: wire.RCSendOnly, DestQP: 0x99, PKey: wire.DefaultPKey}, make([]byte, 32))
		if err != nil {
			t.Fatal(err)
		}
		return f[wire.EthernetLen+wire.IPv4UDPLen:]
	}
	return e, func(id, seg uint16) (icrc, passed uint64) {
		before := e.Stats()
		e.InputPacket(1, pkt(id), peer, 0xC000, &RxInfo{GROSeg: seg})
		after := e.Stats()
		return after.ICRCDrops - before.ICRCDrops, after.UnknownQPDrops - before.UnknownQPDrops
	}
}

// TestLowIDFlow: once a flow's sender has shown that it writes small IPv4
// Identifications with DF (0 for a datagram alone, k for segment k of a
// GSO message), a packet whose ICRC only a large Identification explains
// (one corrupted packet in 32768 would) is dropped for its ICRC, unless
// such packets keep coming (the sender varies it after all); a flow that
// never showed it (rdma_rxe, counting up through 0 once per wrap) keeps the
// unknown-Identification check.
func TestLowIDFlow(t *testing.T) {
	e, send := lowIDEngine(t)
	// Not yet shown: any Identification passes.
	if icrc, _ := send(0x1234, 0); icrc != 0 {
		t.Fatal("a large Identification was refused before the flow showed anything")
	}
	// GSO trains of 15: Identifications 0..14, four times.
	for range lowIDProof {
		for k := range uint16(15) {
			if icrc, _ := send(k, 0); icrc != 0 {
				t.Fatalf("Identification %d refused", k)
			}
		}
	}
	if icrc, passed := send(wire.GSOMaxSegments-1, 0); icrc != 0 || passed != 1 {
		t.Fatal("the largest GSO segment's Identification refused")
	}
	for i := 1; i < lowIDPatience; i++ {
		id := uint16(wire.GSOMaxSegments + i*1000)
		if icrc, passed := send(id, 0); icrc != 1 || passed != 0 {
			t.Fatalf("packet %d explained only by Identification %d: %d ICRC drops, %d passed; want dropped", i, id, icrc, passed)
		}
	}
	if icrc, passed := send(0x4321, 0); icrc != 0 || passed != 1 {
		t.Fatalf("after %d such packets in a row: %d ICRC drops, %d passed; want it to pass", lowIDPatience, icrc, passed)
	}
	if s := e.Stats(); s.ICRCLowIDChecks == 0 || s.ICRCLowIDChecks > s.ICRCRecoveredChecks {
		t.Errorf("stats %+v", s)
	}
	// rdma_rxe counts up: through the wrap it shows 64 small
	// Identifications in a row, but only one 0, and is never held.
	e, send = lowIDEngine(t)
	for i := range 400 {
		id := uint16(65400 + i)
		if icrc, _ := send(id, 0); icrc != 0 {
			t.Fatalf("packet %d (Identification %d) refused", i, id)
		}
	}
	if s := e.Stats(); s.ICRCLowIDChecks != 0 {
		t.Errorf("a counting flow was held to small Identifications: %+v", s)
	}
	// A flow with changing Identifications is never held.
	_, send = lowIDEngine(t)
	for i := range 100 {
		id := uint16(i * 7919)
		if i%10 == 3 {
			id = 0
		}
		if icrc, _ := send(id, 0); icrc != 0 {
			t.Fatalf("packet %d (Identification %#x) refused", i, id)
		}
	}
}

// TestGROTrain: the packets after the first of a GRO train are held to the
// Identification the first one's ICRC showed plus their position (or, with
// DF, to the first's, when the second one shows that), on all 32 bits;
// a train whose first packet failed gives the others nothing to go by.
func TestGROTrain(t *testing.T) {
	tests := []struct {
		name  string
		ids   []uint16 // of segments 0, 1, ...
		drops []bool
	}{
		{"counting up (rdma_rxe)", []uint16{0x1234, 0x1235, 0x1236, 0x1237}, []bool{false, false, false, false}},
		{"GSO segments 3.. of a message", []uint16{3, 4, 5, 6, 7}, []bool{false, false, false, false, false}},
		{"a gap", []uint16{0x1234, 0x1235, 0x1237, 0x1237}, []bool{false, false, true, false}},
		{"equal (datagrams sent alone)", []uint16{0, 0, 0, 0}, []bool{false, false, false, false}},
		{"equal, then counting", []uint16{0, 0, 2, 0}, []bool{false, false, true, false}},
		{"counting, then equal", []uint16{9, 10, 9, 12}, []bool{false, false, true, false}},
		{"neither", []uint16{0x100, 0x300}, []bool{false, true}},
		{"wraps", []uint16{0xFFFF, 0, 1}, []bool{false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, send := lowIDEngine(t)
			var want uint64
			for j, id := range tt.ids {
				icrc, _ := send(id, uint16(j))
				if (icrc == 1) != tt.drops[j] {
					t.Errorf("segment %d (Identification %#x): dropped %v, want %v", j, id, icrc == 1, tt.drops[j])
				}
				if j > 0 && !tt.drops[j] {
					want++
				}
			}
			if s := e.Stats(); s.ICRCTrainChecks != want || s.ICRCRecoveredChecks != 1 {
				t.Errorf("%d train checks, %d recovered; want %d and 1", s.ICRCTrainChecks, s.ICRCRecoveredChecks, want)
			}
		})
	}
	// A new train (segment 0) starts over; a packet with a position but
	// no train before it is checked as one received alone.
	e, send := lowIDEngine(t)
	send(0x500, 0)
	send(0x501, 1)
	if icrc, _ := send(0x900, 0); icrc != 0 {
		t.Fatal("a new train's first packet refused")
	}
	if icrc, _ := send(0x901, 1); icrc != 0 {
		t.Fatal("the new train's second packet refused")
	}
	// A train whose packet 2 is missing: 3 on are checked as alone.
	send(0x902, 3)
	if s := e.Stats(); s.ICRCTrainChecks != 2 {
		t.Errorf("%d train checks, want 2", s.ICRCTrainChecks)
	}
}
