package wire

import (
	"encoding/binary"
	"math/bits"
	"sync"
)

// A receiver on a UDP socket sees the sender's addresses, ports and lengths
// (recvmsg and IP_PKTINFO) but not the IPv4 Identification and flags, which
// the ICRC covers. rdma_rxe sends non-zero Identifications (and any sender may
// clear DF), so the receiver cannot simply recompute the ICRC. It can solve for
// them instead: a CRC is affine over GF(2), so
//
//	ICRC(id, df) = ICRC(0, 0) ^ sum over set bits i of (id, df) of E_i
//
// where E_i is what flipping bit i alone changes in the ICRC. Each E_i is a
// fixed vector a_i (the bit's effect on the CRC register just after the IPv4
// flags byte) carried through the k bytes that follow, i.e. multiplied by
// x^(8k) modulo the CRC polynomial. Multiplying the observed difference by
// x^(-8k) instead brings it back to the fixed basis {a_i}, where one Gaussian
// reduction (precomputed) finds the Identification and DF bit that explain it,
// or shows that none does. 17 unknowns in a 32-bit check leave 15 bits: a
// corrupted packet passes with probability 2^-15, against 2^-32 when the whole
// header is known (AF_XDP, captures). Over IPv6 nothing is unknown (the flow
// label and traffic class are masked) and the full check applies.

// crcPoly is the reflected CRC-32 (IEEE) polynomial.
const crcPoly = 0xEDB88320

// mulmod multiplies two polynomials modulo the CRC-32 polynomial in the
// reflected representation hash/crc32 uses for its register (bit 31 is x^0).
func mulmod(a, b uint32) uint32 {
	var p uint32
	for i := 0; i < 32; i++ {
		p ^= b & -(a >> 31 & 1)
		a <<= 1
		b = b>>1 ^ crcPoly&-(b&1)
	}
	return p
}

// xInv is x^-1 modulo the CRC polynomial P: since P = x*Q + 1, x*Q = 1, and Q
// is P's coefficients above x^0 moved down one place.
const xInv = (crcPoly&^(1<<31))<<1 | 1

// recoverTable holds x^(-8k) for the byte counts k of every IPv4 datagram and
// the reduced basis of the 17 unknown bits. It is built on first use.
type recoverTable struct {
	unshift []uint32 // unshift[k] = x^(-8k) mod P
	basis   [17]struct {
		pivot uint32 // the basis vector's highest set bit
		vec   uint32
		combo uint32 // which unknowns (bits 0-15 ID, bit 16 DF) sum to vec
	}
	rank int
}

var recoverTables = sync.OnceValue(buildRecoverTable)

// PrepareICRCRecovery builds the tables CheckICRCUnknownID uses, once per
// process (about 4 ms), which otherwise the first packet checked without
// its IPv4 header builds: an engine calls it when created, before its first
// packet, so that a connection's first round trip does not wait for them.
func PrepareICRCRecovery() { recoverTables() }

// maxRecoverK is the largest k: every byte after the IPv4 flags byte of a
// 65535-byte datagram.
const maxRecoverK = 0xFFFF

func buildRecoverTable() *recoverTable {
	t := &recoverTable{unshift: make([]uint32, maxRecoverK+1)}
	xInv8 := uint32(1 << 31)
	for i := 0; i < 8; i++ {
		xInv8 = mulmod(xInv8, xInv)
	}
	t.unshift[0] = 1 << 31
	for k := 1; k <= maxRecoverK; k++ {
		t.unshift[k] = mulmod(t.unshift[k-1], xInv8)
	}
	// a_i: the register change after IPv4 byte 6 (the flags byte) caused by
	// flipping one bit of bytes 4-5 (Identification) or DF (byte 6, 0x40).
	var a [17]uint32
	copy(a[:16], idBasis[:])
	a[16] = regStep(0x40)
	for i, v := range a {
		c := uint32(1) << i
		for j := 0; j < t.rank; j++ {
			if v&t.basis[j].pivot != 0 {
				v ^= t.basis[j].vec
				c ^= t.basis[j].combo
			}
		}
		if v != 0 {
			b := &t.basis[t.rank]
			b.pivot, b.vec, b.combo = 1<<(31-bits.LeadingZeros32(v)), v, c
			t.rank++
		}
	}
	return t
}

// regStep returns the CRC register change after one byte when the byte
// changes by d and the register did not change before it.
func regStep(d byte) uint32 { return crcTableEntry(d) }

// regZero carries a register change through one more (unchanged) byte.
func regZero(r uint32) uint32 { return crcTableEntry(byte(r)) ^ r>>8 }

func crcTableEntry(i byte) uint32 {
	c := uint32(i)
	for k := 0; k < 8; k++ {
		if c&1 != 0 {
			c = c>>1 ^ crcPoly
		} else {
			c >>= 1
		}
	}
	return c
}

// CheckICRCUnknownID verifies the ICRC of a transport packet received over
// IPv4 on a UDP socket, where the sender's IPv4 Identification and DF flag are
// unknown. ipudp is the IP and UDP header as the receiver knows it (Flow's
// PseudoHeader with the sender as Src); its Identification and flags are
// ignored. It returns the Identification and DF flag that make the ICRC
// match, or ErrICRC when none does. Over IPv6 it is CheckICRC.
func CheckICRCUnknownID(ipudp, pkt []byte) (id uint16, df bool, err error) {
	if len(ipudp) == IPv6UDPLen {
		return 0, false, CheckICRC(ipudp, pkt)
	}
	if len(ipudp) != IPv4UDPLen || ipudp[0] != 0x45 {
		return 0, false, ErrBuildPseudoHdr
	}
	var h [IPv4UDPLen]byte
	copy(h[:], ipudp)
	return checkUnknownID(&h, pkt)
}

// checkUnknownID is CheckICRCUnknownID over an IPv4 + UDP pseudo-header it
// may modify. It first tries Identification 0 with DF set, what Linux sends
// on an unconnected IP_PMTUDISC_DO socket (and so every goroce peer on the
// UDP path): a plain ICRC comparison. Only when that fails does it solve for
// the Identification and DF bit.
func checkUnknownID(h *[IPv4UDPLen]byte, pkt []byte) (id uint16, df bool, err error) {
	binary.BigEndian.PutUint32(h[4:], ipv4FlagDF) // Identification 0, DF, offset 0
	c0, err := ComputeICRC(h[:], pkt)
	if err != nil {
		return 0, false, err
	}
	return RecoverID(c0^binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]), len(pkt))
}

// RecoverID finds the IPv4 Identification and DF bit that explain the
// difference d between the ICRC computed with Identification 0 and DF set
// and the one received on a transport packet of n bytes (FlowICRC.Diff),
// or returns ErrICRC when none do. The answer is unique when it exists.
func RecoverID(d uint32, n int) (id uint16, df bool, err error) {
	if d == 0 {
		return 0, true, nil
	}
	// Bytes after the flags byte: the rest of the IPv4 header, UDP, and the
	// transport packet without its ICRC.
	k := IPv4Len - 7 + UDPLen + n - ICRCLen
	t := recoverTables()
	if k > maxRecoverK {
		return 0, false, ErrICRC
	}
	v := mulmod(d, t.unshift[k])
	var x uint32
	for j := 0; j < t.rank; j++ {
		if v&t.basis[j].pivot != 0 {
			v ^= t.basis[j].vec
			x ^= t.basis[j].combo
		}
	}
	if v != 0 {
		return 0, false, ErrICRC
	}
	// x holds the bits that differ from the base (ID 0, DF set).
	return uint16(x), x&(1<<16) == 0, nil
}
