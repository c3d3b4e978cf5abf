package capture

import (
	"encoding/binary"

	"github.com/goroce/goroce/wire"
)

// Linux cooked capture header lengths.
const (
	SLLLen  = 16
	SLL2Len = 20
)

// linkL3 returns the offset of the IP header in a record of a link type other
// than Ethernet (wire.ParseFrame walks that one), or -1 when the record does
// not carry IPv4 or IPv6.
func linkL3(b []byte, lt LinkType) int {
	switch lt {
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

// frameRecord locates the IP, UDP and RoCEv2 transport headers of a record.
// It reports roce false for packets that are not UDP to port 4791; they are
// skipped. For RoCEv2 packets whose framing is wrong (bad IPv4 checksum, IP
// options, first fragment, inconsistent lengths) it returns the wire error
// with f as wire left it: the UDP header located and the transport packet
// ending at the UDP length, the IP length or the end of the record, whichever
// comes first (see wire.Frame).
func frameRecord(b []byte, lt LinkType, f *wire.Frame) (roce bool, err error) {
	if lt == LinkEthernet {
		err = wire.ParseFrame(b, f)
	} else if l3 := linkL3(b, lt); l3 < 0 {
		return false, nil
	} else {
		err = wire.ParseIP(b[l3:], f)
		f.Buf, f.L3 = b, l3
		if f.L4 != 0 {
			f.L4, f.End = f.L4+l3, f.End+l3
		}
	}
	if err == nil {
		return true, nil
	}
	// Without L4 there is no UDP header: not IP, not UDP, a later fragment,
	// or cut short. wire has not checked the port of every framing error.
	if f.L4 == 0 || f.UDP().DstPort() != wire.RoCEv2Port {
		return false, nil
	}
	return true, err
}
