package wire

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net/netip"
)

// FlowICRC computes and checks the ICRC of datagrams of one IPv4 flow (the
// addresses and ports of Flow), as Flow.SetDatagramICRC and
// CheckDatagramICRC do, faster: the masked IPv4 and UDP headers are the
// same in every datagram of the flow but for the two length fields, and a
// CRC is affine, so the CRC register after the headers is computed once per
// flow with both lengths zero, and each datagram's lengths are added in with
// four table lookups (the register change each length byte makes, carried
// through the header bytes after it); the transport packet is then hashed
// by transportRegister. Over IPv6 it falls back to the Flow methods. The zero value is not usable: build one with NewFlowICRC.
type FlowICRC struct {
	fl   Flow
	v4   bool
	base uint32 // raw CRC register after 0xFF x 8 and the masked headers, lengths 0, ID 0, DF
}

// NewFlowICRC prepares the ICRC of the flow's datagrams (sent from an
// unconnected IP_PMTUDISC_DO socket: Identification 0, DF set).
func NewFlowICRC(fl Flow) (FlowICRC, error) {
	c := FlowICRC{fl: fl}
	var h [IPv4UDPLen]byte
	ok, err := fl.pseudoIPv4(&h, 0)
	if err != nil {
		return c, err
	}
	if !ok {
		return c, nil
	}
	c.v4 = true
	clear(h[2:4])   // IPv4 total length
	clear(h[24:26]) // UDP length
	le := binary.LittleEndian
	r := ^crcAfterLRH
	r = crc16(r, le.Uint64(h[:])|maskIPv4Word0, le.Uint64(h[8:])|maskIPv4Word1)
	r = crc8(r, le.Uint64(h[16:]))
	r = crc4(r, le.Uint32(h[24:])|maskUDPCsumLo)
	c.base = r
	return c, nil
}

// Flow returns the flow.
func (c *FlowICRC) Flow() Flow { return c.fl }

// Is reports whether the flow has these addresses and ports (DstPort 0
// meaning RoCEv2Port, as in Flow).
func (c *FlowICRC) Is(src, dst netip.Addr, srcPort, dstPort uint16) bool {
	return c.fl.SrcPort == srcPort && c.fl.dstPort() == dstPort && c.fl.Src == src && c.fl.Dst == dst
}

// lenTables[i][b] is the CRC register change, after the 28 bytes of the
// IPv4 and UDP headers, made by byte b at header offset 2, 3, 24 and 25:
// the two bytes of the IPv4 total length and of the UDP length. idTables
// is the same for offsets 4 and 5, the Identification, and 6, the flags
// (DF is 0x40).
var lenTables, idTables = func() (l [4][256]uint32, id [3][256]uint32) {
	var deep [26][256]uint32
	deep[0] = *crc32.IEEETable
	for j := 1; j < len(deep); j++ {
		for i := range 256 {
			c := deep[j-1][i]
			deep[j][i] = deep[0][c&0xFF] ^ c>>8
		}
	}
	for i, off := range [4]int{2, 3, 24, 25} {
		l[i] = deep[IPv4UDPLen-1-off]
	}
	for i, off := range [3]int{4, 5, 6} {
		id[i] = deep[IPv4UDPLen-1-off]
	}
	return l, id
}()

// headers returns the raw CRC register after the masked headers of a
// datagram carrying the transport packet pkt.
func (c *FlowICRC) headers(pkt []byte) uint32 { return c.headersLen(len(pkt)) }

// headersLen is headers for a transport packet of n bytes.
func (c *FlowICRC) headersLen(n int) uint32 {
	ip, udp := IPv4UDPLen+n, UDPLen+n
	t := &lenTables
	return c.base ^ t[0][ip>>8&0xFF] ^ t[1][ip&0xFF] ^ t[2][udp>>8&0xFF] ^ t[3][udp&0xFF]
}

// compute returns the ICRC of pkt over IPv4, the headers' register
// changed by x (0: Identification 0 and DF).
func (c *FlowICRC) compute(pkt []byte, x uint32) (uint32, error) {
	if len(pkt) < MinPacketLen {
		return 0, ErrTruncatedICRC
	}
	if IPv4UDPLen+len(pkt) > 0xFFFF {
		return 0, ErrBuildTooLong
	}
	return ^transportRegister(c.headers(pkt)^x, pkt[:len(pkt)-ICRCLen]), nil
}

// Set and Check take the common case (IPv4, a packet clmulRegister takes,
// whose length the checks of compute pass) themselves: compute and
// transportRegister add a call each to a computation of a few ns.

// Set writes the ICRC of pkt into its last four bytes, as
// Flow.SetDatagramICRC.
func (c *FlowICRC) Set(pkt []byte) error {
	if n := len(pkt) - ICRCLen; c.v4 && haveCLMUL && n > 16 && n <= foldMax {
		binary.LittleEndian.PutUint32(pkt[n:], ^clmulRegister(uint64(c.headers(pkt))|uint64(^pkt[4])<<32, pkt[:n]))
		return nil
	}
	if !c.v4 {
		return c.fl.SetDatagramICRC(pkt)
	}
	crc, err := c.compute(pkt, 0)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCLen:], crc)
	return nil
}

// ErrSetVFlow is SetV's answer for a flow that is not IPv4.
var ErrSetVFlow = errors.New("wire: FlowICRC.SetV: the flow is not IPv4")

// SetV is Set for a packet in three pieces, hdr ++ payload ++ tail, that a
// sender gathers into one datagram without copying them together (a large
// payload sent from where it lies): hdr is the BTH and extension headers,
// tail the pad bytes and the four ICRC bytes, which SetV writes. The ICRC is
// the one Set writes into the packet joined. It takes IPv4 flows only
// (ErrSetVFlow), checks the lengths as Set does (ErrTruncatedICRC for an
// hdr shorter than a BTH or a tail shorter than an ICRC, ErrBuildTooLong)
// and does not allocate.
func (c *FlowICRC) SetV(hdr, payload, tail []byte) error {
	if !c.v4 {
		return ErrSetVFlow
	}
	if len(hdr) < BTHLen || len(tail) < ICRCLen {
		return ErrTruncatedICRC
	}
	n := len(hdr) + len(payload) + len(tail)
	if IPv4UDPLen+n > 0xFFFF {
		return ErrBuildTooLong
	}
	// tableRegister takes the BTH's masked byte and the rest of the
	// headers; the payload and pad go on through crcUpdate.
	crc := crcUpdate(^tableRegister(c.headersLen(n), hdr), payload)
	if pad := tail[:len(tail)-ICRCLen]; len(pad) > 0 {
		crc = crcUpdate(crc, pad)
	}
	binary.LittleEndian.PutUint32(tail[len(tail)-ICRCLen:], crc)
	return nil
}

// Check verifies the ICRC of pkt received on the flow (Src the sender), as
// Flow.CheckDatagramICRC.
func (c *FlowICRC) Check(pkt []byte) (id uint16, df bool, err error) {
	if !c.v4 {
		return c.fl.CheckDatagramICRC(pkt)
	}
	d, err := c.Diff(pkt)
	if err != nil || d == 0 { // Identification 0 and DF, the common case: RecoverID's answer without its call
		return 0, err == nil, err
	}
	return RecoverID(d, len(pkt))
}

// Diff returns pkt's ICRC as computed for a datagram of the flow with IPv4
// Identification 0 and DF (what Set writes) XOR pkt's ICRC as received
// (both as stored, little-endian): 0 when they match. Over IPv4 another
// Identification or a clear DF changes it by ICRCIDDeltas.Of, linearly, so
// a receiver that knows what they should be compares Diff with that on all
// 32 bits, and one that does not solves for them (RecoverID). Over IPv6
// any value but 0 is a mismatch.
func (c *FlowICRC) Diff(pkt []byte) (uint32, error) { return c.diff(pkt, 0) }

// DiffID is Diff for a datagram sent with IPv4 Identification id and DF
// flag df, which the receiver saw: 0 when pkt's ICRC is that of such a
// datagram of the flow, all 32 bits checked. It costs what Diff costs: the
// Identification and DF go into the headers' register by table lookups.
// Over IPv6, which has neither, it is Diff.
func (c *FlowICRC) DiffID(pkt []byte, id uint16, df bool) (uint32, error) {
	t := &idTables
	x := t[0][id>>8] ^ t[1][id&0xFF]
	if !df {
		x ^= t[2][0x40]
	}
	return c.diff(pkt, x)
}

// diff is Diff with the headers' register changed by x (IPv4 only).
func (c *FlowICRC) diff(pkt []byte, x uint32) (uint32, error) {
	le := binary.LittleEndian
	if n := len(pkt) - ICRCLen; c.v4 && haveCLMUL && n > 16 && n <= foldMax {
		return ^clmulRegister(uint64(c.headers(pkt)^x)|uint64(^pkt[4])<<32, pkt[:n]) ^ le.Uint32(pkt[n:]), nil
	}
	var crc uint32
	var err error
	if c.v4 {
		crc, err = c.compute(pkt, x)
	} else {
		var h [IPv6UDPLen]byte
		var hdr []byte
		if hdr, err = c.fl.PseudoHeader(h[:0], len(pkt)); err == nil {
			crc, err = ComputeICRC(hdr, pkt)
		}
	}
	if err != nil {
		return 0, err
	}
	return crc ^ le.Uint32(pkt[len(pkt)-ICRCLen:]), nil
}

// CheckID verifies the ICRC of pkt received on the flow in a datagram whose
// IPv4 Identification and DF flag the receiver saw (a whole frame): all 32
// bits of the ICRC count (DiffID is 0).
func (c *FlowICRC) CheckID(pkt []byte, id uint16, df bool) error {
	d, err := c.DiffID(pkt, id, df)
	if err != nil {
		return err
	}
	if d != 0 {
		return ErrICRC
	}
	return nil
}
