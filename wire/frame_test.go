package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// frameOffsets is what a test expects of a Frame besides Buf.
type frameOffsets struct {
	HasVLAN   bool
	VLAN      uint16
	IPVersion int
	L3        int
	L4        int
	End       int
}

func offsetsOf(f *Frame) frameOffsets {
	return frameOffsets{f.HasVLAN, f.VLAN, f.IPVersion, f.L3, f.L4, f.End}
}

// checkFrameInvariants checks what Frame promises whatever the error: L4 and
// End are set together, within Buf, and the accessors are safe when they are.
func checkFrameInvariants(t *testing.T, f *Frame, b []byte) {
	t.Helper()
	if !bytes.Equal(f.Buf, b) || len(f.Buf) != len(b) {
		t.Fatalf("Buf is not the input")
	}
	if f.IPVersion != 0 && f.IPVersion != 4 && f.IPVersion != 6 {
		t.Fatalf("IPVersion %d", f.IPVersion)
	}
	if f.L3 < 0 || f.L3 > len(b) {
		t.Fatalf("L3 %d outside [0, %d]", f.L3, len(b))
	}
	if f.L4 == 0 {
		if f.End != 0 || f.IPv4() != nil || f.IPv6() != nil {
			t.Fatalf("L4 unset but End=%d IPv4=%x IPv6=%x", f.End, f.IPv4(), f.IPv6())
		}
		return
	}
	min := IPv4Len
	if f.IPVersion == 6 {
		min = IPv6Len
	}
	if f.IPVersion == 0 || f.L4 < f.L3+min || f.L4+UDPLen > f.End || f.End > len(b) {
		t.Fatalf("offsets %+v out of order (len %d)", offsetsOf(f), len(b))
	}
	if len(f.IPUDP()) != f.L4+UDPLen-f.L3 || len(f.UDP()) != UDPLen || len(f.Transport()) != f.End-f.L4-UDPLen {
		t.Fatal("accessor lengths")
	}
	if (f.IPv4() == nil) == (f.IPv6() == nil) {
		t.Fatal("exactly one of IPv4 and IPv6 must be set")
	}
	_, _ = f.Src(), f.Dst()
}

// insertVLAN returns b with an 802.1Q tag of VID 100 after the MAC addresses.
func insertVLAN(b []byte) []byte {
	return append(append(append([]byte(nil), b[:12]...), 0x81, 0x00, 0x00, 0x64), b[12:]...)
}

// ParseFrame and ParseIP fill the Frame as far as they get before an error.
func TestParseFrameErrorOffsets(t *testing.T) {
	fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC000}
	good, err := AppendFrame(nil, &fl, &Header{Opcode: RCSendOnly}, []byte("abcd"))
	if err != nil {
		t.Fatal(err)
	}
	fl6 := Flow{Src: addr6(1), Dst: addr6(2)}
	good6, err := AppendFrame(nil, &fl6, &Header{Opcode: RCSendOnly}, []byte("xyz"))
	if err != nil {
		t.Fatal(err)
	}
	const l3, l4, l46 = EthernetLen, EthernetLen + IPv4Len, EthernetLen + IPv6Len
	n, n6 := len(good), len(good6)
	put16 := binary.BigEndian.PutUint16
	mut := func(base []byte, fs ...func(b []byte)) []byte {
		b := bytes.Clone(base)
		for _, f := range fs {
			f(b)
		}
		return b
	}
	fixsum := func(b []byte) { IPv4(b[l3:]).SetChecksum() }
	badsum := func(b []byte) { b[l3+10] ^= 1 }
	ipLen := func(v int) func(b []byte) { return func(b []byte) { put16(b[l3+2:], uint16(v)) } }
	udpLen := func(at, v int) func(b []byte) { return func(b []byte) { put16(b[at+4:], uint16(v)) } }
	// withOptions inserts 4 bytes of IPv4 options (NOPs) and fixes the
	// header length, total length and checksum.
	withOptions := func(b []byte) []byte {
		o := append(append(append([]byte(nil), b[:l4]...), 1, 1, 1, 1), b[l4:]...)
		o[l3] = 0x46
		put16(o[l3+2:], uint16(len(o)-l3))
		fixsum(o)
		return o
	}
	opts := withOptions(good)
	ok4 := frameOffsets{IPVersion: 4, L3: l3, L4: l4, End: n}
	ok6 := frameOffsets{IPVersion: 6, L3: l3, L4: l46, End: n6}
	with := func(o frameOffsets, f func(o *frameOffsets)) frameOffsets { f(&o); return o }
	noUDP := func(o *frameOffsets) { o.L4, o.End = 0, 0 }
	for _, tt := range []struct {
		name     string
		b        []byte
		want     error
		off      frameOffsets
		linkOnly bool // the error is in the Ethernet header: no VLAN or IP variant
	}{
		{"ok", good, nil, ok4, false},
		{"padding", append(bytes.Clone(good), 0, 0, 0, 0), nil, ok4, false},
		{"ok ipv6", good6, nil, ok6, false},
		{"runt", good[:10], ErrFrameTruncated, frameOffsets{}, true},
		{"truncated tag", insertVLAN(good)[:15], ErrFrameTruncated, frameOffsets{}, true},
		{"truncated second tag", mut(insertVLAN(insertVLAN(good))[:20], func(b []byte) { b[12], b[13] = 0x88, 0xA8 }),
			ErrFrameTruncated, frameOffsets{HasVLAN: true, VLAN: 100}, true},
		{"ARP", mut(good, func(b []byte) { b[12], b[13] = 0x08, 0x06 }), ErrNotIP, frameOffsets{L3: l3}, true},
		{"third tag", insertVLAN(insertVLAN(insertVLAN(good))), ErrNotIP, frameOffsets{HasVLAN: true, VLAN: 100, L3: l3 + 8}, true},
		{"ends at EtherType", good[:l3], ErrFrameTruncated, frameOffsets{L3: l3}, false},
		{"truncated IPv4", good[:l4-1], ErrFrameTruncated, frameOffsets{IPVersion: 4, L3: l3}, false},
		{"truncated IPv6", good6[:l46-1], ErrFrameTruncated, frameOffsets{IPVersion: 6, L3: l3}, false},
		{"version 5", mut(good, func(b []byte) { b[l3] = 0x55 }), ErrNotIP, frameOffsets{L3: l3}, false},
		{"options", opts, ErrIPOptions, frameOffsets{IPVersion: 4, L3: l3, L4: l4 + 4, End: n + 4}, false},
		{"options bad checksum other port", mut(opts, badsum, func(b []byte) { b[l4+4+3]++ }),
			ErrIPOptions, frameOffsets{IPVersion: 4, L3: l3, L4: l4 + 4, End: n + 4}, false},
		{"options UDP length short", mut(opts, udpLen(l4+4, n-l4-4)),
			ErrIPOptions, frameOffsets{IPVersion: 4, L3: l3, L4: l4 + 4, End: n}, false},
		{"options UDP header cut", opts[:l4+4+UDPLen-1], ErrIPOptions, frameOffsets{IPVersion: 4, L3: l3}, false},
		{"options TCP", mut(opts, func(b []byte) { b[l3+9] = 6 }), ErrIPOptions, frameOffsets{IPVersion: 4, L3: l3}, false},
		{"header length 16", mut(good, func(b []byte) { b[l3] = 0x44 }), ErrIPOptions, frameOffsets{IPVersion: 4, L3: l3}, false},
		{"checksum", mut(good, badsum), ErrIPChecksum, ok4, false},
		{"checksum other port", mut(good, badsum, func(b []byte) { b[l4+3]++ }), ErrIPChecksum, ok4, false},
		{"checksum TCP", mut(good, badsum, func(b []byte) { b[l3+9] = 6 }), ErrIPChecksum, with(ok4, noUDP), false},
		{"checksum IP length long", mut(good, badsum, ipLen(n-l3+100)), ErrIPChecksum, ok4, false},
		{"checksum UDP header cut", mut(good, badsum)[:l4+UDPLen-1], ErrIPChecksum, with(ok4, noUDP), false},
		{"first fragment", mut(good, func(b []byte) { b[l3+6] |= 0x20 }, fixsum), ErrIPFragment, ok4, false},
		{"later fragment", mut(good, func(b []byte) { b[l3+7] = 1 }, fixsum), ErrIPFragment, with(ok4, noUDP), false},
		{"TCP", mut(good, func(b []byte) { b[l3+9] = 6 }, fixsum), ErrNotUDP, with(ok4, noUDP), false},
		{"ipv6 TCP", mut(good6, func(b []byte) { b[l3+6] = 6 }), ErrNotUDP, with(ok6, noUDP), false},
		{"IP length long", mut(good, ipLen(n-l3+8), fixsum), ErrIPLength, ok4, false},
		{"IP and UDP lengths long", mut(good, ipLen(n-l3+8), udpLen(l4, n-l4+8), fixsum), ErrIPLength, ok4, false},
		{"IP length zero", mut(good, ipLen(0), fixsum), ErrIPLength, with(ok4, func(o *frameOffsets) { o.End = l4 + UDPLen }), false},
		{"IP length 24", mut(good, ipLen(24), fixsum), ErrIPLength, with(ok4, func(o *frameOffsets) { o.End = l4 + UDPLen }), false},
		{"IP length 24, UDP header cut", mut(good, ipLen(24), fixsum)[:l3+24], ErrIPLength, with(ok4, noUDP), false},
		{"ipv6 payload length long", mut(good6, udpLen(l3, n6-l46+4)), ErrIPLength, ok6, false},
		{"ipv6 payload length 4", mut(good6, udpLen(l3, 4)), ErrIPLength, with(ok6, func(o *frameOffsets) { o.End = l46 + UDPLen }), false},
		{"ipv6 UDP header cut", good6[:l46+4], ErrIPLength, with(ok6, noUDP), false},
		{"IP length short", mut(good, ipLen(n-l3-4), fixsum), ErrUDPLength, with(ok4, func(o *frameOffsets) { o.End = n - 4 }), false},
		{"UDP length short", mut(good, udpLen(l4, n-l4-4)), ErrUDPLength, with(ok4, func(o *frameOffsets) { o.End = n - 4 }), false},
		{"UDP length long", mut(good, udpLen(l4, n-l4+4)), ErrUDPLength, ok4, false},
		{"UDP length 3", mut(good, udpLen(l4, 3)), ErrUDPLength, ok4, false},
		{"ipv6 UDP length short", mut(good6, udpLen(l46, n6-l46-4)), ErrUDPLength, with(ok6, func(o *frameOffsets) { o.End = n6 - 4 }), false},
		{"port", mut(good, func(b []byte) { b[l4+3]++ }), ErrNotRoCEv2, ok4, false},
		{"ipv6 port", mut(good6, func(b []byte) { b[l46+3]++ }), ErrNotRoCEv2, ok6, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			check := func(name string, b []byte, want frameOffsets, parse func([]byte, *Frame) error) {
				t.Helper()
				f := Frame{VLAN: 7, HasVLAN: true, IPVersion: 9, L3: 1, L4: 2, End: 3} // overwritten
				err := parse(b, &f)
				if (tt.want == nil) != (err == nil) || !errors.Is(err, tt.want) {
					t.Fatalf("%s: error %v, want %v", name, err, tt.want)
				}
				if err != nil && !errors.Is(err, ErrFrame) {
					t.Errorf("%s: %v is not an ErrFrame", name, err)
				}
				if got := offsetsOf(&f); got != want {
					t.Errorf("%s: offsets\n got %+v\nwant %+v", name, got, want)
				}
				checkFrameInvariants(t, &f, b)
			}
			check("ParseFrame", tt.b, tt.off, ParseFrame)
			if tt.linkOnly {
				return
			}
			shift := func(o frameOffsets, d int) frameOffsets {
				o.L3 += d
				if o.L4 != 0 {
					o.L4, o.End = o.L4+d, o.End+d
				}
				return o
			}
			tagged := shift(tt.off, VLANTagLen)
			tagged.HasVLAN, tagged.VLAN = true, 100
			check("ParseFrame with a VLAN tag", insertVLAN(tt.b), tagged, ParseFrame)
			check("ParseIP", tt.b[l3:], shift(tt.off, -l3), ParseIP)
		})
	}
}

// Every cut of a valid frame fails with ErrFrameTruncated or ErrIPLength and
// leaves a Frame that keeps its promises.
func TestParseFrameTruncation(t *testing.T) {
	fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC000}
	fl6 := Flow{Src: addr6(1), Dst: addr6(2)}
	for _, fl := range []*Flow{&fl, &fl6} {
		good, err := AppendFrame(nil, fl, &Header{Opcode: RCWriteOnly, RETH: RETHFields{DMALen: 5}}, []byte("hello"))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range [][]byte{good, insertVLAN(good), insertVLAN(insertVLAN(good))} {
			var f Frame
			for n := 0; n < len(b); n++ {
				err := ParseFrame(b[:n], &f)
				if !errors.Is(err, ErrFrameTruncated) && !errors.Is(err, ErrIPLength) {
					t.Fatalf("cut at %d of %d: %v", n, len(b), err)
				}
				checkFrameInvariants(t, &f, b[:n])
			}
		}
	}
}

// FuzzParseFrameOffsets feeds arbitrary frames to ParseFrame: whatever the
// error, the Frame keeps its promises, and ParseIP of the datagram at L3 says
// the same.
func FuzzParseFrameOffsets(f *testing.F) {
	fl := Flow{Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: 0xC000}
	fl6 := Flow{Src: addr6(1), Dst: addr6(2)}
	for _, fl := range []*Flow{&fl, &fl6} {
		good, err := AppendFrame(nil, fl, &Header{Opcode: RCSendOnly}, []byte("abcd"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(good)
		f.Add(insertVLAN(good))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr, ip Frame
		err := ParseFrame(b, &fr)
		checkFrameInvariants(t, &fr, b)
		if fr.L3 == 0 {
			return
		}
		if et := binary.BigEndian.Uint16(b[fr.L3-2:]); et != EtherTypeIPv4 && et != EtherTypeIPv6 {
			return
		}
		ierr := ParseIP(b[fr.L3:], &ip)
		checkFrameInvariants(t, &ip, b[fr.L3:])
		want := offsetsOf(&ip)
		want.HasVLAN, want.VLAN, want.L3 = fr.HasVLAN, fr.VLAN, fr.L3
		if want.L4 != 0 {
			want.L4, want.End = want.L4+fr.L3, want.End+fr.L3
		}
		if ierr != err || offsetsOf(&fr) != want {
			t.Fatalf("ParseFrame: %v %+v\nParseIP: %v %+v", err, offsetsOf(&fr), ierr, offsetsOf(&ip))
		}
	})
}

func BenchmarkParseFrame(b *testing.B) {
	bp := newBenchPacket(b, 1024)
	b.SetBytes(int64(len(bp.frame)))
	b.ReportAllocs()
	var f Frame
	for b.Loop() {
		if err := ParseFrame(bp.frame, &f); err != nil {
			b.Fatal(err)
		}
	}
}
