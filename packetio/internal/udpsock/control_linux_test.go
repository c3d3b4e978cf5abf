package udpsock

import (
	"encoding/binary"
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
	want := Control{Dst: [4]byte{10, 0, 0, 2}, HasDst: true, TOS: 0x02, RxTime: 7e9 + 9, GROSize: 1040, Drops: 123456}
	if c != want {
		t.Errorf("ParseControl = %+v, want %+v", c, want)
	}
	if c := ParseControl(b[:len(b)-unix.CmsgSpace(1)+8]); c.TOS != 0 || c.Drops != 123456 {
		t.Errorf("cut short: %+v", c)
	}
}
