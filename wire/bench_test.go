package wire

import (
	"hash/crc32"
	"strconv"
	"testing"
)

var benchSizes = []int{64, 1024, 4096}

type benchPacket struct {
	fl      Flow
	h       Header
	payload []byte
	frame   []byte
	f       Frame
}

func newBenchPacket(tb testing.TB, n int) *benchPacket {
	bp := &benchPacket{
		fl:      Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC000, ID: 7},
		h:       Header{Opcode: RCWriteOnly, PKey: DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 100, RETH: RETHFields{VA: 0x7f0000000000, RKey: 0x1234, DMALen: uint32(n)}},
		payload: make([]byte, n),
	}
	for i := range bp.payload {
		bp.payload[i] = byte(i * 7)
	}
	var err error
	if bp.frame, err = AppendFrame(nil, &bp.fl, &bp.h, bp.payload); err != nil {
		tb.Fatal(err)
	}
	if err := ParseFrame(bp.frame, &bp.f); err != nil {
		tb.Fatal(err)
	}
	return bp
}

// TestAllocs asserts that the hot paths allocate nothing.
func TestAllocs(t *testing.T) {
	bp := newBenchPacket(t, 1024)
	pkt := bp.f.Transport()
	buf := make([]byte, 0, 8192)
	ph, _ := bp.fl.PseudoHeader(nil, len(pkt))
	CheckICRCUnknownID(ph, pkt) // build its tables once
	var p Packet
	var f Frame
	for name, fn := range map[string]func(){
		"Parse":              func() { _ = Parse(pkt, &p) },
		"ParseFrame":         func() { _ = ParseFrame(bp.frame, &f) },
		"ComputeICRC":        func() { _, _ = ComputeICRC(bp.f.IPUDP(), pkt) },
		"CheckICRC":          func() { _ = CheckICRC(bp.f.IPUDP(), pkt) },
		"CheckICRCUnknownID": func() { _, _, _ = CheckICRCUnknownID(ph, pkt) },
		"AppendTransport":    func() { _, _ = AppendTransport(buf[:0], &bp.h, bp.payload) },
		"AppendDatagram":     func() { _, _ = AppendDatagram(buf[:0], &bp.fl, &bp.h, bp.payload) },
		"AppendFrame":        func() { _, _ = AppendFrame(buf[:0], &bp.fl, &bp.h, bp.payload) },
		"PseudoHeader":       func() { var a [IPv6UDPLen]byte; _, _ = bp.fl.PseudoHeader(a[:0], 100) },
		"ParseError":         func() { _ = Parse(pkt[:20], &p) },
		"ParseAndLoad":       func() { _ = Parse(pkt, &p); var h Header; h.Load(&p) },
	} {
		if a := testing.AllocsPerRun(200, fn); a != 0 {
			t.Errorf("%s: %v allocations", name, a)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			pkt := newBenchPacket(b, n).f.Transport()
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			var p Packet
			for b.Loop() {
				if err := Parse(pkt, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseFrameAndICRC(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			bp := newBenchPacket(b, n)
			b.SetBytes(int64(len(bp.frame)))
			b.ReportAllocs()
			var f Frame
			var p Packet
			for b.Loop() {
				if ParseFrame(bp.frame, &f) != nil || Parse(f.Transport(), &p) != nil || CheckICRC(f.IPUDP(), f.Transport()) != nil {
					b.Fatal("bad packet")
				}
			}
		})
	}
}

func BenchmarkAppendDatagram(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			bp := newBenchPacket(b, n)
			buf := make([]byte, 0, 8192)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := AppendDatagram(buf[:0], &bp.fl, &bp.h, bp.payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAppendFrame(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			bp := newBenchPacket(b, n)
			buf := make([]byte, 0, 8192)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := AppendFrame(buf[:0], &bp.fl, &bp.h, bp.payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkICRC and BenchmarkCRC32 hash the same number of bytes: the ICRC
// covers 8 bytes of 0xFF, the IP and UDP headers and the transport packet
// without its ICRC field. Compare them within one run (benchstat, or the
// ratio of their ns/op).
func BenchmarkICRC(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			bp := newBenchPacket(b, n)
			ipudp, pkt := bp.f.IPUDP(), bp.f.Transport()
			b.SetBytes(int64(8 + len(ipudp) + len(pkt) - ICRCLen))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ComputeICRC(ipudp, pkt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCRC32(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			bp := newBenchPacket(b, n)
			buf := make([]byte, 8+len(bp.f.IPUDP())+len(bp.f.Transport())-ICRCLen)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				_ = crc32.ChecksumIEEE(buf)
			}
		})
	}
}

func BenchmarkCheckICRCUnknownID(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			bp := newBenchPacket(b, n)
			pkt := bp.f.Transport()
			ph, _ := bp.fl.PseudoHeader(nil, len(pkt))
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := CheckICRCUnknownID(ph, pkt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendTransport builds a 64-byte RDMA WRITE ONLY with its payload
// already in place, as the engine does.
func BenchmarkAppendTransport(b *testing.B) {
	buf := make([]byte, 256)
	h := Header{Opcode: RCWriteOnly, PKey: DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 7, RETH: RETHFields{VA: 0x1000, RKey: 0x100, DMALen: 64}}
	hl := h.Opcode.Info().HeaderLen
	for b.Loop() {
		if _, err := AppendTransport(buf[:0], &h, buf[hl:hl+64]); err != nil {
			b.Fatal(err)
		}
	}
}
