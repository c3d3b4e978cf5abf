package udpsock

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// putCmsg appends a control message of level, typ and data to b.
func putCmsg(b []byte, level, typ int32, data []byte) []byte {
	h := make([]byte, unix.CmsgSpace(len(data)))
	c := (*unix.Cmsghdr)(unsafe.Pointer(&h[0]))
	c.Level, c.Type = level, typ
	c.SetLen(unix.CmsgLen(len(data)))
	copy(h[unix.CmsgLen(0):], data)
	return append(b, h...)
}

// ParseControl reads every control message the socket asks for, in the
// order the kernel writes them, and they fit ControlSpace and
// GROCmsgSpace.
func TestParseControl(t *testing.T) {
	le := binary.LittleEndian
	var b []byte
	ts := make([]byte, 16)
	le.PutUint64(ts, 7)
	le.PutUint64(ts[8:], 9)
	b = putCmsg(b, unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ts)
	b = putCmsg(b, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, le.AppendUint32(nil, 123456))
	b = putCmsg(b, unix.SOL_UDP, unix.UDP_GRO, le.AppendUint32(nil, 1040))
	b = putCmsg(b, unix.IPPROTO_IP, unix.IP_PKTINFO, []byte{1, 0, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2})
	b = putCmsg(b, unix.IPPROTO_IP, unix.IP_TOS, []byte{0x02})
	if len(b) > ControlSpace+GROCmsgSpace {
		t.Fatalf("%d bytes of control messages, room for %d", len(b), ControlSpace+GROCmsgSpace)
	}
	c := ParseControl(b)
	want := Control{Dst: netip.AddrFrom4([4]byte{10, 0, 0, 2}), HasDst: true, TOS: 0x02, RxTime: 7e9 + 9, GROSize: 1040, Drops: 123456}
	if c != want {
		t.Errorf("ParseControl = %+v, want %+v", c, want)
	}
	if c := ParseControl(b[:len(b)-unix.CmsgSpace(1)+8]); c.TOS != 0 || c.Drops != 123456 {
		t.Errorf("cut short: %+v", c)
	}
}

// Over IPv6: IPV6_PKTINFO and IPV6_TCLASS (an int), within ControlSpace.
func TestParseControl6(t *testing.T) {
	le := binary.LittleEndian
	var b []byte
	ts := make([]byte, 16)
	le.PutUint64(ts, 7)
	b = putCmsg(b, unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ts)
	b = putCmsg(b, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, le.AppendUint32(nil, 5))
	dst := netip.MustParseAddr("fd99::2")
	a16 := dst.As16()
	b = putCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, append(a16[:], 3, 0, 0, 0))
	b = putCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, le.AppendUint32(nil, 0xBA))
	if len(b) > ControlSpace {
		t.Fatalf("%d bytes of control messages, room for %d", len(b), ControlSpace)
	}
	want := Control{Dst: dst, HasDst: true, TOS: 0xBA, RxTime: 7e9, Drops: 5}
	if c := ParseControl(b); c != want {
		t.Errorf("ParseControl = %+v, want %+v", c, want)
	}
}

// PutIPCmsgs writes the TOS and TTL (IPv6: traffic class and hop limit) a
// datagram is sent with, each only when asked for, within IPCmsgSpace.
func TestPutIPCmsgs(t *testing.T) {
	b := make([]byte, IPCmsgSpace)
	if n := PutIPCmsgs(b, false, 0, 0); n != 0 {
		t.Errorf("nothing asked: %d bytes", n)
	}
	for _, v6 := range []bool{false, true} {
		n := PutIPCmsgs(b, v6, 0xB8, 7)
		if n != IPCmsgSpace {
			t.Fatalf("v6 %v: %d bytes, want %d", v6, n, IPCmsgSpace)
		}
		msgs, err := unix.ParseSocketControlMessage(b[:n])
		if err != nil || len(msgs) != 2 {
			t.Fatalf("v6 %v: %v, %d messages", v6, err, len(msgs))
		}
		level, tos, ttl := int32(unix.IPPROTO_IP), int32(unix.IP_TOS), int32(unix.IP_TTL)
		if v6 {
			level, tos, ttl = unix.IPPROTO_IPV6, unix.IPV6_TCLASS, unix.IPV6_HOPLIMIT
		}
		for i, w := range []struct {
			typ int32
			v   uint32
		}{{tos, 0xB8}, {ttl, 7}} {
			m := msgs[i]
			if m.Header.Level != level || m.Header.Type != w.typ || len(m.Data) != 4 || binary.LittleEndian.Uint32(m.Data) != w.v {
				t.Errorf("v6 %v: message %d: %+v %x", v6, i, m.Header, m.Data)
			}
		}
	}
	if n := PutIPCmsgs(b, true, 0, 9); n != unix.CmsgSpace(4) {
		t.Errorf("hop limit alone: %d bytes", n)
	}
}

// FuzzParseControl: any control buffer, IPv4's or IPv6's messages or
// garbage, is read without a panic and without reading past its end.
func FuzzParseControl(f *testing.F) {
	le := binary.LittleEndian
	a16 := netip.MustParseAddr("fd99::2").As16()
	var b []byte
	b = putCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, append(a16[:], 3, 0, 0, 0))
	b = putCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, le.AppendUint32(nil, 0xBA))
	f.Add(b)
	f.Add(putCmsg(nil, unix.IPPROTO_IP, unix.IP_PKTINFO, []byte{1, 0, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}))
	f.Add(putCmsg(nil, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, []byte{1, 2, 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := ParseControl(append([]byte(nil), b...)[:len(b):len(b)])
		if c.HasDst && !c.Dst.IsValid() {
			t.Fatalf("HasDst with no address: %+v", c)
		}
	})
}
