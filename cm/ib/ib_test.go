package ib

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/goroce/goroce/capture"
)

// rpingMADs returns the payloads of the UD SENDs to QP 1 in a capture of
// Linux's rping between two rdma_rxe hosts (rping -s / rping -c -C 5).
func rpingMADs(t testing.TB) [][]byte {
	f, err := os.Open("../../testdata/captures/rxe-rping.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := capture.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var (
		rec  capture.Record
		dec  capture.Decoder
		p    capture.Packet
		mads [][]byte
	)
	for {
		if err := rd.Next(&rec); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		dec.Decode(&rec, &p)
		if !p.RoCE || p.Err != nil || p.Wire.BTH().DestQP() != GSIQPN {
			continue
		}
		if q := p.Wire.DETH().QKey(); q != GSIQKey {
			t.Fatalf("QP1 packet with Q_Key %#x", q)
		}
		mads = append(mads, append([]byte(nil), p.Wire.Payload()...))
	}
	if len(mads) != 5 {
		t.Fatalf("capture has %d CM MADs, want REQ REP RTU DREQ DREP", len(mads))
	}
	return mads
}

func gid4(s string) [16]byte { return netip.MustParseAddr("::ffff:" + s).As16() }

// TestRealRping parses the CM MADs Linux sent in the capture, checks each
// field against what the kernel fills in on RoCE, and marshals them back
// to the identical bytes.
func TestRealRping(t *testing.T) {
	mads := rpingMADs(t)
	const tid = 0x0000000201676fc5
	wantREQ := &REQ{LocalCommID: 0xc56f6701, ServiceID: 0x01061c06, LocalCAGUID: 0x505400fffe990003,
		LocalQPN: 0x19, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20,
		TransportType: TransportRC, StartingPSN: 1849113, LocalCMResponseTimeout: 20, RetryCount: 7,
		PKey: 0xffff, PathMTU: 3, RNRRetryCount: 7, MaxCMRetries: 15, PrimaryLocalLID: 0xffff,
		PrimaryRemoteLID: 0xffff, PrimaryLocalGID: gid4("10.99.0.3"), PrimaryRemoteGID: gid4("10.99.0.2"),
		FlowLabel: 0xc1183, HopLimit: 64, LocalACKTimeout: 19}
	var hdr CMAHeader
	hdr = CMAHeader{SrcPort: 0xe6e3, Src: netip.MustParseAddr("10.99.0.3"), Dst: netip.MustParseAddr("10.99.0.2")}
	hdr.Marshal(wantREQ.PrivateData[:])
	wantREP := &REP{LocalCommID: 0x5585ebbf, RemoteCommID: 0xc56f6701, LocalQPN: 0x19, StartingPSN: 2609304,
		ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 15, RNRRetryCount: 7, LocalCAGUID: 0x505400fffe990002}
	want := []Message{
		wantREQ, wantREP,
		&RTU{LocalCommID: 0xc56f6701, RemoteCommID: 0x5585ebbf},
		&DREQ{LocalCommID: 0xc56f6701, RemoteCommID: 0x5585ebbf, RemoteQPN: 0x19},
		&DREP{LocalCommID: 0x5585ebbf, RemoteCommID: 0xc56f6701},
	}
	for i, mad := range mads {
		h, body, err := CheckCM(mad)
		if err != nil {
			t.Fatal(err)
		}
		if h.TID != tid || h.AttrID != want[i].Attr() {
			t.Fatalf("MAD %d: TID %#x attr %v", i, h.TID, h.AttrID)
		}
		m, err := Parse(h.AttrID, body)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, want[i]) {
			t.Errorf("%v:\n got %+v\nwant %+v", h.AttrID, m, want[i])
		}
		if out := AppendMAD(nil, h.TID, m); !bytes.Equal(out, mad) {
			t.Errorf("%v marshals to\n%s\nwant\n%s", h.AttrID, hex.Dump(out), hex.Dump(mad))
		}
	}
	// The REQ's rdma_cm header, and the flow label Linux derived from its ports.
	req := want[0].(*REQ)
	got, err := ParseCMAHeader(req.PrivateData[:])
	if err != nil || got != hdr {
		t.Fatalf("cma_hdr %+v, %v", got, err)
	}
	if fl := FlowLabel(hdr.SrcPort, 7174); fl != req.FlowLabel {
		t.Errorf("FlowLabel %#x, REQ has %#x", fl, req.FlowLabel)
	}
	if ps, port, ok := SplitServiceID(req.ServiceID); !ok || ps != PortSpaceTCP || port != 7174 || ServiceID(ps, port) != req.ServiceID {
		t.Errorf("service ID %#x: %#x %d %v", req.ServiceID, ps, port, ok)
	}
}

// golden builds expected bytes by hand: offset (in the CM message) ->
// bytes, from IBTA's tables, independently of the codec.
func golden(set map[int]string) []byte {
	b := make([]byte, CMSize)
	for off, h := range set {
		v, err := hex.DecodeString(strings.ReplaceAll(h, " ", ""))
		if err != nil {
			panic(err)
		}
		copy(b[off:], v)
	}
	return b
}

func TestGolden(t *testing.T) {
	rejPriv := [REJPrivateSize]byte{0: 0xAA, REJPrivateSize - 1: 0xBB}
	mraPriv := [MRAPrivateSize]byte{0: 0xCC}
	sidrPriv := [SIDRREQPrivateSize]byte{0: 0xDD}
	tests := []struct {
		m    Message
		want []byte
	}{
		{&REJ{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, MsgRejected: KindREQ, Reason: RejInvalidServiceID},
			golden(map[int]string{0: "01020304 05060708 00 00 0008"})},
		{&REJ{LocalCommID: 1, RemoteCommID: 2, MsgRejected: KindREP, ARILength: 3, Reason: RejConsumer,
			ARI: [REJARISize]byte{1, 2, 3}, PrivateData: rejPriv},
			golden(map[int]string{0: "00000001 00000002 40 06 001c 010203", 84: "AA", 231: "BB"})},
		{&REJ{MsgRejected: KindOther, Reason: RejStaleConn}, golden(map[int]string{8: "80 00 000a"})},
		{&MRA{LocalCommID: 9, RemoteCommID: 10, MsgMRAed: KindREP, ServiceTimeout: 20, PrivateData: mraPriv},
			golden(map[int]string{0: "00000009 0000000a 40 a0 CC"})},
		{&SIDRREQ{RequestID: 0x11223344, PKey: 0xffff, ServiceID: 0x01111234, PrivateData: sidrPriv},
			golden(map[int]string{0: "11223344 ffff 0000 0000000001111234 DD"})},
		{&SIDRREP{RequestID: 7, Status: 1, AddInfoLength: 2, QPN: 0xabcdef, ServiceID: 0x01111234, QKey: UDPQKey,
			AddInfo: [72]byte{0xEE}, PrivateData: [SIDRREPPrivateSize]byte{0xFF}},
			golden(map[int]string{0: "00000007 01 02 0000 abcdef 00 0000000001111234 01234567 EE", 96: "FF"})},
		{&REQ{LocalQPN: 0x123456, ResponderResources: 0xAB, RemoteCMResponseTimeout: 31, TransportType: TransportXRC,
			E2EFlowControl: true, LocalCMResponseTimeout: 1, RetryCount: 5, PathMTU: 5, RDCExists: true,
			RNRRetryCount: 6, MaxCMRetries: 8, SRQ: true, ExtTransportType: 1, FlowLabel: 0xFFFFF, PacketRate: 0x3F,
			SL: 0xF, SubnetLocal: true, LocalACKTimeout: 31},
			golden(map[int]string{32: "123456 AB", 43: "ff", 47: "0d", 50: "5e 89", 88: "fffff03f", 94: "f8 f8"})},
		{&REP{TargetACKDelay: 31, FailoverAccepted: 2, E2EFlowControl: true, RNRRetryCount: 7, SRQ: true},
			golden(map[int]string{26: "fd f0"})},
	}
	for _, tt := range tests {
		b := make([]byte, CMSize)
		for i := range b {
			b[i] = 0x5A // Marshal must write every byte
		}
		tt.m.Marshal(b)
		if !bytes.Equal(b, tt.want) {
			t.Errorf("%v %+v:\n got %x\nwant %x", tt.m.Attr(), tt.m, b, tt.want)
			continue
		}
		back, err := Parse(tt.m.Attr(), b)
		if err != nil || !reflect.DeepEqual(back, tt.m) {
			t.Errorf("%v: parse back %+v, %v", tt.m.Attr(), back, err)
		}
	}
}

func TestCheckCM(t *testing.T) {
	good := AppendMAD(nil, 1, &RTU{})
	if _, _, err := CheckCM(good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mut  func([]byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:255] }},
		{"long", func(b []byte) []byte { return append(b, 0) }},
		{"empty", func(b []byte) []byte { return nil }},
		{"base version", func(b []byte) []byte { b[0] = 2; return b }},
		{"class", func(b []byte) []byte { b[1] = 0x01; return b }},
		{"class version", func(b []byte) []byte { b[2] = 1; return b }},
		{"method", func(b []byte) []byte { b[3] = 0x81; return b }},
	} {
		b := tc.mut(append([]byte(nil), good...))
		if _, _, err := CheckCM(b); !errors.Is(err, ErrNotCM) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := Parse(AttrLAP, good[HeaderSize:]); !errors.Is(err, ErrNotCM) {
		t.Errorf("LAP: %v", err)
	}
}

// TestTruncation: every prefix of a message is refused, none panics.
func TestTruncation(t *testing.T) {
	for _, mad := range rpingMADs(t) {
		h, _ := ParseMADHeader(mad)
		for n := 0; n < MADSize; n++ {
			if _, _, err := CheckCM(mad[:n]); err == nil {
				t.Fatalf("%d-byte MAD accepted", n)
			}
			if n < HeaderSize {
				if _, err := ParseMADHeader(mad[:n]); !errors.Is(err, ErrTruncated) {
					t.Fatalf("header of %d bytes: %v", n, err)
				}
			}
			if n < CMSize {
				if _, err := Parse(h.AttrID, mad[HeaderSize:HeaderSize+n]); !errors.Is(err, ErrTruncated) {
					t.Fatalf("%v of %d bytes: %v", h.AttrID, n, err)
				}
			}
		}
	}
	for n := 0; n < CMAHeaderSize; n++ {
		if _, err := ParseCMAHeader(make([]byte, n)); !errors.Is(err, ErrTruncated) {
			t.Fatalf("cma_hdr of %d bytes: %v", n, err)
		}
	}
}

func TestCMAHeaderIPv6(t *testing.T) {
	h := CMAHeader{SrcPort: 40000, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
	b := make([]byte, CMAHeaderSize)
	h.Marshal(b)
	if b[1] != 0x60 {
		t.Fatalf("IP version byte %#x", b[1])
	}
	got, err := ParseCMAHeader(b)
	if err != nil || got != h {
		t.Fatalf("%+v %v", got, err)
	}
	b[1] = 0x50
	if _, err := ParseCMAHeader(b); err == nil {
		t.Fatal("IP version 5 accepted")
	}
}

func TestHelpers(t *testing.T) {
	if TimeoutNanos(20) != 4096<<20 || TimeoutNanos(40) != 4096<<31 {
		t.Error("TimeoutNanos")
	}
	for c := uint8(1); c <= 5; c++ {
		if MTUCode(MTUBytes(c)) != c {
			t.Errorf("MTU code %d", c)
		}
	}
	if MTUCode(1500) != 0 || MTUBytes(6) != 0 || MTUBytes(0) != 0 {
		t.Error("bad MTU accepted")
	}
	if AttrREQ.String() != "REQ" || AttrID(0x99).String() != "AttrID(0x0099)" {
		t.Error("AttrID.String")
	}
}

// FuzzMAD: arbitrary bytes never panic the parsers; whatever parses
// marshals to bytes that parse to the same message (reserved bits cleared),
// and marshalling that again is byte-stable.
func FuzzMAD(f *testing.F) {
	for _, m := range rpingMADs(f) {
		f.Add(m)
	}
	f.Add(AppendMAD(nil, 3, &REJ{Reason: 8}))
	f.Add(AppendMAD(nil, 4, &MRA{}))
	f.Add(AppendMAD(nil, 5, &SIDRREP{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseMADHeader(b)
		_, _ = ParseCMAHeader(b)
		h, body, err := CheckCM(b)
		if err != nil {
			if len(b) >= HeaderSize+CMSize {
				_, _ = Parse(AttrID(b[17]), b[HeaderSize:])
			}
			return
		}
		m, err := Parse(h.AttrID, body)
		if err != nil {
			return
		}
		out := AppendMAD(nil, h.TID, m)
		m2, err := Parse(h.AttrID, out[HeaderSize:])
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip: %+v != %+v (%v)", m, m2, err)
		}
		if out2 := AppendMAD(nil, h.TID, m2); !bytes.Equal(out, out2) {
			t.Fatal("marshal not stable")
		}
		if req, ok := m.(*REQ); ok {
			if hdr, err := ParseCMAHeader(req.PrivateData[:]); err == nil {
				var pb [CMAHeaderSize]byte
				hdr.Marshal(pb[:])
				if h2, err := ParseCMAHeader(pb[:]); err != nil || h2 != hdr {
					t.Fatalf("cma_hdr round trip %+v %+v %v", hdr, h2, err)
				}
			}
		}
	})
}
