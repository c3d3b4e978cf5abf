package udpsock

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/wire"
)

// UDP segmentation (GSO) and receive (GRO) offloads, as both socket-based
// paths use them (see package udp's documentation for what they do).

// MaxGSOBytes is the most UDP payload bytes one GSO message carries: the
// largest IPv4 UDP datagram's (65535 - 20 - 8).
const MaxGSOBytes = 0xFFFF - wire.IPv4UDPLen

// GROBuffer is the payload room of one receive with UDP GRO: the largest
// IPv4 UDP payload, rounded up. A smaller buffer would lose the rest of a
// coalesced train (MSG_TRUNC).
const GROBuffer = 64 << 10

// GROMaxSegments is the most datagrams Linux coalesces into one GRO buffer
// (UDP_GRO_CNT_MAX).
const GROMaxSegments = 64

// GROCmsgSpace is the receive control room a UDP_GRO cmsg takes
// (CmsgSpace(4): 24 bytes on 64-bit), beyond ControlSpace.
const GROCmsgSpace = 24

// GSOCmsgSpace is the control buffer of one GSO message: a UDP_SEGMENT
// cmsg carrying the segment size as a uint16.
var GSOCmsgSpace = unix.CmsgSpace(2)

// PutSegmentCmsg writes a UDP_SEGMENT cmsg with segment size size into b
// (at least GSOCmsgSpace bytes, pointer-aligned).
func PutSegmentCmsg(b []byte, size uint16) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(unsafe.SliceData(b)))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = size
}

// GSORefused tells the errors with which the kernel refuses a GSO message
// whose packets it would take one datagram each: EINVAL (a segment larger
// than the path MTU, SO_NO_CHECK, too many segments), EMSGSIZE (too
// large), EIO (no checksum offload on the device, before Linux 6.11).
func GSORefused(e unix.Errno) bool {
	return e == unix.EINVAL || e == unix.EMSGSIZE || e == unix.EIO
}

// ProbeGSO reports whether the kernel implements UDP_SEGMENT on fd:
// getsockopt UDP_SEGMENT exists exactly where it does (Linux 4.18).
func ProbeGSO(fd int) error {
	_, err := unix.GetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT)
	return err
}

// EnableGRO sets UDP_GRO on fd (Linux 5.0).
func EnableGRO(fd int) error {
	return unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1)
}

// GROKeepsIDs reports whether the running kernel's UDP GRO coalesces only
// datagrams whose IPv4 Identifications go up by one (or, with DF, stay
// equal): Linux 6.10 and later check them for UDP as for TCP. Before, UDP
// GRO ignored the Identification, so a train's position says nothing of it
// and Packet.GROSeg stays 0.
func GROKeepsIDs() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 6 || major == 6 && minor >= 10
}
