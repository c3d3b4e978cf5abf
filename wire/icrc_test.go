package wire

import (
	"bytes"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// icrcReference computes the ICRC the plain way: the IBA text, one byte
// string, no tricks (8 bytes of 0xFF, the masked headers, the rest).
func icrcReference(ipudp, pkt []byte) uint32 {
	var m []byte
	m = append(m, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF)
	ip := append([]byte(nil), ipudp...)
	if ip[0]>>4 == 4 {
		ip[1], ip[8], ip[10], ip[11] = 0xFF, 0xFF, 0xFF, 0xFF
		ip[26], ip[27] = 0xFF, 0xFF
	} else {
		ip[0] |= 0x0F
		ip[1], ip[2], ip[3], ip[7] = 0xFF, 0xFF, 0xFF, 0xFF
		ip[46], ip[47] = 0xFF, 0xFF
	}
	m = append(m, ip...)
	bth := append([]byte(nil), pkt[:BTHLen]...)
	bth[4] = 0xFF
	m = append(m, bth...)
	m = append(m, pkt[BTHLen:len(pkt)-ICRCLen]...)
	return crc32.ChecksumIEEE(m)
}

func TestICRCMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		n := r.IntN(4200)
		h := Header{Opcode: RCSendOnly, DestQP: QPN(r.Uint32() & QPNMask), PSN: PSN(r.Uint32() & PSNMask), PKey: DefaultPKey}
		payload := make([]byte, n)
		for j := range payload {
			payload[j] = byte(r.Uint32())
		}
		fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: uint16(r.Uint32()), ID: uint16(r.Uint32()), TrafficClass: byte(r.Uint32()), HopLimit: byte(r.Uint32())}
		if i%2 == 1 {
			fl.Src, fl.Dst, fl.FlowLabel = addr6(1), addr6(2), r.Uint32()&0xFFFFF
		}
		f := builtFrame(t, &fl, &h, payload)
		got, _ := ComputeICRC(f.IPUDP(), f.Transport())
		if want := icrcReference(f.IPUDP(), f.Transport()); got != want {
			t.Fatalf("payload %d v%d: ICRC %08x, reference %08x", n, f.IPVersion, got, want)
		}
	}
}

func TestICRCErrors(t *testing.T) {
	pkt := make([]byte, 20)
	if _, err := ComputeICRC(make([]byte, 27), pkt); !errors.Is(err, ErrBuildPseudoHdr) {
		t.Errorf("short IP header: %v", err)
	}
	ip := make([]byte, IPv4UDPLen)
	ip[0] = 0x46 // options
	if _, err := ComputeICRC(ip, pkt); !errors.Is(err, ErrBuildPseudoHdr) {
		t.Errorf("IPv4 options: %v", err)
	}
	ip[0] = 0x45
	if _, err := ComputeICRC(ip, pkt[:15]); !errors.Is(err, ErrTruncatedICRC) {
		t.Errorf("short packet: %v", err)
	}
}

func TestMulmod(t *testing.T) {
	one, x := uint32(1<<31), uint32(1<<30)
	if mulmod(xInv, x) != one {
		t.Fatalf("x * x^-1 = %08x", mulmod(xInv, x))
	}
	// Multiplying a register by x^8 is running the CRC over one zero byte.
	r := rand.New(rand.NewPCG(3, 4))
	x8 := one
	for i := 0; i < 8; i++ {
		x8 = mulmod(x8, x)
	}
	for i := 0; i < 100; i++ {
		v := r.Uint32()
		if mulmod(v, x8) != regZero(v) {
			t.Fatalf("x^8 * %08x != one zero byte", v)
		}
	}
}

// TestCheckICRCUnknownID sends packets with random Identifications and DF
// flags, then checks them as a UDP-socket receiver would, knowing neither.
func TestCheckICRCUnknownID(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 300; i++ {
		n := r.IntN(4097)
		h := Header{Opcode: RCWriteOnly, DestQP: 0x11, PSN: PSN(i), PKey: DefaultPKey, RETH: RETHFields{VA: 0x1000, RKey: 7, DMALen: uint32(n)}}
		payload := bytes.Repeat([]byte{byte(i)}, n)
		id := uint16(r.Uint32())
		df := i%3 != 0
		fl := Flow{Src: addr4(10, 99, 0, 2), Dst: addr4(10, 99, 0, 1), SrcPort: 0xC123, ID: id}
		frame, err := AppendFrame(nil, &fl, &h, payload)
		if err != nil {
			t.Fatal(err)
		}
		if !df { // clear DF and fix the header checksum
			ip := IPv4(frame[EthernetLen:])
			ip[6] &^= 0x40
			ip.SetChecksum()
			var f Frame
			if err := ParseFrame(frame, &f); err != nil {
				t.Fatal(err)
			}
			if err := SetICRC(f.IPUDP(), f.Transport()); err != nil {
				t.Fatal(err)
			}
		}
		pkt := frame[EthernetLen+IPv4UDPLen:]
		ph, err := fl.PseudoHeader(nil, len(pkt))
		if err != nil {
			t.Fatal(err)
		}
		gotID, gotDF, err := CheckICRCUnknownID(ph, pkt)
		if err != nil {
			t.Fatalf("packet %d (id %#x df %v): %v", i, id, df, err)
		}
		if gotID != id || gotDF != df {
			t.Fatalf("recovered id %#x df %v, sent %#x %v", gotID, gotDF, id, df)
		}
		rx := Flow{Src: fl.Src, Dst: fl.Dst, SrcPort: fl.SrcPort}
		if gotID, gotDF, err = rx.CheckDatagramICRC(pkt); err != nil || gotID != id || gotDF != df {
			t.Fatalf("CheckDatagramICRC: id %#x df %v err %v, sent %#x %v", gotID, gotDF, err, id, df)
		}
	}
}

// TestCheckICRCUnknownIDDetects corrupts packets: with 15 bits of check left,
// a random corruption passes with probability 2^-15, so none of these may.
func TestCheckICRCUnknownIDDetects(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	passed := 0
	const trials = 2000
	for i := 0; i < trials; i++ {
		h := Header{Opcode: RCSendOnly, DestQP: 0x11, PSN: PSN(i), PKey: DefaultPKey}
		fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC000, ID: uint16(r.Uint32())}
		frame, _ := AppendFrame(nil, &fl, &h, bytes.Repeat([]byte{0xA5}, 256))
		pkt := frame[EthernetLen+IPv4UDPLen:]
		flips := 1 + r.IntN(3)
		for j := 0; j < flips; j++ {
			// Any covered bit: BTH (not the masked byte), payload or ICRC.
			pos := r.IntN(len(pkt))
			if pos == 4 {
				pos = 5
			}
			pkt[pos] ^= 1 << r.IntN(8)
		}
		ph, _ := fl.PseudoHeader(nil, len(pkt))
		if _, _, err := CheckICRCUnknownID(ph, pkt); err == nil {
			passed++
		} else if !errors.Is(err, ErrICRC) {
			t.Fatalf("unexpected error %v", err)
		}
	}
	if passed > 2 {
		t.Errorf("%d of %d corrupted packets passed", passed, trials)
	}
}

// TestFlowDatagramICRC checks Flow.SetDatagramICRC and CheckDatagramICRC against
// SetICRC over PseudoHeader, over IPv4 and IPv6, and that a flipped bit or a
// wrong sender fails the check.
func TestFlowDatagramICRC(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	flows := []Flow{
		{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC001, TrafficClass: 0x88, HopLimit: 3},
		{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), SrcPort: 0xC002, FlowLabel: 0x12345},
	}
	for _, fl := range flows {
		for i := 0; i < 100; i++ {
			n := r.IntN(4097)
			h := Header{Opcode: RCSendOnly, DestQP: 0x12, PSN: PSN(i), PKey: DefaultPKey}
			payload := bytes.Repeat([]byte{byte(i)}, n)
			pkt, err := AppendTransport(nil, &h, payload)
			if err != nil {
				t.Fatal(err)
			}
			if err := fl.SetDatagramICRC(pkt); err != nil {
				t.Fatal(err)
			}
			ph, err := fl.PseudoHeader(nil, len(pkt))
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckICRC(ph, pkt); err != nil {
				t.Fatalf("%v, %d bytes: SetDatagramICRC disagrees with SetICRC over PseudoHeader: %v", fl.Src, n, err)
			}
			id, df, err := fl.CheckDatagramICRC(pkt)
			if err != nil || id != 0 || df != fl.Src.Is4() {
				t.Fatalf("%v: CheckDatagramICRC = %#x %v %v", fl.Src, id, df, err)
			}
			other := fl
			other.SrcPort++
			if _, _, err := other.CheckDatagramICRC(pkt); !errors.Is(err, ErrICRC) {
				t.Fatalf("%v: wrong source port: %v, want ErrICRC", fl.Src, err)
			}
			pkt[BTHLen+r.IntN(len(pkt)-BTHLen)] ^= 1 << r.IntN(8)
			if _, _, err := fl.CheckDatagramICRC(pkt); !errors.Is(err, ErrICRC) {
				t.Fatalf("%v: flipped bit: %v, want ErrICRC", fl.Src, err)
			}
		}
	}
	mixed := Flow{Src: addr4(10, 0, 0, 1), Dst: netip.MustParseAddr("fd00::2")}
	pkt, _ := AppendTransport(nil, &Header{Opcode: RCSendOnly, PKey: DefaultPKey}, nil)
	if err := mixed.SetDatagramICRC(pkt); !errors.Is(err, ErrBuildAddress) {
		t.Errorf("mixed families: %v, want ErrBuildAddress", err)
	}
}
