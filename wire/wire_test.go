package wire

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestOpcodeTable(t *testing.T) {
	// Every defined opcode, its name and headers (IBA table 35, rxe_opcode.c).
	want := []struct {
		op   Opcode
		name string
		hdrs HeaderMask
		pos  Position
		req  bool
		pay  bool
	}{
		{0x00, "RC_SEND_FIRST", 0, PosFirst, true, true},
		{0x01, "RC_SEND_MIDDLE", 0, PosMiddle, true, true},
		{0x02, "RC_SEND_LAST", 0, PosLast, true, true},
		{0x03, "RC_SEND_LAST_WITH_IMMEDIATE", HasImmDt, PosLast, true, true},
		{0x04, "RC_SEND_ONLY", 0, PosOnly, true, true},
		{0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", HasImmDt, PosOnly, true, true},
		{0x06, "RC_RDMA_WRITE_FIRST", HasRETH, PosFirst, true, true},
		{0x07, "RC_RDMA_WRITE_MIDDLE", 0, PosMiddle, true, true},
		{0x08, "RC_RDMA_WRITE_LAST", 0, PosLast, true, true},
		{0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", HasImmDt, PosLast, true, true},
		{0x0A, "RC_RDMA_WRITE_ONLY", HasRETH, PosOnly, true, true},
		{0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt, PosOnly, true, true},
		{0x0C, "RC_RDMA_READ_REQUEST", HasRETH, PosNone, true, false},
		{0x0D, "RC_RDMA_READ_RESPONSE_FIRST", HasAETH, PosFirst, false, true},
		{0x0E, "RC_RDMA_READ_RESPONSE_MIDDLE", 0, PosMiddle, false, true},
		{0x0F, "RC_RDMA_READ_RESPONSE_LAST", HasAETH, PosLast, false, true},
		{0x10, "RC_RDMA_READ_RESPONSE_ONLY", HasAETH, PosOnly, false, true},
		{0x11, "RC_ACKNOWLEDGE", HasAETH, PosNone, false, false},
		{0x12, "RC_ATOMIC_ACKNOWLEDGE", HasAETH | HasAtomicAckETH, PosNone, false, false},
		{0x13, "RC_COMPARE_SWAP", HasAtomicETH, PosNone, true, false},
		{0x14, "RC_FETCH_ADD", HasAtomicETH, PosNone, true, false},
		{0x16, "RC_SEND_LAST_WITH_INVALIDATE", HasIETH, PosLast, true, true},
		{0x17, "RC_SEND_ONLY_WITH_INVALIDATE", HasIETH, PosOnly, true, true},
		{0x20, "UC_SEND_FIRST", 0, PosFirst, true, true},
		{0x24, "UC_SEND_ONLY", 0, PosOnly, true, true},
		{0x2B, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt, PosOnly, true, true},
		{0x40, "RD_SEND_FIRST", HasRDETH | HasDETH, PosFirst, true, true},
		{0x4C, "RD_RDMA_READ_REQUEST", HasRDETH | HasDETH | HasRETH, PosNone, true, false},
		{0x51, "RD_ACKNOWLEDGE", HasRDETH | HasAETH, PosNone, false, false},
		{0x55, "RD_RESYNC", HasRDETH | HasDETH, PosNone, true, false},
		{0x64, "UD_SEND_ONLY", HasDETH, PosOnly, true, true},
		{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", HasDETH | HasImmDt, PosOnly, true, true},
		{0x81, "CNP", HasCNPPad, PosNone, true, false},
	}
	for _, w := range want {
		i := w.op.Info()
		if i.Name != w.name || w.op.String() != w.name || i.Headers != w.hdrs || i.Position != w.pos || i.Request != w.req || i.Payload != w.pay {
			t.Errorf("%#02x: got %s %v %v req=%v pay=%v, want %s %v %v req=%v pay=%v",
				uint8(w.op), i.Name, i.Headers, i.Position, i.Request, i.Payload, w.name, w.hdrs, w.pos, w.req, w.pay)
		}
	}
	// Header lengths as rxe_opcode.c has them.
	for op, n := range map[Opcode]int{RCSendOnly: 12, RCWriteOnly: 28, RCWriteOnlyImm: 32, RCReadRequest: 28,
		RCReadResponseFirst: 16, RCReadResponseMiddle: 12, RCAcknowledge: 16, RCAtomicAcknowledge: 24,
		RCCompareSwap: 40, UDSendOnly: 20, UDSendOnlyImm: 24, RCSendOnlyInvalidate: 16, CNP: 28} {
		if got := op.Info().HeaderLen; got != n {
			t.Errorf("%v header length %d, want %d", op, got, n)
		}
	}
	if off := RCWriteOnlyImm.Info().Offset(HasImmDt); off != BTHLen+RETHLen {
		t.Errorf("ImmDt of WRITE ONLY+IMM at %d", off)
	}
	if off := RCAtomicAcknowledge.Info().Offset(HasAtomicAckETH); off != BTHLen+AETHLen {
		t.Errorf("AtomicAckETH at %d", off)
	}
	valid := 0
	for i := 0; i < 256; i++ {
		o := Opcode(i)
		if !o.Valid() {
			if !strings.HasPrefix(o.String(), "UNKNOWN_0x") {
				t.Errorf("%#x: %q", i, o.String())
			}
			continue
		}
		valid++
		if o.Info().Request == (o.Info().Operation == OpReadResponse || o.Info().Operation == OpAcknowledge || o.Info().Operation == OpAtomicAcknowledge) {
			t.Errorf("%v: request/response wrong", o)
		}
	}
	// RC 25 (FLUSH and ATOMIC WRITE included) + UC 12 + RD 22 (0x40-0x54
	// without 0x15, plus RESYNC) + UD 2 + CNP 1.
	if valid != 25+12+21+1+2+1 {
		t.Errorf("%d valid opcodes", valid)
	}
	if Opcode(0x15).Valid() || Opcode(0x18).Valid() || Opcode(0x66).Valid() {
		t.Error("reserved opcode reported valid")
	}
}

func TestPSN(t *testing.T) {
	const max = PSN(PSNMask)
	tests := []struct {
		a, b   PSN
		diff   int32
		before bool
	}{
		{0, 0, 0, false},
		{1, 0, 1, false},
		{0, 1, -1, true},
		{0, max, 1, false}, // 0 follows 0xFFFFFF
		{max, 0, -1, true}, // wrap
		{0x800000, 0, -0x800000, true},
		{0x7FFFFF, 0, 0x7FFFFF, false},
		{10, 0xFFFFF0, 26, false},
	}
	for _, tt := range tests {
		if d := tt.a.Diff(tt.b); d != tt.diff {
			t.Errorf("%#x.Diff(%#x) = %d, want %d", tt.a, tt.b, d, tt.diff)
		}
		if tt.a.Before(tt.b) != tt.before {
			t.Errorf("%#x.Before(%#x) = %v", tt.a, tt.b, !tt.before)
		}
		if tt.a.After(tt.b) != (tt.diff > 0) {
			t.Errorf("%#x.After(%#x) wrong", tt.a, tt.b)
		}
	}
	if max.Add(1) != 0 || PSN(5).Add(0xFFFFFF) != 4 || PSN(0).Sub(1) != max {
		t.Error("Add/Sub do not wrap")
	}
	if PSN(0xFFFFFE).Distance(3) != 5 || PSN(3).Distance(3) != 0 {
		t.Error("Distance")
	}
	if PSN(1<<24).Valid() || !max.Valid() {
		t.Error("Valid")
	}
}

// TestTruncation cuts every opcode's headers at every length: Parse must name
// the header that is cut short.
func TestTruncation(t *testing.T) {
	for i := 0; i < 256; i++ {
		op := Opcode(i)
		info := op.Info()
		if !info.Valid() {
			continue
		}
		h := Header{Opcode: op, AETH: AETHFields{Syndrome: ACKUnlimited}}
		full, err := AppendTransport(nil, &h, nil)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < info.HeaderLen+ICRCLen; n++ {
			var p Packet
			err := Parse(full[:n], &p)
			if !errors.Is(err, ErrTruncated) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("%v cut to %d: %v", op, n, err)
			}
			var want *Error
			switch {
			case n < BTHLen:
				want = ErrTruncatedBTH
			case n < MinPacketLen && info.HeaderLen == BTHLen:
				want = ErrTruncatedICRC
			default:
				// The header that does not fit before the last four bytes.
				off := BTHLen
				for _, b := range headerOrder {
					if info.Headers&(1<<b) == 0 {
						continue
					}
					off += int(headerLens[b])
					if off > n-ICRCLen {
						want = headerTruncErrs[b]
						break
					}
				}
			}
			if err != want {
				t.Fatalf("%v cut to %d: %v, want %v", op, n, err, want)
			}
			if !strings.Contains(err.Error(), "truncated") {
				t.Errorf("%v: message %q", op, err)
			}
		}
	}
}

func TestParseRules(t *testing.T) {
	build := func(h Header, payload []byte) []byte {
		b, err := AppendTransport(nil, &h, payload)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		pkt  []byte
		pmtu int
		want error
	}{
		{"send only ok", build(Header{Opcode: RCSendOnly}, make([]byte, 13)), 1024, nil},
		{"send only over pmtu", build(Header{Opcode: RCSendOnly}, make([]byte, 1028)), 1024, ErrPMTUOnly},
		{"send only over 4096", build(Header{Opcode: RCSendOnly}, make([]byte, 4100)), 0, ErrPMTUOnly},
		{"first not mtu", build(Header{Opcode: RCSendFirst}, make([]byte, 1000)), 0, ErrPMTUFirst},
		{"first mtu 256", build(Header{Opcode: RCSendFirst}, make([]byte, 256)), 256, nil},
		{"first wrong mtu", build(Header{Opcode: RCSendFirst}, make([]byte, 256)), 1024, ErrPMTUFirst},
		{"last empty", build(Header{Opcode: RCSendLast}, nil), 1024, ErrPMTULast},
		{"write only length", build(Header{Opcode: RCWriteOnly, RETH: RETHFields{DMALen: 9}}, make([]byte, 8)), 0, ErrDMALength},
		{"write first length", build(Header{Opcode: RCWriteFirst, RETH: RETHFields{DMALen: 1024}}, make([]byte, 1024)), 0, ErrDMALength},
		{"write first ok", build(Header{Opcode: RCWriteFirst, RETH: RETHFields{DMALen: 1025}}, make([]byte, 1024)), 1024, nil},
		{"atomic misaligned", build(Header{Opcode: RCFetchAdd, AtomicETH: AtomicFields{VA: 12}}, nil), 0, ErrAtomicAligned},
		{"read resp nak", build(Header{Opcode: RCReadResponseOnly, AETH: AETHFields{Syndrome: NAKRemoteAccess}}, []byte{1}), 0, ErrSyndromeNotACK},
		{"ack reserved nak code", build(Header{Opcode: RCAcknowledge, AETH: AETHFields{Syndrome: 0x65}}, nil), 0, ErrSyndrome},
		{"ack bit 7", build(Header{Opcode: RCAcknowledge, AETH: AETHFields{Syndrome: 0x9F}}, nil), 0, ErrSyndrome},
		{"ack rnr", build(Header{Opcode: RCAcknowledge, AETH: AETHFields{Syndrome: RNRNAK(14)}}, nil), 0, nil},
		{"cnp", build(Header{Opcode: CNP, BECN: true}, nil), 0, nil},
	}
	for _, tt := range tests {
		var p Packet
		err := Parse(tt.pkt, &p)
		if err == nil {
			err = p.CheckPMTU(tt.pmtu)
		}
		if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
		if errors.Is(err, ErrInvalidRequest) && p.Info == nil {
			t.Errorf("%s: invalid request without packet", tt.name)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	for _, tt := range []struct {
		h    Header
		pay  []byte
		want error
	}{
		{Header{Opcode: 0x15}, nil, ErrBuildOpcode},
		{Header{Opcode: RCAcknowledge}, []byte{1}, ErrBuildPayload},
		{Header{Opcode: RCSendOnly, DestQP: 1 << 24}, nil, ErrBuildRange},
		{Header{Opcode: RCSendOnly, PSN: 1 << 24}, nil, ErrBuildRange},
		{Header{Opcode: RCSendOnly}, make([]byte, 70000), ErrBuildTooLong},
	} {
		dst := []byte{9}
		out, err := AppendTransport(dst, &tt.h, tt.pay)
		if !errors.Is(err, tt.want) || !errors.Is(err, ErrBuild) {
			t.Errorf("%+v: %v, want %v", tt.h.Opcode, err, tt.want)
		}
		if len(out) != 1 {
			t.Errorf("failed build changed dst")
		}
	}
	fl := Flow{Src: addr4(1, 2, 3, 4), Dst: addr6(1)}
	if _, err := AppendFrame(nil, &fl, &Header{Opcode: RCSendOnly}, nil); !errors.Is(err, ErrBuildAddress) {
		t.Errorf("mixed families: %v", err)
	}
	if _, err := AppendDatagram(nil, &fl, &Header{Opcode: RCSendOnly}, nil); !errors.Is(err, ErrBuildAddress) {
		t.Errorf("mixed families: %v", err)
	}
}

func TestSyndrome(t *testing.T) {
	for _, tt := range []struct {
		s    Syndrome
		text string
		ok   bool
	}{
		{0x1F, "ACK credits=unlimited", true},
		{0x0A, "ACK credits=10", true},
		{0x2E, "RNR_NAK timer=14 (1.28ms)", true},
		{0x60, "NAK PSN_SEQUENCE_ERROR", true},
		{0x62, "NAK REMOTE_ACCESS_ERROR", true},
		{0x64, "NAK INVALID_RD_REQUEST", true},
		{0x65, "NAK reserved code 5", false},
		{0x40, "reserved syndrome 0x40", false},
		{0x80, "reserved syndrome 0x80", false},
	} {
		if tt.s.String() != tt.text || tt.s.Valid() != tt.ok {
			t.Errorf("%#x: %q valid=%v", uint8(tt.s), tt.s.String(), tt.s.Valid())
		}
	}
	if RNRTimer(0) != 655360*time.Microsecond || RNRTimer(1) != 10*time.Microsecond || RNRTimer(31) != 491520*time.Microsecond {
		t.Error("RNR timer table")
	}
	if !RNRNAK(3).IsRNR() || RNRNAK(3).Value() != 3 || !ACKCredits(5).IsACK() || !NAKPSNSequence.IsNAK() {
		t.Error("syndrome constructors")
	}
}

func TestSourcePort(t *testing.T) {
	// Expected values computed independently from the kernel's formulas
	// (rdma_calc_flow_label, rdma_flow_label_to_udp_sport, hash_32).
	for _, tt := range []struct {
		l, r QPN
		fl   uint32
		port uint16
	}{
		{0x11, 0x12, 0x132, 0xC132},
		{0xABCDEF, 0x123456, 0xAC3E3, 0xC3C8},
		{1, 1, 1, 0xC001},
		{0xFFFFFF, 0xFFFFFF, 0xFFF1E, 0xFF21},
	} {
		if got := FlowLabel(tt.l, tt.r); got != tt.fl {
			t.Errorf("FlowLabel(%#x, %#x) = %#x, want %#x", tt.l, tt.r, got, tt.fl)
		}
		if got := SourcePort(0, tt.l, tt.r); got != tt.port {
			t.Errorf("SourcePort(0, %#x, %#x) = %#x, want %#x", tt.l, tt.r, got, tt.port)
		}
	}
	if got := SourcePort(0x12345, 1, 2); got != 0xE341 {
		t.Errorf("SourcePort(0x12345) = %#x", got)
	}
	for q, want := range map[QPN]uint16{0x11: 0xDF94, 0x12: 0xF806, 1: 0xD872, 0xFFFFFF: 0xF94D} {
		if got := QPSourcePort(q); got != want {
			t.Errorf("QPSourcePort(%#x) = %#x, want %#x", q, got, want)
		}
	}
}

func TestParseFrameErrors(t *testing.T) {
	fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC000}
	good, err := AppendFrame(nil, &fl, &Header{Opcode: RCSendOnly}, []byte("abcd"))
	if err != nil {
		t.Fatal(err)
	}
	mut := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	fixsum := func(b []byte) { IPv4(b[EthernetLen:]).SetChecksum() }
	for _, tt := range []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:10], ErrFrameTruncated},
		{"arp", mut(func(b []byte) { b[12], b[13] = 0x08, 0x06 }), ErrNotIP},
		{"checksum", mut(func(b []byte) { b[EthernetLen+10] ^= 1 }), ErrIPChecksum},
		{"options", mut(func(b []byte) { b[EthernetLen] = 0x46; fixsum(b) }), ErrIPOptions},
		{"fragment", mut(func(b []byte) { b[EthernetLen+6] |= 0x20; fixsum(b) }), ErrIPFragment},
		{"tcp", mut(func(b []byte) { b[EthernetLen+9] = 6; fixsum(b) }), ErrNotUDP},
		{"port", mut(func(b []byte) { b[EthernetLen+IPv4Len+3] = 0x80 }), ErrNotRoCEv2},
		{"udp length", mut(func(b []byte) { b[EthernetLen+IPv4Len+5]++ }), ErrUDPLength},
		{"ip length", mut(func(b []byte) { b[EthernetLen+3] += 8; fixsum(b) }), ErrIPLength},
	} {
		var f Frame
		if err := ParseFrame(tt.b, &f); !errors.Is(err, tt.want) || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	// VLAN-tagged and padded frames parse.
	tagged := append(append(append([]byte(nil), good[:12]...), 0x81, 0x00, 0x00, 0x64), good[12:]...)
	tagged = append(tagged, 0, 0, 0, 0) // Ethernet padding
	var f Frame
	if err := ParseFrame(tagged, &f); err != nil || !f.HasVLAN || f.VLAN != 100 || len(f.Transport()) != len(good)-EthernetLen-IPv4UDPLen {
		t.Errorf("VLAN frame: %v %+v", err, f)
	}
	if err := CheckICRC(f.IPUDP(), f.Transport()); err != nil {
		t.Errorf("VLAN frame ICRC: %v", err)
	}
	u := mut(func(b []byte) { b[len(b)-10] ^= 0xFF })
	if err := ParseFrame(u, &f); err != nil {
		t.Fatal(err)
	}
	if err := f.CheckUDPChecksum(); err != nil {
		t.Errorf("zero UDP checksum must be accepted: %v", err)
	}
	v6 := Flow{Src: addr6(1), Dst: addr6(2)}
	b6, _ := AppendFrame(nil, &v6, &Header{Opcode: RCSendOnly}, []byte("xyz"))
	b6[len(b6)-6] ^= 1
	if err := ParseFrame(b6, &f); err != nil {
		t.Fatal(err)
	}
	if err := f.CheckUDPChecksum(); !errors.Is(err, ErrUDPChecksum) {
		t.Errorf("corrupt IPv6 UDP: %v", err)
	}
}

func TestDatagramICRC(t *testing.T) {
	// A datagram's ICRC is the one of the frame Linux sends for it: DF, ID 0.
	fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC001, HopLimit: 7, TrafficClass: 0x02}
	h := Header{Opcode: RCSendOnly, DestQP: 5, PSN: 9, PKey: DefaultPKey}
	dg, err := AppendDatagram(nil, &fl, &h, []byte("datagram"))
	if err != nil {
		t.Fatal(err)
	}
	fr, _ := AppendFrame(nil, &fl, &h, []byte("datagram"))
	if got := fr[EthernetLen+IPv4UDPLen:]; string(got) != string(dg) {
		t.Errorf("datagram %x\nframe payload %x", dg, got)
	}
}

func TestMACString(t *testing.T) {
	if s := (MAC{2, 0, 0, 0, 0xab, 1}).String(); s != "02:00:00:00:ab:01" {
		t.Error(s)
	}
}

// TestFlushAtomicWriteLayout checks FLUSH (0x1C) and ATOMIC WRITE (0x1D)
// as rdma_rxe lays them out: FLUSH is BTH, FETH, RETH (32 bytes of headers)
// without payload; ATOMIC WRITE is BTH, RETH and 8 bytes of payload.
func TestFlushAtomicWriteLayout(t *testing.T) {
	fl := RCFlush.Info()
	if fl.Name != "RC_FLUSH" || fl.HeaderLen != BTHLen+FETHLen+RETHLen || fl.Offset(HasFETH) != BTHLen || fl.Offset(HasRETH) != BTHLen+FETHLen || fl.Payload {
		t.Fatalf("FLUSH: %+v", *fl)
	}
	aw := RCAtomicWrite.Info()
	if aw.Name != "RC_ATOMIC_WRITE" || aw.HeaderLen != BTHLen+RETHLen || !aw.Payload || !aw.Request {
		t.Fatalf("ATOMIC WRITE: %+v", *aw)
	}
	h := Header{Opcode: RCFlush, PKey: DefaultPKey, DestQP: 0x12, PSN: 7, AckReq: true, FlushType: FlushGlobal | FlushPersistent, FlushLevel: FlushMR,
		RETH: RETHFields{VA: 0x1000, RKey: 0x3344, DMALen: 64}}
	b, err := AppendTransport(nil, &h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := b[BTHLen : BTHLen+4]; got[0] != 0 || got[1] != 0 || got[2] != 0 || got[3] != 0x13 {
		t.Fatalf("FETH bytes % x, want 00 00 00 13", got)
	}
	var p Packet
	if err := Parse(b, &p); err != nil {
		t.Fatal(err)
	}
	var back Header
	back.Load(&p)
	if back != h {
		t.Fatalf("round trip %+v, want %+v", back, h)
	}
	h = Header{Opcode: RCAtomicWrite, PKey: DefaultPKey, DestQP: 0x12, PSN: 8, AckReq: true, RETH: RETHFields{VA: 0x2000, RKey: 9, DMALen: 8}}
	b, err = AppendTransport(nil, &h, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := Parse(b, &p); err != nil || p.PayloadLen != 8 || p.Payload()[7] != 8 {
		t.Fatalf("ATOMIC WRITE parse: %v, payload %d", err, p.PayloadLen)
	}
}
