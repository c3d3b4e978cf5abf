package engine

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/wire"
)

// TestZeroIDFlow: once a flow's sender has shown that it writes IPv4
// Identification 0 with DF, a packet whose ICRC only another Identification
// explains (one corrupted packet in 32768 would) is dropped for its ICRC,
// unless such packets keep coming (the sender varies it after all); a flow
// that never showed it (rdma_rxe) keeps the unknown-Identification check.
func TestZeroIDFlow(t *testing.T) {
	e, err := New(Config{Local: netip.MustParseAddr("10.0.0.2"), SourcePort: wire.RoCEv2Port})
	if err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddr("10.0.0.1")
	// A packet to no QP: past the ICRC check it counts as UnknownQPDrops.
	pkt := func(id uint16) []byte {
		fl := wire.Flow{Src: peer, Dst: e.Local(), SrcPort: 0xC000, ID: id}
		f, err := wire.AppendFrame(nil, &fl, &wire.Header{Opcode: wire.RCSendOnly, DestQP: 0x99, PKey: wire.DefaultPKey}, make([]byte, 32))
		if err != nil {
			t.Fatal(err)
		}
		return f[wire.EthernetLen+wire.IPv4UDPLen:]
	}
	send := func(id uint16) (icrc, passed uint64) {
		before := e.Stats()
		e.Input(1, pkt(id), peer, 0xC000)
		after := e.Stats()
		return after.ICRCDrops - before.ICRCDrops, after.UnknownQPDrops - before.UnknownQPDrops
	}
	// Not yet shown: any Identification passes.
	if icrc, _ := send(0x1234); icrc != 0 {
		t.Fatal("a non-zero Identification was refused before the flow showed anything")
	}
	for range zeroIDProof {
		if icrc, _ := send(0); icrc != 0 {
			t.Fatal("Identification 0 refused")
		}
	}
	for i := 1; i < zeroIDPatience; i++ {
		if icrc, passed := send(uint16(i)); icrc != 1 || passed != 0 {
			t.Fatalf("packet %d explained only by Identification %d: %d ICRC drops, %d passed; want dropped", i, i, icrc, passed)
		}
	}
	if icrc, passed := send(0x4321); icrc != 0 || passed != 1 {
		t.Fatalf("after %d such packets in a row: %d ICRC drops, %d passed; want it to pass", zeroIDPatience, icrc, passed)
	}
	// A flow with changing Identifications (rdma_rxe) is never held to 0.
	e2, _ := New(Config{Local: netip.MustParseAddr("10.0.0.2")})
	e = e2
	for i := range 100 {
		id := uint16(i * 7919)
		if i%10 == 3 {
			id = 0
		}
		if icrc, _ := send(id); icrc != 0 {
			t.Fatalf("packet %d (Identification %#x) refused", i, id)
		}
	}
}
