package wire

import (
	"encoding/binary"
	"net/netip"
)

// RoCEv2Port is the UDP destination port of RoCEv2 (IANA).
const RoCEv2Port = 4791

// Ethernet framing constants.
const (
	EthernetLen    = 14
	VLANTagLen     = 4
	EtherTypeIPv4  = 0x0800
	EtherTypeIPv6  = 0x86DD
	EtherTypeVLAN  = 0x8100
	EtherTypeQinQ  = 0x88A8
	IPProtocolUDP  = 17
	ipv4FlagDF     = 0x4000
	ipv4FlagMF     = 0x2000
	ipv4OffsetMask = 0x1FFF
	defaultTTL     = 64
)

// MAC is an Ethernet address.
type MAC [6]byte

// String formats the address as aa:bb:cc:dd:ee:ff.
func (m MAC) String() string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 17)
	for i, c := range m {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hex[c>>4], hex[c&15])
	}
	return string(b)
}

// Ethernet is a view of an Ethernet II header.
//
//	+--------+--------+--------+
//	| dst(6) | src(6) | type(2)|
//	+--------+--------+--------+
type Ethernet []byte

// Dst returns the destination address.
func (e Ethernet) Dst() (m MAC) { copy(m[:], e); return }

// Src returns the source address.
func (e Ethernet) Src() (m MAC) { copy(m[:], e[6:]); return }

// EtherType returns the EtherType.
func (e Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(e[12:]) }

// Set writes all fields.
func (e Ethernet) Set(dst, src MAC, etherType uint16) {
	copy(e, dst[:])
	copy(e[6:], src[:])
	binary.BigEndian.PutUint16(e[12:], etherType)
}

// IPv4 is a view of an IPv4 header (RFC 791). RoCEv2 uses a 20-byte header
// with DF set.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version|  IHL  |   DSCP    |ECN|          Total Length         |
//	|         Identification        |Flags|     Fragment Offset     |
//	|  Time to Live |    Protocol   |         Header Checksum       |
//	|                       Source Address                          |
//	|                    Destination Address                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IPv4 []byte

// Version returns the IP version field.
func (h IPv4) Version() uint8 { return h[0] >> 4 }

// HeaderLen returns the header length in bytes (IHL x 4).
func (h IPv4) HeaderLen() int { return int(h[0]&0x0F) * 4 }

// TOS returns the DSCP and ECN byte.
func (h IPv4) TOS() uint8 { return h[1] }

// TotalLen returns the total length of the datagram.
func (h IPv4) TotalLen() int { return int(binary.BigEndian.Uint16(h[2:])) }

// ID returns the Identification field.
func (h IPv4) ID() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// DF reports whether the don't-fragment flag is set.
func (h IPv4) DF() bool { return binary.BigEndian.Uint16(h[6:])&ipv4FlagDF != 0 }

// Fragment reports whether the datagram is a fragment (MF set or a non-zero
// fragment offset).
func (h IPv4) Fragment() bool {
	return binary.BigEndian.Uint16(h[6:])&(ipv4FlagMF|ipv4OffsetMask) != 0
}

// TTL returns the time to live.
func (h IPv4) TTL() uint8 { return h[8] }

// Protocol returns the protocol number.
func (h IPv4) Protocol() uint8 { return h[9] }

// Checksum returns the header checksum field.
func (h IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(h[10:]) }

// Src returns the source address.
func (h IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(h[12:16])) }

// Dst returns the destination address.
func (h IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(h[16:20])) }

// ChecksumOK reports whether the header checksum is right.
func (h IPv4) ChecksumOK() bool { return checksumFold(sum16(0, h[:h.HeaderLen()])) == 0xFFFF }

// SetChecksum computes and writes the header checksum.
func (h IPv4) SetChecksum() {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], ^checksumFold(sum16(0, h[:h.HeaderLen()])))
}

// IPv6 is a view of an IPv6 header (RFC 8200).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version| Traffic Class |           Flow Label                  |
//	|         Payload Length        |  Next Header  |   Hop Limit   |
//	|                 Source Address (128 bits)                     |
//	|              Destination Address (128 bits)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IPv6 []byte

// Version returns the IP version field.
func (h IPv6) Version() uint8 { return h[0] >> 4 }

// TrafficClass returns the traffic class (DSCP and ECN).
func (h IPv6) TrafficClass() uint8 { return uint8(binary.BigEndian.Uint16(h) >> 4) }

// FlowLabel returns the 20-bit flow label.
func (h IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(h) & 0xFFFFF }

// PayloadLen returns the payload length.
func (h IPv6) PayloadLen() int { return int(binary.BigEndian.Uint16(h[4:])) }

// NextHeader returns the next header (protocol) number.
func (h IPv6) NextHeader() uint8 { return h[6] }

// HopLimit returns the hop limit.
func (h IPv6) HopLimit() uint8 { return h[7] }

// Src returns the source address.
func (h IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(h[8:24])) }

// Dst returns the destination address.
func (h IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(h[24:40])) }

// UDP is a view of a UDP header (RFC 768).
//
//	+----------------+----------------+----------------+----------------+
//	| src port (16)  | dst port (16)  |  length (16)   | checksum (16)  |
//	+----------------+----------------+----------------+----------------+
type UDP []byte

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u) }

// DstPort returns the destination port.
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[2:]) }

// Length returns the UDP length (header and payload).
func (u UDP) Length() int { return int(binary.BigEndian.Uint16(u[4:])) }

// Checksum returns the checksum field (0 on IPv4 means none).
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[6:]) }

// Set writes all fields.
func (u UDP) Set(src, dst uint16, length int, csum uint16) {
	binary.BigEndian.PutUint16(u, src)
	binary.BigEndian.PutUint16(u[2:], dst)
	binary.BigEndian.PutUint16(u[4:], uint16(length))
	binary.BigEndian.PutUint16(u[6:], csum)
}

// sum16 adds b to s as big-endian 16-bit words (the Internet checksum sum).
func sum16(s uint64, b []byte) uint64 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += v>>48 + v>>32&0xFFFF + v>>16&0xFFFF + v&0xFFFF
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

func checksumFold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}

// Frame is a parsed RoCEv2 frame or IP datagram: offsets into Buf.
//
// ParseFrame and ParseIP fill it as far as they get, also when they return an
// error; a field they did not reach is zero (their doc comments list what each
// error leaves). After success IPVersion, L3, L4 and End are all set. After an
// error:
//
//   - HasVLAN and VLAN describe the first VLAN tag once it has been read.
//   - L3 is set once the link-layer header has been walked (it is 0 for
//     ParseIP), IPVersion once the IP version field has been read (4 or 6).
//   - L4 and End are set together, or both left 0. They are set when the IP
//     header says that a UDP header follows it (IPv4: protocol UDP, a header
//     length of at least 20 bytes and a zero fragment offset; IPv6: next
//     header UDP) and Buf holds that UDP header, which is at L3 plus the IPv4
//     header length, options included, or at L3+40. Then L3 < L4 and
//     L4+UDPLen <= End <= len(Buf): End is where the IP length says the UDP
//     payload ends, or where the UDP length says if that is shorter (and at
//     least UDPLen), but never before L4+UDPLen nor after len(Buf).
//
// The accessors below may be called only when L4 is set (after success, or an
// error that leaves L4 non-zero); IPv4 and IPv6 return nil when it is not.
type Frame struct {
	Buf       []byte
	VLAN      uint16 // VLAN ID of the outermost tag, when HasVLAN
	HasVLAN   bool
	IPVersion int // 4 or 6
	L3        int // offset of the IP header
	L4        int // offset of the UDP header
	End       int // end of the UDP payload (Ethernet padding excluded)
}

// IPUDP returns the IP and UDP headers (the ipudp argument of ComputeICRC).
func (f *Frame) IPUDP() []byte { return f.Buf[f.L3 : f.L4+UDPLen] }

// UDP returns the UDP header.
func (f *Frame) UDP() UDP { return UDP(f.Buf[f.L4 : f.L4+UDPLen]) }

// IPv4 returns the IPv4 header (options included), or nil when the frame is
// not IPv4 or L4 is not set.
func (f *Frame) IPv4() IPv4 {
	if f.IPVersion != 4 || f.L4 == 0 {
		return nil
	}
	return IPv4(f.Buf[f.L3:f.L4])
}

// IPv6 returns the IPv6 header, or nil when the frame is not IPv6 or L4 is
// not set.
func (f *Frame) IPv6() IPv6 {
	if f.IPVersion != 6 || f.L4 == 0 {
		return nil
	}
	return IPv6(f.Buf[f.L3:f.L4])
}

// Src returns the IP source address.
func (f *Frame) Src() netip.Addr {
	if f.IPVersion == 4 {
		return f.IPv4().Src()
	}
	return f.IPv6().Src()
}

// Dst returns the IP destination address.
func (f *Frame) Dst() netip.Addr {
	if f.IPVersion == 4 {
		return f.IPv4().Dst()
	}
	return f.IPv6().Dst()
}

// Transport returns the UDP payload: the RoCEv2 transport packet.
func (f *Frame) Transport() []byte { return f.Buf[f.L4+UDPLen : f.End] }

// ParseFrame parses an Ethernet II frame (with up to two VLAN tags) carrying a
// RoCEv2 datagram; see ParseIP for what is checked after the Ethernet header.
//
// On an error f holds what was parsed before it (see Frame):
//
//   - ErrFrameTruncated in the Ethernet header or a VLAN tag (a tag needs its
//     TCI and the EtherType after it): Buf, and HasVLAN and VLAN when a whole
//     first tag came before the cut; L3 is 0.
//   - ErrNotIP because the EtherType after at most two tags is neither IPv4
//     nor IPv6 (a third tag counts as not IP): HasVLAN, VLAN and L3, the
//     offset after that EtherType.
//   - Every other error is the IP datagram's at L3: HasVLAN, VLAN and L3 are
//     set, and the rest as ParseIP describes, offsets counted from the start
//     of the frame.
func ParseFrame(b []byte, f *Frame) error {
	*f = Frame{Buf: b}
	if len(b) < EthernetLen {
		return ErrFrameTruncated
	}
	off := 12
	et := binary.BigEndian.Uint16(b[off:])
	for tags := 0; (et == EtherTypeVLAN || et == EtherTypeQinQ) && tags < 2; tags++ {
		if len(b) < off+2+VLANTagLen {
			return ErrFrameTruncated
		}
		if !f.HasVLAN {
			f.HasVLAN, f.VLAN = true, binary.BigEndian.Uint16(b[off+2:])&0x0FFF
		}
		off += VLANTagLen
		et = binary.BigEndian.Uint16(b[off:])
	}
	off += 2
	f.L3 = off
	switch et {
	case EtherTypeIPv4, EtherTypeIPv6:
	default:
		return ErrNotIP
	}
	return parseIP(b, off, f)
}

// ParseIP parses an IPv4 or IPv6 datagram carrying RoCEv2. It checks the
// header (IPv4: version, no options, header checksum, not a fragment), that
// the datagram is UDP to port 4791 and that the lengths agree; bytes after the
// IP total length (Ethernet padding) are ignored. It does not verify the UDP
// checksum (see Frame.CheckUDPChecksum) or the ICRC.
//
// The checks run in the order below, and the first that fails is returned.
// f then holds what was parsed before it; L3 is always 0, HasVLAN false, and
// L4 and End are set (or not) as Frame describes:
//
//   - ErrFrameTruncated: b is empty (nothing else set), or shorter than the
//     fixed IPv4 or IPv6 header (IPVersion set).
//   - ErrNotIP: the version is neither 4 nor 6; IPVersion is 0.
//   - ErrIPOptions (IPv4 header length not 20 bytes), ErrIPChecksum,
//     ErrIPFragment: IPVersion 4; L4 and End when the header says UDP, the
//     header length is at least 20, the fragment offset is 0 (a first
//     fragment has the UDP header) and b holds the UDP header at L3 plus the
//     header length. The checks below them, the UDP port's included, have not
//     been made.
//   - ErrNotUDP: IPVersion; L4 and End are 0.
//   - ErrIPLength (IPv4 total length below 28 bytes or past the end of b;
//     IPv6 payload length below 8 or past the end of b): IPVersion, L4 (L3+20
//     or L3+40) and End when b holds the UDP header. The UDP port has not been
//     checked.
//   - ErrUDPLength (the UDP length is not the IP payload length): every
//     field; End as Frame describes. The UDP port has not been checked.
//   - ErrNotRoCEv2: every field, as after success.
func ParseIP(b []byte, f *Frame) error {
	*f = Frame{Buf: b}
	return parseIP(b, 0, f)
}

func parseIP(b []byte, off int, f *Frame) error {
	f.L3 = off
	if len(b) < off+1 {
		return ErrFrameTruncated
	}
	var l4, payloadEnd int
	switch b[off] >> 4 {
	case 4:
		f.IPVersion = 4
		if len(b) < off+IPv4Len {
			return ErrFrameTruncated
		}
		ip := IPv4(b[off:])
		switch {
		case ip.HeaderLen() != IPv4Len:
			return f.locateUDP(ErrIPOptions)
		case !ip.ChecksumOK():
			return f.locateUDP(ErrIPChecksum)
		case ip.Fragment():
			return f.locateUDP(ErrIPFragment)
		case ip.Protocol() != IPProtocolUDP:
			return ErrNotUDP
		case ip.TotalLen() < IPv4UDPLen || off+ip.TotalLen() > len(b):
			return f.locateUDP(ErrIPLength)
		}
		l4, payloadEnd = off+IPv4Len, off+ip.TotalLen()
	case 6:
		f.IPVersion = 6
		if len(b) < off+IPv6Len {
			return ErrFrameTruncated
		}
		ip := IPv6(b[off:])
		if ip.NextHeader() != IPProtocolUDP {
			return ErrNotUDP
		}
		if ip.PayloadLen() < UDPLen || off+IPv6Len+ip.PayloadLen() > len(b) {
			return f.locateUDP(ErrIPLength)
		}
		l4, payloadEnd = off+IPv6Len, off+IPv6Len+ip.PayloadLen()
	default:
		return ErrNotIP
	}
	u := UDP(b[l4:])
	if u.Length() != payloadEnd-l4 {
		return f.locateUDP(ErrUDPLength)
	}
	f.L4, f.End = l4, payloadEnd
	if u.DstPort() != RoCEv2Port {
		return ErrNotRoCEv2
	}
	return nil
}

// locateUDP sets L4 and End, as Frame describes, from the IP header at L3
// (of version IPVersion, complete in Buf; an IPv6 one with next header UDP),
// and returns err. It runs on the error paths only, so that a valid frame
// pays nothing for it.
func (f *Frame) locateUDP(err error) error {
	b := f.Buf
	var l4, ipEnd int
	if f.IPVersion == 4 {
		ip := IPv4(b[f.L3:])
		if ip.HeaderLen() < IPv4Len || ip.Protocol() != IPProtocolUDP || binary.BigEndian.Uint16(ip[6:])&ipv4OffsetMask != 0 {
			return err // no UDP header follows: not UDP, or a later fragment
		}
		l4, ipEnd = f.L3+ip.HeaderLen(), f.L3+ip.TotalLen()
	} else {
		l4, ipEnd = f.L3+IPv6Len, f.L3+IPv6Len+IPv6(b[f.L3:]).PayloadLen()
	}
	if len(b) < l4+UDPLen {
		return err
	}
	end := ipEnd
	if n := UDP(b[l4:]).Length(); n >= UDPLen && l4+n < end {
		end = l4 + n
	}
	f.L4, f.End = l4, min(max(end, l4+UDPLen), len(b))
	return err
}

// CheckUDPChecksum verifies the UDP checksum. A zero checksum (none) is
// accepted: RoCEv2 senders such as rdma_rxe send zero over IPv4.
func (f *Frame) CheckUDPChecksum() error {
	u := f.UDP()
	if u.Checksum() == 0 {
		return nil
	}
	if checksumFold(udpSum(f)) != 0xFFFF {
		return ErrUDPChecksum
	}
	return nil
}

// SetUDPChecksum computes the frame's UDP checksum and writes it (0xFFFF
// for a sum of 0, as RFC 768 says), as IPv6 requires and AppendFrame does:
// a sender that built the IP and UDP headers itself (PseudoHeader, whose
// checksum field is 0) in front of a transport packet calls it once the
// packet is in place.
func (f *Frame) SetUDPChecksum() {
	binary.BigEndian.PutUint16(f.Buf[f.L4+6:], 0)
	c := ^checksumFold(udpSum(f))
	if c == 0 {
		c = 0xFFFF
	}
	binary.BigEndian.PutUint16(f.Buf[f.L4+6:], c)
}

// udpSum returns the unfolded Internet sum of the UDP pseudo-header, header and
// payload (with the checksum field as it is).
func udpSum(f *Frame) uint64 {
	var s uint64
	if f.IPVersion == 4 {
		s = sum16(0, f.Buf[f.L3+12:f.L3+20])
	} else {
		s = sum16(0, f.Buf[f.L3+8:f.L3+40])
	}
	s += IPProtocolUDP + uint64(f.End-f.L4)
	return sum16(s, f.Buf[f.L4:f.End])
}

// Flow is the addressing of a RoCEv2 packet: what the builders put in the
// Ethernet, IP and UDP headers (frames) or in the pseudo-header the ICRC is
// computed over (datagrams sent on a UDP socket).
type Flow struct {
	SrcMAC, DstMAC MAC        // frames only
	Src, Dst       netip.Addr // both IPv4 or both IPv6 (IPv4-mapped IPv6 counts as IPv4)
	SrcPort        uint16     // flow entropy: see SourcePort and QPSourcePort
	DstPort        uint16     // 0 means RoCEv2Port
	TrafficClass   uint8      // DSCP << 2 | ECN (masked out of the ICRC)
	HopLimit       uint8      // TTL; 0 means 64 (masked out of the ICRC)
	FlowLabel      uint32     // IPv6 only
	ID             uint16     // IPv4 Identification, frames only (datagrams: 0)
}

func (fl *Flow) dstPort() uint16 {
	if fl.DstPort == 0 {
		return RoCEv2Port
	}
	return fl.DstPort
}

func (fl *Flow) ipv4() (src, dst [4]byte, ok bool, err error) {
	s, d := fl.Src.Unmap(), fl.Dst.Unmap()
	switch {
	case s.Is4() && d.Is4():
		return s.As4(), d.As4(), true, nil
	case s.Is6() && d.Is6():
		return src, dst, false, nil
	}
	return src, dst, false, ErrBuildAddress
}

// appendIPUDP appends the IP and UDP headers for a UDP payload of n bytes.
// id is the IPv4 Identification.
func (fl *Flow) appendIPUDP(b []byte, n int, id uint16) ([]byte, error) {
	s4, d4, v4, err := fl.ipv4()
	if err != nil {
		return b, err
	}
	ttl := fl.HopLimit
	if ttl == 0 {
		ttl = defaultTTL
	}
	start := len(b)
	if v4 {
		if IPv4UDPLen+n > 0xFFFF {
			return b, ErrBuildTooLong
		}
		b = grow(b, IPv4UDPLen)
		h := IPv4(b[start:])
		h[0], h[1] = 0x45, fl.TrafficClass
		binary.BigEndian.PutUint16(h[2:], uint16(IPv4UDPLen+n))
		binary.BigEndian.PutUint16(h[4:], id)
		binary.BigEndian.PutUint16(h[6:], ipv4FlagDF)
		h[8], h[9] = ttl, IPProtocolUDP
		copy(h[12:], s4[:])
		copy(h[16:], d4[:])
		h.SetChecksum()
		UDP(b[start+IPv4Len:]).Set(fl.SrcPort, fl.dstPort(), UDPLen+n, 0)
		return b, nil
	}
	if UDPLen+n > 0xFFFF {
		return b, ErrBuildTooLong
	}
	b = grow(b, IPv6UDPLen)
	h := b[start:]
	binary.BigEndian.PutUint32(h, 6<<28|uint32(fl.TrafficClass)<<20|fl.FlowLabel&0xFFFFF)
	binary.BigEndian.PutUint16(h[4:], uint16(UDPLen+n))
	h[6], h[7] = IPProtocolUDP, ttl
	s, d := fl.Src.As16(), fl.Dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	UDP(b[start+IPv6Len:]).Set(fl.SrcPort, fl.dstPort(), UDPLen+n, 0)
	return b, nil
}

// PseudoHeader appends the IP and UDP headers that Linux puts in front of a
// UDP payload of n bytes sent on an unconnected socket with IP_PMTUDISC_DO:
// for IPv4, DF set and Identification 0. Their masked form is what the ICRC
// covers (see ComputeICRC).
func (fl *Flow) PseudoHeader(dst []byte, n int) ([]byte, error) {
	return fl.appendIPUDP(dst, n, 0)
}

// pseudoIPv4 writes the IPv4 + UDP header the ICRC of a datagram of n bytes
// covers, as PseudoHeader does, but leaves out what the ICRC masks (TOS, TTL,
// header checksum), so that it costs no checksum. ok is false for IPv6 flows.
func (fl *Flow) pseudoIPv4(h *[IPv4UDPLen]byte, n int) (ok bool, err error) {
	s4, d4, v4, err := fl.ipv4()
	if err != nil || !v4 {
		return false, err
	}
	if IPv4UDPLen+n > 0xFFFF {
		return false, ErrBuildTooLong
	}
	h[0], h[9] = 0x45, IPProtocolUDP
	binary.BigEndian.PutUint16(h[2:], uint16(IPv4UDPLen+n))
	binary.BigEndian.PutUint32(h[4:], ipv4FlagDF)
	copy(h[12:], s4[:])
	copy(h[16:], d4[:])
	UDP(h[IPv4Len:]).Set(fl.SrcPort, fl.dstPort(), UDPLen+n, 0)
	return true, nil
}

// SetDatagramICRC computes the ICRC of the transport packet pkt sent as the
// payload of a UDP datagram with the flow's addressing from an unconnected
// IP_PMTUDISC_DO socket, and writes it into pkt's last four bytes: the same
// as SetICRC over PseudoHeader, without building the parts the ICRC masks.
// It does not allocate.
func (fl *Flow) SetDatagramICRC(pkt []byte) error {
	var h [IPv6UDPLen]byte
	h4 := (*[IPv4UDPLen]byte)(h[:IPv4UDPLen])
	ok, err := fl.pseudoIPv4(h4, len(pkt))
	if err != nil {
		return err
	}
	if ok {
		return SetICRC(h4[:], pkt)
	}
	hdr, err := fl.PseudoHeader(h[:0], len(pkt))
	if err != nil {
		return err
	}
	return SetICRC(hdr, pkt)
}

// CheckDatagramICRC verifies the ICRC of the transport packet pkt received
// as the payload of a UDP datagram with the flow's addressing (Src the
// sender). Over IPv4, where the sender's Identification and DF flag are
// unknown on a socket, it is CheckICRCUnknownID (fast when they are 0 and
// DF, as Linux sends them from an IP_PMTUDISC_DO socket); over IPv6,
// CheckICRC. It does not allocate.
func (fl *Flow) CheckDatagramICRC(pkt []byte) (id uint16, df bool, err error) {
	var h [IPv6UDPLen]byte
	h4 := (*[IPv4UDPLen]byte)(h[:IPv4UDPLen])
	ok, err := fl.pseudoIPv4(h4, len(pkt))
	if err != nil {
		return 0, false, err
	}
	if ok {
		return checkUnknownID(h4, pkt)
	}
	hdr, err := fl.PseudoHeader(h[:0], len(pkt))
	if err != nil {
		return 0, false, err
	}
	return 0, false, CheckICRC(hdr, pkt)
}

// AppendDatagram appends a complete transport packet, ICRC included, for
// sending as the payload of a UDP datagram from an unconnected socket with
// IP_PMTUDISC_DO (see PseudoHeader). It does not allocate when dst has room.
func AppendDatagram(dst []byte, fl *Flow, h *Header, payload []byte) ([]byte, error) {
	start := len(dst)
	dst, err := AppendTransport(dst, h, payload)
	if err != nil {
		return dst, err
	}
	var ph [IPv6UDPLen]byte
	hdr, err := fl.PseudoHeader(ph[:0], len(dst)-start)
	if err != nil {
		return dst[:start], err
	}
	if err := SetICRC(hdr, dst[start:]); err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// AppendFrame appends a complete Ethernet frame: Ethernet II, IPv4 (DF set,
// header checksum, Identification fl.ID, UDP checksum 0) or IPv6 (UDP checksum
// computed, as IPv6 requires), UDP, and the transport packet with its ICRC. It
// does not allocate when dst has room.
func AppendFrame(dst []byte, fl *Flow, h *Header, payload []byte) ([]byte, error) {
	start := len(dst)
	n := h.TransportLen(len(payload))
	if n == 0 {
		return dst, ErrBuildOpcode
	}
	_, _, v4, err := fl.ipv4()
	if err != nil {
		return dst, err
	}
	et := uint16(EtherTypeIPv6)
	if v4 {
		et = EtherTypeIPv4
	}
	dst = grow(dst, EthernetLen)
	Ethernet(dst[start:]).Set(fl.DstMAC, fl.SrcMAC, et)
	l3 := len(dst)
	if dst, err = fl.appendIPUDP(dst, n, fl.ID); err != nil {
		return dst[:start], err
	}
	l4 := len(dst) - UDPLen
	if dst, err = AppendTransport(dst, h, payload); err != nil {
		return dst[:start], err
	}
	if err := SetICRC(dst[l3:l4+UDPLen], dst[l4+UDPLen:]); err != nil {
		return dst[:start], err
	}
	if !v4 {
		f := Frame{Buf: dst, IPVersion: 6, L3: l3, L4: l4, End: len(dst)}
		c := ^checksumFold(udpSum(&f))
		if c == 0 {
			c = 0xFFFF
		}
		binary.BigEndian.PutUint16(dst[l4+6:], c)
	}
	return dst, nil
}

// SourcePort returns the RoCEv2 UDP source port for a flow label, as Linux's
// rdma_flow_label_to_udp_sport computes it: the label's low 14 bits XOR its
// high 6 bits, in the range 0xC000-0xFFFF. A zero flow label is replaced, as
// rdma_get_udp_sport does, by FlowLabel(lqpn, rqpn).
func SourcePort(flowLabel uint32, lqpn, rqpn QPN) uint16 {
	if flowLabel == 0 {
		flowLabel = FlowLabel(lqpn, rqpn)
	}
	lo, hi := flowLabel&0x3FFF, flowLabel&0xFC000
	return uint16(lo^hi>>14) | 0xC000
}

// FlowLabel returns the symmetric 20-bit flow label of a connection, as Linux's
// rdma_calc_flow_label computes it from the local and remote QP numbers.
func FlowLabel(lqpn, rqpn QPN) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xFFFFF)
}

// QPSourcePort returns the UDP source port rdma_rxe gives a QP before its
// address vector sets one: 0xC000 plus a 14-bit hash_32 of the QP number.
func QPSourcePort(qpn QPN) uint16 {
	const goldenRatio32 = 0x61C88647
	return 0xC000 + uint16((uint32(qpn)*goldenRatio32)>>(32-14))
}
