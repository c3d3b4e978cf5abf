package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// addGoldenSeeds adds the transport packets of the golden and broken vectors
// to a fuzz corpus.
func addGoldenSeeds(f *testing.F) {
	for _, name := range []string{"golden.json", "golden-ipv6.json", "broken.json"} {
		vf := loadVectors(f, name)
		for _, v := range vf.Vectors {
			fr := v.frame(f)
			var fm Frame
			if ParseFrame(fr, &fm) == nil {
				f.Add(append([]byte(nil), fm.Transport()...))
			}
		}
	}
}

// FuzzParse feeds arbitrary bytes to Parse: it must never panic, and whatever
// it accepts must be self-consistent and rebuild to the same bytes.
func FuzzParse(f *testing.F) {
	addGoldenSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		err := Parse(b, &p)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v is in neither class", err)
			}
			if errors.Is(err, ErrMalformed) && p.Info != nil {
				t.Fatalf("malformed packet left a filled Packet")
			}
			if errors.Is(err, ErrMalformed) {
				return
			}
		}
		info := p.Info
		if !info.Valid() || p.PayloadLen < 0 || info.HeaderLen+p.PayloadLen+ICRCLen > len(b) {
			t.Fatalf("inconsistent packet: %+v len %d", info, len(b))
		}
		if !info.Payload && p.PayloadLen != 0 {
			t.Fatalf("%v carries %d bytes of payload", p.Opcode(), p.PayloadLen)
		}
		_ = p.Payload()
		// Rebuild: equal except reserved bits the builders clear.
		var h Header
		h.Load(&p)
		out, berr := AppendTransport(nil, &h, p.Payload())
		if berr != nil {
			t.Fatalf("rebuild: %v", berr)
		}
		want := append([]byte(nil), b...)
		clearReserved(want, info)
		copy(want[len(want)-ICRCLen:], []byte{0, 0, 0, 0})
		if !bytes.Equal(out, want) {
			t.Fatalf("rebuild differs\n got %x\nwant %x", out, want)
		}
	})
}

// clearReserved zeroes the reserved fields of a transport packet, the way the
// builders write them.
func clearReserved(b []byte, info *OpcodeInfo) {
	b[1] &^= 0x0F // TVer (0 in an accepted packet anyway)
	b[4] &= 0xC0  // resv6a
	b[8] &= 0x80  // resv7
	if off := info.Offset(HasDETH); off != 0 {
		b[off+4] = 0
	}
	if off := info.Offset(HasRDETH); off != 0 {
		b[off] = 0
	}
	if off := info.Offset(HasAETH); off != 0 {
		_ = off // syndrome and MSN fill all 32 bits
	}
	if off := info.Offset(HasCNPPad); off != 0 {
		clear(b[off : off+CNPPadLen])
	}
	if off := info.Offset(HasFETH); off != 0 {
		// A FLUSH's FETH: selectivity and placement type, the 26 bits above
		// them reserved.
		binary.BigEndian.PutUint32(b[off:], binary.BigEndian.Uint32(b[off:])&0x3F)
	}
}

// FuzzRoundTrip builds a packet from fuzzed header values, parses it and
// rebuilds it: the two builds must be identical, the parsed values must equal
// the built ones, and the ICRC must verify.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint8(0x04), uint16(0xFFFF), uint32(17), uint32(256), uint64(0x7f0000001000), uint32(0xc0ffee), uint32(13), uint64(1), uint64(2), uint8(0x1f), uint32(5), uint32(0xdeadbeef), []byte("hello, world!"), true, false)
	f.Add(uint8(0x0b), uint16(0x8001), uint32(0xFFFFFF), uint32(0xFFFFFF), uint64(1<<63), uint32(1), uint32(3), uint64(0), uint64(0), uint8(0x62), uint32(0xFFFFFF), uint32(0), []byte("abc"), false, true)
	f.Add(uint8(0x12), uint16(0xFFFF), uint32(1), uint32(0), uint64(8), uint32(2), uint32(0), uint64(7), uint64(9), uint8(0x00), uint32(1), uint32(1), []byte{}, true, true)
	f.Add(uint8(0x65), uint16(0xFFFF), uint32(19), uint32(2), uint64(0), uint32(0x11111111), uint32(20), uint64(0), uint64(0), uint8(0), uint32(0), uint32(0x0badcafe), make([]byte, 64), false, false)
	f.Fuzz(func(t *testing.T, op uint8, pkey uint16, qpn, psn uint32, va uint64, key, n32 uint32, a, c uint64, syn uint8, msn, imm uint32, payload []byte, v4, flags bool) {
		h := Header{
			Opcode: Opcode(op), SE: flags, MigReq: !flags, PKey: pkey, FECN: flags, BECN: v4,
			DestQP: QPN(qpn & QPNMask), AckReq: !flags, PSN: PSN(psn & PSNMask),
			RDETH:     n32 & 0xFFFFFF,
			DETH:      DETHFields{QKey: key, SrcQP: QPN(n32 & QPNMask)},
			RETH:      RETHFields{VA: va, RKey: key, DMALen: uint32(len(payload))},
			AtomicETH: AtomicFields{VA: va &^ 7, RKey: key, SwapAdd: a, Compare: c},
			AETH:      AETHFields{Syndrome: Syndrome(syn), MSN: msn & 0xFFFFFF},
			AtomicAck: a, Imm: imm, IETH: key,
		}
		info := h.Opcode.Info()
		if !info.Payload {
			payload = nil
		}
		if len(payload) > MaxPMTU {
			payload = payload[:MaxPMTU]
		}
		if info.Operation == OpWrite && info.Position == PosFirst {
			h.RETH.DMALen = uint32(len(payload)) + 1
		}
		fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC000 | uint16(qpn), ID: uint16(psn)}
		if !v4 {
			fl.Src, fl.Dst = addr6(1), addr6(2)
			fl.FlowLabel = qpn & 0xFFFFF
		}
		frame, err := AppendFrame(nil, &fl, &h, payload)
		if !info.Valid() {
			if !errors.Is(err, ErrBuildOpcode) {
				t.Fatalf("reserved opcode %#x built: %v", op, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("AppendFrame: %v", err)
		}
		var fr Frame
		if err := ParseFrame(frame, &fr); err != nil {
			t.Fatalf("ParseFrame: %v", err)
		}
		if err := CheckICRC(fr.IPUDP(), fr.Transport()); err != nil {
			t.Fatal(err)
		}
		if err := fr.CheckUDPChecksum(); err != nil {
			t.Fatal(err)
		}
		var p Packet
		if err := Parse(fr.Transport(), &p); err != nil && !errors.Is(err, ErrInvalidRequest) {
			// Header values the parser rightly refuses (a reserved syndrome,
			// a NAK on a READ response) are fine to build.
			if !errors.Is(err, ErrSyndrome) && !errors.Is(err, ErrSyndromeNotACK) {
				t.Fatalf("Parse: %v", err)
			}
			return
		}
		var h2 Header
		h2.Load(&p)
		want := h
		want.normalize(info)
		if h2 != want {
			t.Fatalf("parsed header differs\n got %+v\nwant %+v", h2, want)
		}
		again, err := AppendFrame(nil, &fl, &h2, p.Payload())
		if err != nil || !bytes.Equal(again, frame) {
			t.Fatalf("second build differs (%v)", err)
		}
		if binary.LittleEndian.Uint32(frame[len(frame)-4:]) != p.ICRC() {
			t.Fatal("ICRC accessor")
		}
	})
}

// normalize clears the fields of h that the opcode does not carry, as Load
// leaves them.
func (h *Header) normalize(info *OpcodeInfo) {
	m := info.Headers
	if m&HasRDETH == 0 {
		h.RDETH = 0
	}
	if m&HasDETH == 0 {
		h.DETH = DETHFields{}
	}
	if m&HasRETH == 0 {
		h.RETH = RETHFields{}
	}
	if m&HasAtomicETH == 0 {
		h.AtomicETH = AtomicFields{}
	}
	if m&HasAETH == 0 {
		h.AETH = AETHFields{}
	}
	if m&HasAtomicAckETH == 0 {
		h.AtomicAck = 0
	}
	if m&HasImmDt == 0 {
		h.Imm = 0
	}
	if m&HasIETH == 0 {
		h.IETH = 0
	}
}
