package capture

import (
	"encoding/binary"
	"errors"

	"github.com/goroce/goroce/wire"
)

// Linux cooked capture header lengths.
const (
	SLLLen  = 16
	SLL2Len = 20
)

// linkL3 returns the offset of the IP header in a record of link type lt, or
// -1 when the record does not carry IPv4 or IPv6.
func linkL3(b []byte, lt LinkType) int {
	switch lt {
	case LinkEthernet:
		off, et := ethernetType(b)
		if off < 0 || (et != wire.EtherTypeIPv4 && et != wire.EtherTypeIPv6) {
			return -1
		}
		return off
	case LinkSLL:
		if len(b) < SLLLen {
			return -1
		}
		if et := binary.BigEndian.Uint16(b[14:]); et != wire.EtherTypeIPv4 && et != wire.EtherTypeIPv6 {
			return -1
		}
		return SLLLen
	case LinkSLL2:
		if len(b) < SLL2Len {
			return -1
		}
		if et := binary.BigEndian.Uint16(b); et != wire.EtherTypeIPv4 && et != wire.EtherTypeIPv6 {
			return -1
		}
		return SLL2Len
	case LinkRaw, LinkRawDLT12, LinkRawDLT14, LinkIPv4, LinkIPv6:
		return 0
	}
	return -1
}

// ethernetType walks an Ethernet II header and up to two VLAN tags, as
// wire.ParseFrame does, and returns the offset after the EtherType and the
// EtherType, or -1 when the frame is too short.
func ethernetType(b []byte) (int, uint16) {
	if len(b) < wire.EthernetLen {
		return -1, 0
	}
	off := 12
	et := binary.BigEndian.Uint16(b[off:])
	for tags := 0; (et == wire.EtherTypeVLAN || et == wire.EtherTypeQinQ) && tags < 2; tags++ {
		if len(b) < off+2+wire.VLANTagLen {
			return -1, 0
		}
		off += wire.VLANTagLen
		et = binary.BigEndian.Uint16(b[off:])
	}
	return off + 2, et
}

// frameRecord locates the IP, UDP and RoCEv2 transport headers of a record.
// It reports roce false for packets that are not UDP to port 4791; they are
// skipped. For RoCEv2 packets whose framing is wrong (bad IPv4 checksum, IP
// options, fragment, inconsistent lengths) it still fills f as well as it
// can and returns the wire error.
func frameRecord(b []byte, lt LinkType, f *wire.Frame) (roce bool, err error) {
	l3 := linkL3(b, lt)
	if lt == LinkEthernet {
		err = wire.ParseFrame(b, f)
	} else if l3 < 0 {
		return false, nil
	} else {
		err = wire.ParseIP(b[l3:], f)
		if err == nil {
			f.Buf, f.L3, f.L4, f.End = b, f.L3+l3, f.L4+l3, f.End+l3
		}
	}
	if err == nil {
		return true, nil
	}
	if l3 < 0 || errors.Is(err, wire.ErrNotRoCEv2) || errors.Is(err, wire.ErrNotUDP) || errors.Is(err, wire.ErrNotIP) {
		return false, nil
	}
	if !lenientFrame(b, lt, l3, f) {
		return false, nil
	}
	return true, err
}

// lenientFrame finds the UDP header of an IP datagram at b[l3:] without
// checking what wire.ParseIP checks, and fills f when it is UDP to port 4791.
// The transport packet ends at the UDP length, the IP length or the end of
// the record, whichever comes first.
func lenientFrame(b []byte, lt LinkType, l3 int, f *wire.Frame) bool {
	if len(b) < l3+1 {
		return false
	}
	var ver, l4, end int
	switch b[l3] >> 4 {
	case 4:
		if len(b) < l3+wire.IPv4Len {
			return false
		}
		ip := wire.IPv4(b[l3:])
		if ip.HeaderLen() < wire.IPv4Len || ip.Protocol() != wire.IPProtocolUDP ||
			binary.BigEndian.Uint16(b[l3+6:])&0x1FFF != 0 { // a later fragment has no UDP header
			return false
		}
		ver, l4, end = 4, l3+ip.HeaderLen(), l3+ip.TotalLen()
	case 6:
		if len(b) < l3+wire.IPv6Len {
			return false
		}
		ip := wire.IPv6(b[l3:])
		if ip.NextHeader() != wire.IPProtocolUDP {
			return false
		}
		ver, l4, end = 6, l3+wire.IPv6Len, l3+wire.IPv6Len+ip.PayloadLen()
	default:
		return false
	}
	if len(b) < l4+wire.UDPLen {
		return false
	}
	u := wire.UDP(b[l4:])
	if u.DstPort() != wire.RoCEv2Port {
		return false
	}
	if n := u.Length(); n >= wire.UDPLen && l4+n < end {
		end = l4 + n
	}
	end = min(max(end, l4+wire.UDPLen), len(b))
	*f = wire.Frame{Buf: b, IPVersion: ver, L3: l3, L4: l4, End: end}
	if lt == LinkEthernet && l3 > wire.EthernetLen {
		f.HasVLAN, f.VLAN = true, binary.BigEndian.Uint16(b[14:])&0x0FFF
	}
	return true
}
