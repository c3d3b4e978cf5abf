package wire

import "encoding/binary"

// UDP segmentation offload (GSO) hands the kernel one large UDP message and
// a segment size; the kernel (or the NIC) cuts it into datagrams and writes
// their IPv4 headers. From an unconnected IP_PMTUDISC_DO socket, segment k
// of a message gets Identification k with DF set, where a datagram sent
// alone gets Identification 0. The ICRC covers the Identification, so a
// sender that computed every packet's ICRC for Identification 0 (FlowICRC,
// Flow.SetDatagramICRC) must change segment k's for Identification k.
//
// It need not run the CRC over the packet again: a CRC is affine over GF(2),
// so for two inputs of equal length the difference of their CRCs is a
// linear function of the difference of the inputs. Flipping bit i of the
// Identification changes the CRC register just after the IPv4 flags byte by
// a fixed vector a_i (recoverTable's basis), which the m bytes that follow
// multiply by x^(8m) modulo the CRC polynomial. For one packet length the 16
// products a_i * x^(8m) are the Identification bits' ICRC deltas, and the
// delta of any Identification is the XOR of those of its set bits.
// ICRCIDDeltas computes the 16 deltas of a length (about 32 GF(2)
// multiplications, a microsecond); ICRCIDCache keeps them for the last few
// lengths, so a train of equal-sized segments pays once and then a few XORs
// per packet.

// GSOMaxSegments is the most segments goroce puts in one UDP GSO message,
// so the most Identifications (0 to GSOMaxSegments-1) one of its senders
// writes: Linux's UDP_MAX_SEGMENTS before 6.10 (64; 128 since). Receivers
// hold a flow that shows such Identifications to them.
const GSOMaxSegments = 64

// ICRCIDDeltas is, for transport packets of one length sent over IPv4, what
// each bit of the IPv4 Identification, and the DF flag, change in the ICRC
// (every other field unchanged).
type ICRCIDDeltas struct {
	n int        // transport packet length, BTH to ICRC; 0: not computed
	d [17]uint32 // d[i]: the ICRC change (as stored, little-endian) of Identification bit i; d[16]: of DF
}

// xPow8 holds x^(8 * 2^j) modulo the CRC polynomial for j = 0..15 (reflected
// representation, bit 31 is x^0): x^(8m) for any 16-bit m is the product of
// those of m's set bits.
var xPow8 = func() (t [16]uint32) {
	t[0] = 1 << (31 - 8) // x^8
	for j := 1; j < len(t); j++ {
		t[j] = mulmod(t[j-1], t[j-1])
	}
	return t
}()

// idBasis holds a_i: the CRC register change after the IPv4 flags byte
// caused by flipping bit i of the Identification.
var idBasis = func() (a [16]uint32) {
	for i := range a {
		byteIdx := 4 // the high byte, bits 8-15
		if i < 8 {
			byteIdx = 5
		}
		r := regStep(1 << (i % 8))
		for j := byteIdx + 1; j <= 6; j++ {
			r = regZero(r)
		}
		a[i] = r
	}
	return a
}()

// NewICRCIDDeltas computes the Identification bits' ICRC deltas of
// transport packets of n bytes (BTH to ICRC) sent over IPv4. n must be at
// least MinPacketLen and at most 65535 - 28; other lengths give deltas that
// change nothing (no such datagram exists).
func NewICRCIDDeltas(n int) ICRCIDDeltas {
	t := ICRCIDDeltas{n: n}
	if n < MinPacketLen || IPv4UDPLen+n > 0xFFFF {
		return t
	}
	// Bytes after the flags byte that the CRC covers: the rest of the IPv4
	// header, the UDP header and the packet without its ICRC.
	m := IPv4Len - 7 + UDPLen + n - ICRCLen
	s := uint32(1 << 31) // x^0
	for j := 0; m != 0; j, m = j+1, m>>1 {
		if m&1 != 0 {
			s = mulmod(s, xPow8[j])
		}
	}
	for i := range 16 {
		t.d[i] = mulmod(idBasis[i], s)
	}
	t.d[16] = mulmod(regStep(0x40), s) // DF: bit 0x40 of the flags byte, the last before the m bytes
	return t
}

// Len returns the transport packet length the deltas are for.
func (t *ICRCIDDeltas) Len() int { return t.n }

// Delta returns what changing the IPv4 Identification by the bits of x
// (old XOR new) changes in the ICRC of a packet of t's length, as the ICRC
// is stored (little-endian: XOR it into binary.LittleEndian.Uint32 of the
// field).
func (t *ICRCIDDeltas) Delta(x uint16) uint32 {
	var d uint32
	for i := 0; x != 0; i, x = i+1, x>>1 {
		d ^= t.d[i] & -uint32(x&1)
	}
	return d
}

// Of returns the ICRC change from a datagram with Identification 0 and DF
// to one with Identification id and DF flag df: what FlowICRC.Diff reports
// for an intact packet of t's length sent so.
func (t *ICRCIDDeltas) Of(id uint16, df bool) uint32 {
	d := t.Delta(id)
	if !df {
		d ^= t.d[16]
	}
	return d
}

// ICRCIDCache keeps the ICRCIDDeltas of the last few packet lengths (a GSO
// train has one, and a shorter last segment), so that changing the
// Identification an ICRC was computed for costs a few XORs. Computing the
// deltas of a length costs about a microsecond, so the cache is two-way:
// two lengths that share a set (lengths/4 modulo 4) both stay. The zero
// value is ready to use; it is not safe for concurrent use.
type ICRCIDCache struct {
	e    [8]ICRCIDDeltas // set k: e[2k], e[2k+1]
	next [4]uint8        // the way of set k to replace next
}

// Deltas returns the deltas of transport packets of n bytes, computing them
// when not cached. The pointer is valid until the next call.
func (c *ICRCIDCache) Deltas(n int) *ICRCIDDeltas {
	k := uint(n>>2) % uint(len(c.next)) // lengths are mostly multiples of 4
	if e := &c.e[2*k]; e.n == n {
		return e
	}
	if e := &c.e[2*k+1]; e.n == n {
		return e
	}
	e := &c.e[2*k+uint(c.next[k])]
	c.next[k] ^= 1
	*e = NewICRCIDDeltas(n)
	return e
}

// ChangeID rewrites the ICRC of the IPv4 transport packet pkt (BTH to ICRC),
// computed for IPv4 Identification from, into the ICRC for Identification
// to, everything else unchanged: what a GSO sender does to segment k of a
// message (from 0, to k). It returns ErrTruncatedICRC for a packet shorter
// than MinPacketLen and ErrBuildTooLong for one no IPv4 datagram carries. It
// does not allocate.
func (c *ICRCIDCache) ChangeID(pkt []byte, from, to uint16) error {
	if len(pkt) < ICRCLen {
		return ErrTruncatedICRC
	}
	return c.ChangeIDOf(pkt[len(pkt)-ICRCLen:], len(pkt), from, to)
}

// ChangeIDOf is ChangeID for a packet of n bytes whose ICRC is the four
// bytes icrc (the end of the last piece of a packet sent in pieces: see
// FlowICRC.SetV).
func (c *ICRCIDCache) ChangeIDOf(icrc []byte, n int, from, to uint16) error {
	if n < MinPacketLen || len(icrc) != ICRCLen {
		return ErrTruncatedICRC
	}
	if IPv4UDPLen+n > 0xFFFF {
		return ErrBuildTooLong
	}
	if from == to {
		return nil
	}
	le := binary.LittleEndian
	le.PutUint32(icrc, le.Uint32(icrc)^c.Deltas(n).Delta(from^to))
	return nil
}
