package wire

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// idPacket returns a transport packet of n bytes (a WRITE ONLY with random
// payload) and the pseudo-header of its IPv4 datagram with Identification
// id.
func idPacket(t testing.TB, r *rand.Rand, n int, id uint16) (ipudp, pkt []byte) {
	t.Helper()
	h := Header{Opcode: RCWriteOnly, DestQP: 0x12, PSN: 77, PKey: DefaultPKey, RETH: RETHFields{VA: 0x1000, RKey: 9}}
	payload := make([]byte, n-BTHLen-RETHLen-ICRCLen)
	for i := range payload {
		payload[i] = byte(r.Uint32())
	}
	h.RETH.DMALen = uint32(len(payload))
	pkt, err := AppendTransport(nil, &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	fl := Flow{Src: addr4(10, 1, 0, 1), Dst: addr4(10, 1, 0, 2), SrcPort: 0xC001}
	ipudp, err = fl.PseudoHeader(nil, len(pkt))
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint16(ipudp[4:], id)
	return ipudp, pkt
}

// ChangeID gives the ICRC that a full computation over the header with the
// new Identification gives, for many lengths and Identifications (small
// ones, as GSO writes, and any), in both directions, and the receiver's
// solver finds the new Identification in the result.
func TestICRCChangeID(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	lengths := []int{BTHLen + RETHLen + ICRCLen, 32, 64, 100, 1040, 1060, 4112, 4124, 8972, 65504}
	for range 40 {
		lengths = append(lengths, BTHLen+RETHLen+ICRCLen+4*r.IntN(4000))
	}
	var c ICRCIDCache
	for _, n := range lengths {
		for _, id := range []uint16{0, 1, 2, 3, 5, 14, 15, 61, 62, 63, 64, 127, 0x8000, 0xFFFF, uint16(r.Uint32()), uint16(r.Uint32())} {
			h0, pkt := idPacket(t, r, n, 0)
			if err := SetICRC(h0, pkt); err != nil {
				t.Fatal(err)
			}
			hk := append([]byte(nil), h0...)
			binary.BigEndian.PutUint16(hk[4:], id)
			want, err := ComputeICRC(hk, pkt)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.ChangeID(pkt, 0, id); err != nil {
				t.Fatal(err)
			}
			if got := binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]); got != want {
				t.Fatalf("len %d id %d: ICRC %#08x, full computation %#08x", n, id, got, want)
			}
			if err := CheckICRC(hk, pkt); err != nil {
				t.Fatalf("len %d id %d: %v", n, id, err)
			}
			if gid, gdf, err := CheckICRCUnknownID(h0, pkt); err != nil || gid != id || !gdf {
				t.Fatalf("len %d id %d: solver found %d %v %v", n, id, gid, gdf, err)
			}
			// And between two non-zero Identifications.
			// (By ChangeIDOf, on a copy of the ICRC alone, as a sender of
			// a packet in pieces does.)
			to := id ^ uint16(r.Uint32())
			binary.BigEndian.PutUint16(hk[4:], to)
			icrc := append([]byte(nil), pkt[len(pkt)-ICRCLen:]...)
			if err := c.ChangeIDOf(icrc, len(pkt), id, to); err != nil {
				t.Fatal(err)
			}
			copy(pkt[len(pkt)-ICRCLen:], icrc)
			if err := CheckICRC(hk, pkt); err != nil {
				t.Fatalf("len %d id %d -> %d: %v", n, id, to, err)
			}
		}
	}
}

func TestICRCChangeIDErrors(t *testing.T) {
	var c ICRCIDCache
	if err := c.ChangeID(make([]byte, MinPacketLen-1), 0, 1); err != ErrTruncatedICRC {
		t.Errorf("short packet: %v", err)
	}
	if err := c.ChangeID(make([]byte, 0xFFFF-IPv4UDPLen+1), 0, 1); err != ErrBuildTooLong {
		t.Errorf("long packet: %v", err)
	}
	if err := c.ChangeIDOf(make([]byte, ICRCLen-1), 100, 0, 1); err != ErrTruncatedICRC {
		t.Errorf("short ICRC: %v", err)
	}
	if err := c.ChangeIDOf(make([]byte, ICRCLen), MinPacketLen-1, 0, 1); err != ErrTruncatedICRC {
		t.Errorf("short packet by ChangeIDOf: %v", err)
	}
	d := NewICRCIDDeltas(3)
	if d.Delta(0xFFFF) != 0 {
		t.Error("deltas of an impossible length change something")
	}
}

// A GSO train's worth of ChangeID calls does not allocate.
func TestICRCChangeIDAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	_, full := idPacket(t, r, 4112, 0)
	_, last := idPacket(t, r, 1040, 0)
	var c ICRCIDCache
	allocs := testing.AllocsPerRun(100, func() {
		for k := range uint16(15) {
			c.ChangeID(full, k, k+1)
		}
		c.ChangeID(last, 0, 15)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per train", allocs)
	}
}

// BenchmarkICRCChangeID changes the Identification of packets of a GSO
// train (cached length); BenchmarkICRCIDDeltas computes the deltas of a
// new length; BenchmarkICRCRecompute is the alternative, a full ICRC.
func BenchmarkICRCChangeID(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	_, pkt := idPacket(b, r, 4112, 0)
	var c ICRCIDCache
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.ChangeID(pkt, uint16(i%64), uint16((i+1)%64))
	}
}

func BenchmarkICRCIDDeltas(b *testing.B) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		NewICRCIDDeltas(64 + 4*(i%1000))
	}
}

func BenchmarkICRCRecompute(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	h, pkt := idPacket(b, r, 4112, 0)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		SetICRC(h, pkt)
	}
}

// TestICRCIDCacheTwoWay: two lengths of one set both stay cached (the
// same entry comes back), a third replaces the one cached first, and
// every answer is NewICRCIDDeltas's.
func TestICRCIDCacheTwoWay(t *testing.T) {
	var c ICRCIDCache
	a, b, x := 64, 64+16, 64+32 // lengths/4 16, 20, 24: one set of four
	pa := c.Deltas(a)
	pb := c.Deltas(b)
	if pa == pb {
		t.Fatal("two lengths share an entry")
	}
	if c.Deltas(a) != pa || c.Deltas(b) != pb {
		t.Fatal("a length of the set was computed again")
	}
	if px := c.Deltas(x); px != pa {
		t.Fatal("the third length did not replace the first")
	}
	if c.Deltas(b) != pb {
		t.Fatal("the second length was replaced")
	}
	for _, n := range []int{a, b, x, 20, 4124, 1056} {
		if got, want := *c.Deltas(n), NewICRCIDDeltas(n); got != want {
			t.Fatalf("%d bytes: cached %+v, computed %+v", n, got, want)
		}
	}
}
