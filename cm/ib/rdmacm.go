package ib

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// rdma_cm port spaces.
const (
	PortSpaceTCP = 0x0106
	PortSpaceUDP = 0x0111
	PortSpaceIB  = 0x013F
	// UDPQKey is the Q_Key of rdma_cm's UDP port space.
	UDPQKey = 0x01234567
)

// ServiceID returns rdma_cm's service ID of a port in a port space:
// (port space << 16) | port.
func ServiceID(portSpace uint16, port uint16) uint64 {
	return uint64(portSpace)<<16 | uint64(port)
}

// SplitServiceID returns the port space and port of an rdma_cm service ID,
// ok false when the ID is not one of rdma_cm's (its top 32 bits nonzero).
func SplitServiceID(id uint64) (portSpace, port uint16, ok bool) {
	if id>>32 != 0 {
		return 0, 0, false
	}
	return uint16(id >> 16), uint16(id), true
}

// CMAHeaderSize is the size of rdma_cm's header at the start of a REQ's
// private data (struct cma_hdr).
const CMAHeaderSize = 36

// CMAHeader is rdma_cm's private-data header of a REQ or SIDR_REQ: the IP
// addresses and ports of the connection.
type CMAHeader struct {
	SrcPort uint16
	Src     netip.Addr
	Dst     netip.Addr
}

// Marshal writes the header into b[:CMAHeaderSize]. Both addresses must be
// of the same family (IPv4 addresses are written in the last 4 bytes of
// their 16, as rdma_cm does).
func (h *CMAHeader) Marshal(b []byte) {
	b = b[:CMAHeaderSize]
	clear0(b)
	b[0] = 0 // cma_hdr version
	if h.Src.Is4() {
		b[1] = 4 << 4
		s, d := h.Src.As4(), h.Dst.As4()
		copy(b[16:20], s[:])
		copy(b[32:36], d[:])
	} else {
		b[1] = 6 << 4
		s, d := h.Src.As16(), h.Dst.As16()
		copy(b[4:20], s[:])
		copy(b[20:36], d[:])
	}
	binary.BigEndian.PutUint16(b[2:], h.SrcPort)
}

// ParseCMAHeader reads an rdma_cm header.
func ParseCMAHeader(b []byte) (CMAHeader, error) {
	if len(b) < CMAHeaderSize {
		return CMAHeader{}, ErrTruncated
	}
	if b[0] != 0 {
		return CMAHeader{}, fmt.Errorf("ib: cma_hdr version %d", b[0])
	}
	h := CMAHeader{SrcPort: binary.BigEndian.Uint16(b[2:])}
	switch b[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return CMAHeader{}, fmt.Errorf("ib: cma_hdr IP version %d", b[1]>>4)
	}
	return h, nil
}

// FlowLabel returns the RoCEv2 flow label rdma_cm gives an IPv4
// connection between its ports: (sport * 31 + dport) & 0xFFFFF.
func FlowLabel(sport, dport uint16) uint32 {
	return (uint32(sport)*31 + uint32(dport)) & 0xFFFFF
}

// TimeoutNanos returns the duration of an IBTA timeout code: 4.096 µs
// × 2^t, in nanoseconds (t is capped at 31).
func TimeoutNanos(t uint8) int64 {
	if t > 31 {
		t = 31
	}
	return 4096 << t
}

// MTUCode returns the IB MTU code (1 = 256 .. 5 = 4096) of a byte count, 0
// for none.
func MTUCode(bytes int) uint8 {
	for c, n := uint8(5), 4096; c >= 1; c, n = c-1, n/2 {
		if bytes == n {
			return c
		}
	}
	return 0
}

// MTUBytes is MTUCode's inverse: 0 for a code that is not an MTU.
func MTUBytes(code uint8) int {
	if code < 1 || code > 5 {
		return 0
	}
	return 128 << code
}
