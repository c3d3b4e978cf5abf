package wire

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestSetBatch: SetBatch writes what Flow.SetDatagramICRC writes, packet by
// packet, over runs of equal lengths (which go four at a time where the
// processor allows), lengths that break runs, every length the four-lane
// pass takes and beyond, over IPv4 and IPv6.
func TestSetBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, fl := range []Flow{
		{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC001},
		{Src: addr4(192, 168, 7, 9), Dst: addr4(10, 99, 0, 1), SrcPort: 4791, DstPort: 4791},
		{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), SrcPort: 0xC002},
	} {
		c, err := NewFlowICRC(fl)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n <= foldMax+64; n++ {
			var pkts [][]byte
			for i := range 4 + r.IntN(7) {
				m := n
				if r.IntN(5) == 0 {
					m += 1 + r.IntN(32) // breaks the run
				}
				h := Header{Opcode: RCSendOnly, DestQP: QPN(i), PSN: PSN(r.Uint32() & 0xFFFFFF), PKey: DefaultPKey, AckReq: i%2 == 0}
				payload := make([]byte, m)
				for k := range payload {
					payload[k] = byte(r.Uint32())
				}
				pkt, err := AppendTransport(nil, &h, payload)
				if err != nil {
					t.Fatal(err)
				}
				pkt[4] |= byte(r.IntN(4)) << 6 // FECN and BECN: masked
				pkts = append(pkts, pkt)
			}
			if err := c.SetBatch(pkts); err != nil {
				t.Fatal(err)
			}
			for i, pkt := range pkts {
				want := append([]byte(nil), pkt...)
				if err := fl.SetDatagramICRC(want); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(pkt, want) {
					t.Fatalf("%v, payload %d, packet %d of %d (%d bytes): SetBatch and Flow.SetDatagramICRC differ", fl.Src, n, i, len(pkts), len(pkt))
				}
			}
		}
	}
}

// TestSetBatchShort: a packet too short for an ICRC fails SetBatch as it
// fails Set, the packets before it sealed.
func TestSetBatchShort(t *testing.T) {
	fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC001}
	c, _ := NewFlowICRC(fl)
	good, _ := AppendTransport(nil, &Header{Opcode: RCSendOnly, PKey: DefaultPKey}, make([]byte, 8))
	pkts := [][]byte{good, make([]byte, 3)}
	if err := c.SetBatch(pkts); err == nil {
		t.Fatal("no error for a 3-byte packet")
	}
	if err := c.Set(make([]byte, 3)); err == nil {
		t.Fatal("Set: no error for a 3-byte packet")
	}
	if _, _, err := c.Check(good); err != nil {
		t.Fatalf("the packet before the short one: %v", err)
	}
}

// TestBarrettMu: barrettMu is floor(x^64 / P): x^64 minus mu*P leaves a
// remainder of degree below 32.
func TestBarrettMu(t *testing.T) {
	const poly = 1<<32 | 0x04C11DB7
	mu := barrettMu()
	var hi, lo uint64 // mu*P, 65 bits at most
	for i := range 33 {
		if mu>>i&1 != 0 {
			lo ^= uint64(poly) << i
			if i > 31 {
				hi ^= uint64(poly) >> (64 - i)
			}
		}
	}
	if hi != 1 || lo>>32 != 0 {
		t.Fatalf("mu %#x: x^64 - mu*P = %#x:%#016x", mu, hi^1, lo)
	}
}

// BenchmarkICRCBatch: sealing four 64-byte WRITE ONLY packets (92 bytes
// hashed) of one flow by SetBatch and by four Sets.
func BenchmarkICRCBatch(b *testing.B) {
	c, _ := NewFlowICRC(Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC001})
	pkts := make([][]byte, 4)
	for i := range pkts {
		pkts[i], _ = AppendTransport(nil, &Header{Opcode: RCWriteOnly, PKey: DefaultPKey, RETH: RETHFields{DMALen: 64}}, make([]byte, 64))
	}
	b.Run("batch", func(b *testing.B) {
		for b.Loop() {
			c.SetBatch(pkts)
		}
	})
	b.Run("set", func(b *testing.B) {
		for b.Loop() {
			for _, p := range pkts {
				c.Set(p)
			}
		}
	})
}
