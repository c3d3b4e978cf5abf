package wire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// icrcTestFlows are the flows the FlowICRC tests run over: two IPv4 flows
// (a kernel-picked and the RoCEv2 source port) and an IPv6 one.
var icrcTestFlows = []Flow{
	{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC001},
	{Src: addr4(192, 168, 7, 9), Dst: addr4(10, 99, 0, 1), SrcPort: 4791, DstPort: 4791},
	{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), SrcPort: 0xC002},
}

// TestFlowICRC: FlowICRC agrees with Flow.SetDatagramICRC and
// CheckDatagramICRC at every length, over IPv4 and IPv6, recovers unknown
// Identifications and catches flipped bits.
func TestFlowICRC(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, fl := range icrcTestFlows {
		c, err := NewFlowICRC(fl)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Is(fl.Src, fl.Dst, fl.SrcPort, fl.dstPort()) || c.Is(fl.Src, fl.Dst, fl.SrcPort+1, fl.dstPort()) {
			t.Fatal("Is")
		}
		for n := 0; n <= 4200; n += 1 + r.IntN(97) {
			h := Header{Opcode: RCSendOnly, DestQP: QPN(n), PSN: PSN(n * 7), PKey: DefaultPKey, AckReq: n%2 == 0}
			pkt, err := AppendTransport(nil, &h, bytes.Repeat([]byte{byte(n)}, n))
			if err != nil {
				t.Fatal(err)
			}
			pkt[4] |= 0xC0 // FECN and BECN: masked
			if err := c.Set(pkt); err != nil {
				t.Fatal(err)
			}
			want := append([]byte(nil), pkt...)
			if err := fl.SetDatagramICRC(want); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(pkt, want) {
				t.Fatalf("%v, %d bytes: FlowICRC.Set and Flow.SetDatagramICRC differ", fl.Src, n)
			}
			if id, df, err := c.Check(pkt); err != nil || id != 0 || df != fl.Src.Is4() {
				t.Fatalf("%v, %d bytes: Check = %#x %v %v", fl.Src, n, id, df, err)
			}
			pkt[BTHLen+r.IntN(len(pkt)-BTHLen)] ^= 1 << r.IntN(8)
			if _, _, err := c.Check(pkt); !errors.Is(err, ErrICRC) {
				t.Fatalf("%v, %d bytes: flipped bit: %v", fl.Src, n, err)
			}
		}
	}
	// An unknown Identification and DF, as rdma_rxe sends them.
	fl := Flow{Src: addr4(10, 99, 0, 2), Dst: addr4(10, 99, 0, 1), SrcPort: 0xD00D}
	c, _ := NewFlowICRC(Flow{Src: fl.Src, Dst: fl.Dst, SrcPort: fl.SrcPort})
	for i := 0; i < 200; i++ {
		fl.ID = uint16(r.Uint32())
		frame, err := AppendFrame(nil, &fl, &Header{Opcode: RCWriteOnly, DestQP: 0x11, PKey: DefaultPKey, RETH: RETHFields{DMALen: 64}}, make([]byte, 64))
		if err != nil {
			t.Fatal(err)
		}
		if id, df, err := c.Check(frame[EthernetLen+IPv4UDPLen:]); err != nil || id != fl.ID || !df {
			t.Fatalf("id %#x: Check = %#x %v %v", fl.ID, id, df, err)
		}
	}
	if _, err := NewFlowICRC(Flow{Src: addr4(10, 0, 0, 1), Dst: netip.MustParseAddr("fd00::1")}); !errors.Is(err, ErrBuildAddress) {
		t.Errorf("mixed families: %v", err)
	}
	short := make([]byte, MinPacketLen-1)
	if err := c.Set(short); !errors.Is(err, ErrTruncatedICRC) {
		t.Errorf("short packet: %v", err)
	}
}

// BenchmarkFlowICRC: sealing a 64-byte-payload datagram with a prepared
// FlowICRC beside Flow.SetDatagramICRC (x-flow is the first over the second).
func BenchmarkFlowICRC(b *testing.B) {
	fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC001}
	pkt, _ := AppendTransport(nil, &Header{Opcode: RCSendOnly, PKey: DefaultPKey}, make([]byte, 64))
	c, _ := NewFlowICRC(fl)
	b.Run("set/flow", func(b *testing.B) {
		for b.Loop() {
			fl.SetDatagramICRC(pkt)
		}
	})
	b.Run("set/cached", func(b *testing.B) {
		for b.Loop() {
			c.Set(pkt)
		}
	})
	b.Run("check/flow", func(b *testing.B) {
		for b.Loop() {
			fl.CheckDatagramICRC(pkt)
		}
	})
	b.Run("check/cached", func(b *testing.B) {
		for b.Loop() {
			c.Check(pkt)
		}
	})
}

// TestFlowICRCCheckID checks a packet whose IPv4 Identification and DF the
// receiver saw: the ones its ICRC was computed for pass, and a flip of any
// one of those 17 bits fails, as does a flipped payload bit.
func TestFlowICRCCheckID(t *testing.T) {
	for _, tc := range []struct {
		id uint16
		df bool
	}{{0, true}, {0x2345, true}, {0xFFFF, false}, {7, false}} {
		fl := Flow{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 0xC001, ID: tc.id}
		pkt, c := sentWith(t, fl, tc.df, 9, []byte("seen identification"))
		if err := c.CheckID(pkt, tc.id, tc.df); err != nil {
			t.Errorf("id %#x df %v: the packet's own Identification and DF fail: %v", tc.id, tc.df, err)
		}
		deltas := NewICRCIDDeltas(len(pkt))
		if d, err := c.Diff(pkt); err != nil || d != deltas.Of(tc.id, tc.df) {
			t.Errorf("id %#x df %v: Diff %#x %v, ICRCIDDeltas.Of %#x", tc.id, tc.df, d, err, deltas.Of(tc.id, tc.df))
		}
		for bit := range 16 {
			if err := c.CheckID(pkt, tc.id^1<<bit, tc.df); !errors.Is(err, ErrICRC) {
				t.Errorf("id %#x df %v: Identification bit %d flipped: %v, want ErrICRC", tc.id, tc.df, bit, err)
			}
		}
		if err := c.CheckID(pkt, tc.id, !tc.df); !errors.Is(err, ErrICRC) {
			t.Errorf("id %#x df %v: DF flipped: %v, want ErrICRC", tc.id, tc.df, err)
		}
		pkt[BTHLen] ^= 1
		if err := c.CheckID(pkt, tc.id, tc.df); !errors.Is(err, ErrICRC) {
			t.Errorf("id %#x df %v: payload bit flipped: %v, want ErrICRC", tc.id, tc.df, err)
		}
	}
}

// sentWith returns a SEND ONLY transport packet of the payload as sent over
// fl with fl.ID and the DF flag df (its ICRC computed for them), and the
// FlowICRC of fl's addresses and port.
func sentWith(t *testing.T, fl Flow, df bool, psn PSN, payload []byte) ([]byte, FlowICRC) {
	t.Helper()
	h := Header{Opcode: RCSendOnly, PKey: DefaultPKey, DestQP: 3, PSN: psn}
	f := builtFrame(t, &fl, &h, payload)
	if !df { // AppendFrame sets DF: clear it and compute the ICRC again
		f.IPv4()[6] &^= 0x40
		if err := SetICRC(f.IPUDP(), f.Buf[f.L4+UDPLen:]); err != nil {
			t.Fatal(err)
		}
	}
	c, err := NewFlowICRC(Flow{Src: fl.Src, Dst: fl.Dst, SrcPort: fl.SrcPort})
	if err != nil {
		t.Fatal(err)
	}
	return f.Buf[f.L4+UDPLen:], c
}

// TestDiffOf: over packet lengths from the shortest to a jumbo frame's and
// random Identifications and DF flags, FlowICRC.Diff of an intact packet is
// ICRCIDDeltas.Of for what it was sent with, RecoverID finds them again, and
// a flipped bit anywhere makes Diff differ.
func TestDiffOf(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	var ids ICRCIDCache
	for n := 0; n <= 9000; n += 1 + n/7 {
		id, df := uint16(r.Uint32()), r.IntN(3) != 0
		fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: uint16(r.Uint32()), ID: id}
		payload := make([]byte, n)
		for k := range payload {
			payload[k] = byte(r.Uint32())
		}
		pkt, c := sentWith(t, fl, df, PSN(n), payload)
		want := ids.Deltas(len(pkt)).Of(id, df)
		d, err := c.Diff(pkt)
		if err != nil || d != want {
			t.Fatalf("%d bytes, id %#x df %v: Diff %#x %v, want %#x", len(pkt), id, df, d, err, want)
		}
		if rid, rdf, err := RecoverID(d, len(pkt)); err != nil || rid != id || rdf != df {
			t.Fatalf("%d bytes, id %#x df %v: RecoverID %#x %v %v", len(pkt), id, df, rid, rdf, err)
		}
		if d, err := c.DiffID(pkt, id, df); err != nil || d != 0 {
			t.Fatalf("%d bytes, id %#x df %v: DiffID %#x %v, want 0", len(pkt), id, df, d, err)
		}
		for _, x := range [...]struct {
			id uint16
			df bool
		}{{id ^ 1<<r.IntN(16), df}, {id, !df}} {
			if d, err := c.DiffID(pkt, x.id, x.df); err != nil || d != ids.Deltas(len(pkt)).Of(x.id^id, x.df == df) {
				t.Fatalf("%d bytes, sent with id %#x df %v: DiffID for %#x %v is %#x %v", len(pkt), id, df, x.id, x.df, d, err)
			}
		}
		bit := r.IntN(8 * len(pkt))
		if bit/8 == 4 {
			bit += 8 // FECN, BECN, resv6a: masked out of the ICRC
		}
		pkt[bit/8] ^= 1 << (bit % 8)
		if d, err := c.Diff(pkt); err == nil && d == want {
			t.Fatalf("%d bytes, bit %d flipped: Diff still %#x", len(pkt), bit, d)
		}
	}
}

// TestFlowICRCSetV: the ICRC SetV writes into the tail of a packet in three
// pieces is the one Set writes into the packet joined, for every opcode
// family's header sizes, payload lengths with every pad count and up to 9000
// bytes, and pieces that are not adjacent in memory; bad pieces and an IPv6
// flow are refused, and it does not allocate.
func TestFlowICRCSetV(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	ops := []Opcode{RCSendOnly, RCWriteFirst, RCWriteMiddle, RCWriteOnlyImm, RCReadResponseFirst, RCReadResponseMiddle, RCSendLastImm}
	for _, fl := range icrcTestFlows[:2] {
		c, err := NewFlowICRC(fl)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 400; i++ {
			n := r.IntN(9001)
			if i < 32 {
				n = i // short payloads, every pad count
			}
			h := Header{Opcode: ops[r.IntN(len(ops))], DestQP: QPN(r.Uint32() & 0xFFFFFF), PSN: PSN(r.Uint32() & 0xFFFFFF), PKey: DefaultPKey, AckReq: i%2 == 0, Imm: r.Uint32(), RETH: RETHFields{VA: r.Uint64(), RKey: r.Uint32(), DMALen: uint32(n) + 1}}
			payload := make([]byte, n)
			for j := range payload {
				payload[j] = byte(r.Uint32())
			}
			pkt, err := AppendTransport(nil, &h, payload)
			if err != nil {
				t.Fatal(err)
			}
			hl := h.Opcode.Info().HeaderLen
			pkt[4] |= 0xC0 // masked either way
			if err := c.Set(pkt); err != nil {
				t.Fatal(err)
			}
			hdr := append([]byte(nil), pkt[:hl]...)
			tail := make([]byte, len(pkt)-hl-n) // pad and a wrong ICRC
			for j := range tail {
				tail[j] = 0xEE
			}
			copy(tail, pkt[hl+n:len(pkt)-ICRCLen])
			if err := c.SetV(hdr, payload, tail); err != nil {
				t.Fatal(err)
			}
			if joined := append(append(hdr, payload...), tail...); !bytes.Equal(joined, pkt) {
				t.Fatalf("%v %v, %d-byte payload: SetV and Set differ", fl.Src, h.Opcode, n)
			}
		}
		hdr, tail := make([]byte, BTHLen), make([]byte, ICRCLen)
		for _, bad := range []struct {
			hdr, payload, tail []byte
			want               error
		}{
			{hdr[:BTHLen-1], nil, tail, ErrTruncatedICRC},
			{hdr, nil, tail[:ICRCLen-1], ErrTruncatedICRC},
			{hdr, make([]byte, 0xFFFF), tail, ErrBuildTooLong},
		} {
			if err := c.SetV(bad.hdr, bad.payload, bad.tail); !errors.Is(err, bad.want) {
				t.Errorf("%d+%d+%d bytes: %v, want %v", len(bad.hdr), len(bad.payload), len(bad.tail), err, bad.want)
			}
		}
		payload := make([]byte, 4096)
		if a := testing.AllocsPerRun(100, func() { c.SetV(hdr, payload, tail) }); a != 0 {
			t.Errorf("%v allocations per SetV", a)
		}
	}
	c6, _ := NewFlowICRC(icrcTestFlows[2])
	if err := c6.SetV(make([]byte, BTHLen), nil, make([]byte, ICRCLen)); !errors.Is(err, ErrSetVFlow) {
		t.Errorf("IPv6 flow: %v, want ErrSetVFlow", err)
	}
}
