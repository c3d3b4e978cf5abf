package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestSetBatch: SetBatch writes what Flow.SetDatagramICRC writes, packet by
// packet, over runs of equal lengths (which go four at a time where the
// processor allows), lengths that break runs, every length the four-lane
// pass takes and beyond, over IPv4 and IPv6.
func TestSetBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, fl := range icrcTestFlows {
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

// match4 sets bit j when Diff4 reports 0 for pkts[j]: its ICRC is that of
// a datagram with Identification 0 and DF; no bit when Diff4 refuses them.
func match4(c *FlowICRC, pkts *[4][]byte) uint8 {
	var d [4]uint32
	if !c.Diff4(pkts, &d) {
		return 0
	}
	var m uint8
	for j, v := range d {
		if v == 0 {
			m |= 1 << j
		}
	}
	return m
}

// TestSet4Match4: Set4 seals as Set, or reports false and writes nothing;
// match4 (Diff4) sets a packet's bit exactly when Check reports Identification 0
// and DF, over every length, packets corrupted or carrying another
// Identification among the four.
func TestSet4Match4(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	var ids ICRCIDCache
	for _, fl := range icrcTestFlows {
		c, err := NewFlowICRC(fl)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n <= foldMax+8; n++ {
			var pkts [4][]byte
			for j := range pkts {
				h := Header{Opcode: RCSendOnly, DestQP: QPN(j), PSN: PSN(r.Uint32() & 0xFFFFFF), PKey: DefaultPKey}
				payload := make([]byte, n)
				for k := range payload {
					payload[k] = byte(r.Uint32())
				}
				if pkts[j], err = AppendTransport(nil, &h, payload); err != nil {
					t.Fatal(err)
				}
			}
			want := [4][]byte{}
			for j := range pkts {
				want[j] = append([]byte(nil), pkts[j]...)
				if err := fl.SetDatagramICRC(want[j]); err != nil {
					t.Fatal(err)
				}
			}
			before := [4][]byte{}
			for j := range pkts {
				before[j] = append([]byte(nil), pkts[j]...)
			}
			ok := c.Set4(&pkts)
			if ok != (FourLaneICRC() && fl.Src.Is4() && len(pkts[0]) >= Lane4MinLen && len(pkts[0]) <= Lane4MaxLen) {
				t.Fatalf("%v, %d bytes: Set4 reported %v", fl.Src, len(pkts[0]), ok)
			}
			for j := range pkts {
				if ok && !bytes.Equal(pkts[j], want[j]) || !ok && !bytes.Equal(pkts[j], before[j]) {
					t.Fatalf("%v, %d bytes, packet %d: Set4 (%v) wrote %x", fl.Src, len(pkts[0]), j, ok, pkts[j])
				}
				pkts[j] = want[j]
			}
			switch r.IntN(3) {
			case 0:
				pkts[r.IntN(4)][r.IntN(len(pkts[0]))] ^= byte(1 << r.IntN(8))
			case 1:
				if fl.Src.Is4() {
					if err := ids.ChangeID(pkts[r.IntN(4)], 0, uint16(1+r.IntN(100))); err != nil {
						t.Fatal(err)
					}
				}
			}
			m := match4(&c, &pkts)
			var d [4]uint32
			if c.Diff4(&pkts, &d) != ok {
				t.Fatalf("%v, %d bytes: Diff4 and Set4 disagree on taking the packets", fl.Src, len(pkts[0]))
			}
			for j := range pkts {
				if one, err := c.Diff(pkts[j]); ok && (err != nil || one != d[j]) {
					t.Fatalf("%v, %d bytes, packet %d: Diff4 %#x, Diff %#x %v", fl.Src, len(pkts[0]), j, d[j], one, err)
				}
			}
			for j := range pkts {
				id, df, err := c.Check(pkts[j])
				zero := err == nil && id == 0 && df
				if m>>j&1 != 0 && !zero || ok && zero && m>>j&1 == 0 {
					t.Fatalf("%v, %d bytes, packet %d: Diff4 matched %04b, Check %d %v %v", fl.Src, len(pkts[0]), j, m, id, df, err)
				}
			}
			if !ok && m != 0 {
				t.Fatalf("%v, %d bytes: Diff4 matched %04b where Set4 refused", fl.Src, len(pkts[0]), m)
			}
		}
	}
}

// FuzzSet4: four packets cut from the fuzzer's bytes, sealed by Set4, carry
// Set's ICRCs, and Diff4 matches them all; with a bit flipped in one, not
// that one.
func FuzzSet4(f *testing.F) {
	f.Add(make([]byte, 4*96), uint16(5))
	f.Add(make([]byte, 4*21), uint16(0))
	f.Add(make([]byte, 4*516), uint16(4000))
	fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC001}
	c, err := NewFlowICRC(fl)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, flip uint16) {
		m := len(data) / 4
		if m < MinPacketLen {
			return
		}
		var pkts, want [4][]byte
		for j := range pkts {
			pkts[j] = append([]byte(nil), data[j*m:(j+1)*m]...)
			want[j] = append([]byte(nil), pkts[j]...)
			if err := c.Set(want[j]); err != nil {
				t.Fatal(err)
			}
		}
		if !c.Set4(&pkts) {
			return
		}
		for j := range pkts {
			if !bytes.Equal(pkts[j], want[j]) {
				t.Fatalf("%d bytes, packet %d: Set4 %x, Set %x", m, j, pkts[j], want[j])
			}
		}
		if got := match4(&c, &pkts); got != 0xF {
			t.Fatalf("%d bytes: Diff4 matched %04b on sealed packets", m, got)
		}
		bit := int(flip) % (8 * m)
		if bit/8 == 4 {
			return // FECN, BECN, resv6a: masked out of the ICRC
		}
		j := int(flip>>13) % 4
		pkts[j][bit/8] ^= 1 << (bit % 8)
		if got := match4(&c, &pkts); got != 0xF&^(1<<j) {
			t.Fatalf("%d bytes, bit %d of packet %d flipped: Diff4 matched %04b", m, bit, j, got)
		}
	})
}
