package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The ICRC (IBA 7.8.1 and Annex A17.5.3) is a CRC-32 with the Ethernet
// polynomial over a masked copy of the packet: 8 bytes of 0xFF standing for the
// absent LRH, the IP header with the fields routers may change replaced by ones
// (IPv4: TOS, TTL and header checksum; IPv6: traffic class, flow label and hop
// limit), the UDP header with its checksum replaced by ones, the BTH with its
// FECN/BECN/resv6a byte replaced by ones, then the rest of the transport
// headers, the payload and the pad, unmasked. Linux's rdma_rxe (rxe_icrc.c)
// starts from the CRC state after the 8 bytes of 0xFF, runs the reflected
// CRC-32 over the rest, and stores the complement in CPU (little-endian) byte
// order: exactly the standard IEEE CRC-32 of the masked bytes, stored
// little-endian. This file computes it with hash/crc32, which uses the CPU's
// carry-less multiply (and AVX-512 from 1 KiB on).
//
// Speed: hash/crc32 takes its carry-less-multiply path only for runs of 64
// bytes or more (and AVX-512 from 1024), and that path has a fixed cost per
// call of about as much as hashing a few hundred bytes. So the masked
// pseudo-header is built in a stack buffer behind a constant lead-in that
// leaves the CRC state unchanged (icrcLead4/6), which makes it a 64-byte
// (IPv4) or 80-byte (IPv6) run; a small packet's remaining bytes are copied in
// behind it and hashed in the same single call, a large packet's are hashed in
// place in a second call.

// IPv4 and IPv6 header lengths and the length of the IP + UDP headers that
// precede a RoCEv2 transport packet.
const (
	IPv4Len    = 20
	IPv6Len    = 40
	UDPLen     = 8
	IPv4UDPLen = IPv4Len + UDPLen
	IPv6UDPLen = IPv6Len + UDPLen
)

const (
	icrcRun4   = 64  // lead-in + masked IPv4 + UDP + BTH
	icrcRun6   = 80  // lead-in + masked IPv6 + UDP + BTH
	icrcInline = 512 // packets whose whole masked run fits are hashed in one call
)

// crcAfterLRH is the CRC-32 (hash/crc32 convention) of the 8 bytes of 0xFF
// that stand for the masked LRH; every ICRC starts from it.
var crcAfterLRH = crc32.ChecksumIEEE([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})

// icrcLead is a run of bytes that takes the CRC state crcAfterLRH back to
// itself: zeros followed by four bytes solved for (see crcFixup). Its first
// icrcRun4-(IPv4UDPLen+BTHLen) bytes lead the IPv4 run and its first
// icrcRun6-(IPv6UDPLen+BTHLen) the IPv6 run; both prefixes are solved for.
var icrcLead4, icrcLead6 = crcLeadIn(icrcRun4 - IPv4UDPLen - BTHLen), crcLeadIn(icrcRun6 - IPv6UDPLen - BTHLen)

func crcLeadIn(n int) []byte {
	b := make([]byte, n)
	s := crc32.Update(crcAfterLRH, crc32.IEEETable, b[:n-4])
	binary.LittleEndian.PutUint32(b[n-4:], crcFixup(s, crcAfterLRH))
	return b
}

// crcFixup returns the four bytes (little-endian) that, appended to a message
// whose CRC-32 is from, give a message whose CRC-32 is to. A reflected CRC
// consumes its whole 32-bit state in four bytes, so the bytes are found by
// running the CRC backwards from to (each step's table entry is identified by
// its top byte, which is unique in the CRC-32 table) and XORing the state
// reached with from's.
func crcFixup(from, to uint32) uint32 {
	var top [256]uint8 // top byte of table entry -> index
	for i := range crc32.IEEETable {
		top[crc32.IEEETable[i]>>24] = uint8(i)
	}
	r := ^to // raw register after the four bytes
	for i := 0; i < 4; i++ {
		idx := uint32(top[r>>24])
		r = (r^crc32.IEEETable[idx])<<8 | idx
	}
	return r ^ ^from
}

// maskPseudo writes the masked IP + UDP + BTH for ipudp and pkt into b and
// returns its length, or 0 when ipudp is not a 20-byte IPv4 (no options) or a
// 40-byte IPv6 header followed by UDP.
func maskPseudo(b []byte, ipudp, pkt []byte) int {
	n := 0
	switch {
	case len(ipudp) == IPv4UDPLen && ipudp[0] == 0x45:
		copy(b, ipudp)
		b[1] = 0xFF  // TOS (DSCP + ECN)
		b[8] = 0xFF  // TTL
		b[10] = 0xFF // header checksum
		b[11] = 0xFF
		n = IPv4Len
	case len(ipudp) == IPv6UDPLen && ipudp[0]>>4 == 6:
		copy(b, ipudp)
		b[0] |= 0x0F // traffic class (high nibble)
		b[1] = 0xFF  // traffic class (low nibble), flow label
		b[2] = 0xFF
		b[3] = 0xFF
		b[7] = 0xFF // hop limit
		n = IPv6Len
	default:
		return 0
	}
	b[n+6] = 0xFF // UDP checksum
	b[n+7] = 0xFF
	n += UDPLen
	copy(b[n:], pkt[:BTHLen])
	b[n+4] = 0xFF // FECN, BECN, resv6a
	return n + BTHLen
}

// ComputeICRC returns the ICRC of the transport packet pkt (BTH to ICRC
// inclusive; the ICRC field itself is not covered) sent with the IP and UDP
// headers ipudp: a 20-byte IPv4 header or a 40-byte IPv6 header, followed by
// the 8-byte UDP header, as they go on the wire. The value is stored
// little-endian (see Packet.ICRC). It does not allocate.
func ComputeICRC(ipudp, pkt []byte) (uint32, error) {
	if len(pkt) < MinPacketLen {
		return 0, ErrTruncatedICRC
	}
	var buf [icrcInline]byte
	lead := icrcLead4
	if len(ipudp) == IPv6UDPLen {
		lead = icrcLead6
	}
	k := copy(buf[:], lead)
	n := maskPseudo(buf[k:], ipudp, pkt)
	if n == 0 {
		return 0, ErrBuildPseudoHdr
	}
	n += k
	body := pkt[BTHLen : len(pkt)-ICRCLen]
	if n+len(body) <= len(buf) {
		// Small packet: one run, as hash/crc32 has a fixed cost per call.
		n += copy(buf[n:], body)
		return crcUpdateNoEscape(crcAfterLRH, buf[:n]), nil
	}
	crc := crcUpdateNoEscape(crcAfterLRH, buf[:n])
	return crc32.Update(crc, crc32.IEEETable, body), nil
}

// SetICRC computes the ICRC of pkt as sent with ipudp (see ComputeICRC) and
// writes it into pkt's last four bytes.
func SetICRC(ipudp, pkt []byte) error {
	c, err := ComputeICRC(ipudp, pkt)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCLen:], c)
	return nil
}

// CheckICRC verifies the ICRC of pkt as received with ipudp. It returns nil,
// ErrICRC, or an error saying why the ICRC cannot be computed.
func CheckICRC(ipudp, pkt []byte) error {
	c, err := ComputeICRC(ipudp, pkt)
	if err != nil {
		return err
	}
	if c != binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) {
		return ErrICRC
	}
	return nil
}
