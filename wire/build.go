package wire

import "encoding/binary"

// Header holds the values of a transport packet's headers, for the builders.
// Only the extension headers the opcode carries are written; the other fields
// are ignored. The pad count is computed from the payload length.
type Header struct {
	Opcode Opcode
	SE     bool   // solicited event
	MigReq bool   // migration request
	PKey   uint16 // partition key; DefaultPKey for the default partition
	FECN   bool
	BECN   bool
	DestQP QPN
	AckReq bool
	PSN    PSN

	RDETH     uint32 // EE-Context (RD only)
	DETH      DETHFields
	RETH      RETHFields
	AtomicETH AtomicFields
	AETH      AETHFields
	AtomicAck uint64 // original remote data of an ATOMIC ACKNOWLEDGE
	Imm       uint32 // immediate data
	IETH      uint32 // R_Key to invalidate
	// FETH of a FLUSH: placement type (FlushGlobal, FlushPersistent) and
	// selectivity level (FlushRange, FlushMR).
	FlushType, FlushLevel uint8
}

// DefaultPKey is the default partition key, the one RoCE uses.
const DefaultPKey = 0xFFFF

// DETHFields are the values of a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP QPN
}

// RETHFields are the values of a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// AtomicFields are the values of an AtomicETH.
type AtomicFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// AETHFields are the values of an AETH.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32
}

// Load sets h from a parsed packet: Load then AppendTransport with the same
// payload rebuilds the packet byte for byte (reserved bits, which the builders
// always clear, aside).
func (h *Header) Load(p *Packet) {
	b := p.BTH()
	*h = Header{
		Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PKey: b.PKey(),
		FECN: b.FECN(), BECN: b.BECN(), DestQP: b.DestQP(), AckReq: b.AckReq(), PSN: b.PSN(),
	}
	if r := p.RDETH(); r != nil {
		h.RDETH = r.EEC()
	}
	if d := p.DETH(); d != nil {
		h.DETH = DETHFields{QKey: d.QKey(), SrcQP: d.SrcQP()}
	}
	if r := p.RETH(); r != nil {
		h.RETH = RETHFields{VA: r.VA(), RKey: r.RKey(), DMALen: r.DMALen()}
	}
	if a := p.AtomicETH(); a != nil {
		h.AtomicETH = AtomicFields{VA: a.VA(), RKey: a.RKey(), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
	}
	if a := p.AETH(); a != nil {
		h.AETH = AETHFields{Syndrome: a.Syndrome(), MSN: a.MSN()}
	}
	if a := p.AtomicAckETH(); a != nil {
		h.AtomicAck = a.Orig()
	}
	if i := p.ImmDt(); i != nil {
		h.Imm = i.Imm()
	}
	if i := p.IETH(); i != nil {
		h.IETH = i.RKey()
	}
	if f := p.FETH(); f != nil {
		h.FlushType, h.FlushLevel = f.PlacementType(), f.Selectivity()
	}
}

// TransportLen returns the length of the transport packet (BTH to ICRC) that
// AppendTransport builds for h and a payload of n bytes, or 0 for a reserved
// opcode.
func (h *Header) TransportLen(n int) int {
	info := &opcodeTable[h.Opcode]
	if info.Transport == TransportNone {
		return 0
	}
	return info.HeaderLen + n + (-n)&3 + ICRCLen
}

// AppendTransport appends a transport packet (BTH, the opcode's extension
// headers, payload, zero pad and a zero ICRC placeholder) to dst and returns
// the extended slice. Fill in the ICRC with SetICRC, or use AppendDatagram or
// AppendFrame, which do. It does not allocate when dst has room. The payload
// may already be in place, where the packet's headers end in dst's spare
// capacity: it is then not copied.
func AppendTransport(dst []byte, h *Header, payload []byte) ([]byte, error) {
	info := &opcodeTable[h.Opcode]
	if info.Transport == TransportNone {
		return dst, ErrBuildOpcode
	}
	if len(payload) > 0 && !info.Payload {
		return dst, ErrBuildPayload
	}
	// The 24-bit fields (DestQP, PSN, MSN, EEC, SrcQP) in range: one test
	// of them all, not a branch each.
	if uint32(h.DestQP)|uint32(h.PSN)|h.AETH.MSN|h.RDETH|uint32(h.DETH.SrcQP) > 0xFFFFFF {
		return dst, ErrBuildRange
	}
	pad := (-len(payload)) & 3
	n := info.HeaderLen + len(payload) + pad + ICRCLen
	if n > 0xFFFF {
		return dst, ErrBuildTooLong
	}
	start := len(dst)
	if cap(dst)-start < n {
		dst = grow(dst, n) // out of line: the common case is a buffer with room
	} else {
		dst = dst[:start+n]
	}
	b := dst[start:]
	// The BTH in two stores (as BTH's setters would write it byte by byte):
	// the ICRC reads it back at once, in wide loads.
	_ = b[BTHLen-1]
	w0 := uint64(h.Opcode)<<56 | (b2u(h.SE)<<7|b2u(h.MigReq)<<6|uint64(pad)<<4)<<48 | uint64(h.PKey)<<32 |
		(b2u(h.FECN)<<7|b2u(h.BECN)<<6)<<24 | uint64(h.DestQP&QPNMask)
	binary.BigEndian.PutUint64(b, w0)
	binary.BigEndian.PutUint32(b[8:], uint32(b2u(h.AckReq))<<31|uint32(h.PSN&PSNMask))
	m := info.Headers
	if m&HasRETH != 0 {
		RETH(b[info.offsets[hRETH]:]).Set(h.RETH.VA, h.RETH.RKey, h.RETH.DMALen)
	}
	if m&HasAETH != 0 {
		AETH(b[info.offsets[hAETH]:]).Set(h.AETH.Syndrome, h.AETH.MSN)
	}
	if m&HasImmDt != 0 {
		ImmDt(b[info.offsets[hImmDt]:]).SetImm(h.Imm)
	}
	if m&(HasRDETH|HasDETH|HasAtomicETH|HasAtomicAckETH|HasIETH|HasCNPPad|HasFETH) != 0 {
		putOtherHeaders(b, info, h)
	}
	off := info.HeaderLen + len(payload)
	if len(payload) > 0 && &payload[0] != &b[info.HeaderLen] { // not built in place
		copy(b[info.HeaderLen:], payload)
	}
	binary.BigEndian.PutUint32(b[n-ICRCLen:], 0) // the pad and ICRC: at most 7 bytes, no call
	for i := off; i < n-ICRCLen; i++ {
		b[i] = 0
	}
	return dst, nil
}

// putOtherHeaders writes the extension headers AppendTransport leaves out of
// its own body (which keeps it small for the common packets).
func putOtherHeaders(b []byte, info *OpcodeInfo, h *Header) {
	m := info.Headers
	if m&HasRDETH != 0 {
		RDETH(b[info.offsets[hRDETH]:]).SetEEC(h.RDETH)
	}
	if m&HasDETH != 0 {
		DETH(b[info.offsets[hDETH]:]).Set(h.DETH.QKey, h.DETH.SrcQP)
	}
	if m&HasAtomicETH != 0 {
		a := &h.AtomicETH
		AtomicETH(b[info.offsets[hAtomicETH]:]).Set(a.VA, a.RKey, a.SwapAdd, a.Compare)
	}
	if m&HasAtomicAckETH != 0 {
		AtomicAckETH(b[info.offsets[hAtomicAckETH]:]).SetOrig(h.AtomicAck)
	}
	if m&HasIETH != 0 {
		IETH(b[info.offsets[hIETH]:]).SetRKey(h.IETH)
	}
	if m&HasFETH != 0 {
		FETH(b[info.offsets[hFETH]:]).Set(h.FlushType, h.FlushLevel)
	}
	if m&HasCNPPad != 0 {
		clear(b[info.offsets[hCNPPad] : int(info.offsets[hCNPPad])+CNPPadLen])
	}
}

// b2u returns 1 for true, 0 for false (compiled without a branch).
func b2u(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// grow extends b by n bytes, reallocating only when its capacity is short.
//
//go:noinline
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*cap(b)+n)
	copy(nb, b)
	return nb
}
