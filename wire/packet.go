package wire

import "encoding/binary"

// ICRCLen is the length of the invariant CRC that ends every RoCEv2 transport
// packet.
const ICRCLen = 4

// MinPacketLen is the length of the shortest transport packet: a BTH and an
// ICRC.
const MinPacketLen = BTHLen + ICRCLen

// MaxPMTU is the largest InfiniBand path MTU (payload bytes per packet).
const MaxPMTU = 4096

// Packet is a parsed transport packet: the UDP payload of a RoCEv2 datagram,
// from the BTH to the ICRC inclusive. It holds offsets into Buf, never copies.
type Packet struct {
	// Buf is the whole transport packet, ICRC included.
	Buf []byte
	// Info is the opcode's table entry.
	Info *OpcodeInfo
	// PayloadLen is the number of payload bytes (pad excluded).
	PayloadLen int
}

// Parse validates a transport packet (BTH to ICRC inclusive) and fills p. It
// checks, in order: room for the BTH and ICRC, a defined opcode, TVer 0, room
// for every extension header the opcode carries, payload only on opcodes that
// carry one, payload + pad 4-byte aligned, pad count within the packet, pad
// bytes zero, a defined AETH syndrome (an ACK on READ responses and ATOMIC
// ACKNOWLEDGE), and then the request rules: RDMA WRITE ONLY length equals its
// DMA length, RDMA WRITE FIRST is shorter than its DMA length, atomic address
// 8-byte aligned, FIRST/MIDDLE payloads a valid MTU, LAST/ONLY at most 4096.
// It neither checks the ICRC (see CheckICRC) nor the path MTU of a particular
// QP (see CheckPMTU).
//
// Errors match ErrMalformed or ErrInvalidRequest (see the package
// documentation); with ErrInvalidRequest p is filled in. Parse does not
// allocate.
func Parse(b []byte, p *Packet) error {
	*p = Packet{}
	if len(b) < BTHLen {
		return ErrTruncatedBTH
	}
	bth := BTH(b)
	info := &opcodeTable[bth.Opcode()]
	if info.Transport == TransportNone {
		return ErrUnknownOpcode
	}
	if bth.TVer() != 0 {
		return ErrTVer
	}
	end := len(b) - ICRCLen
	if info.HeaderLen > end {
		if info.HeaderLen == BTHLen {
			return ErrTruncatedICRC
		}
		off := BTHLen
		for _, i := range headerOrder {
			if info.Headers&(1<<i) == 0 {
				continue
			}
			off += int(headerLens[i])
			if off > end {
				return headerTruncErrs[i]
			}
		}
		return ErrTruncated
	}
	rest := end - info.HeaderLen
	pad := bth.PadCount()
	if !info.Payload {
		if pad != 0 {
			return ErrPadNoPayload
		}
		if rest != 0 {
			return ErrUnexpectedPayload
		}
	} else {
		if rest&3 != 0 {
			return ErrUnaligned
		}
		if pad > rest {
			return ErrPadCount
		}
		for _, c := range b[end-pad : end] {
			if c != 0 {
				return ErrPadNonZero
			}
		}
	}
	payload := rest - pad
	if info.Headers&HasAETH != 0 {
		s := AETH(b[info.offsets[hAETH]:]).Syndrome()
		if !s.Valid() {
			return ErrSyndrome
		}
		if info.Operation != OpAcknowledge && !s.IsACK() {
			return ErrSyndromeNotACK
		}
	}
	p.Buf, p.Info, p.PayloadLen = b, info, payload
	switch {
	case info.Operation == OpWrite && info.Position == PosOnly:
		if RETH(b[info.offsets[hRETH]:]).DMALen() != uint32(payload) {
			return ErrDMALength
		}
	case info.Operation == OpWrite && info.Position == PosFirst:
		if RETH(b[info.offsets[hRETH]:]).DMALen() <= uint32(payload) {
			return ErrDMALength
		}
	case info.Headers&HasAtomicETH != 0:
		if AtomicETH(b[info.offsets[hAtomicETH]:]).VA()&7 != 0 {
			return ErrAtomicAligned
		}
	}
	if info.Position == PosOnly && payload <= MaxPMTU {
		return nil // checkPMTU's answer for the common case, without its call
	}
	return checkPMTU(info.Position, pad, payload, 0)
}

// Bit indexes of the extension headers, for offsets[].
const (
	hRDETH = iota
	hDETH
	hRETH
	hAtomicETH
	hAETH
	hAtomicAckETH
	hImmDt
	hIETH
	hCNPPad
	hFETH
)

// CheckPMTU applies the path-MTU rules of IBA 9.7.7 to a parsed packet for a
// QP whose path MTU is pmtu (256, 512, 1024, 2048 or 4096; 0 means unknown, in
// which case FIRST/MIDDLE payloads must be one of those values): a FIRST or
// MIDDLE packet carries exactly pmtu bytes and no pad, a LAST packet 1 to pmtu
// bytes, an ONLY packet at most pmtu. Errors match ErrInvalidRequest.
func (p *Packet) CheckPMTU(pmtu int) error {
	return checkPMTU(p.Info.Position, BTH(p.Buf).PadCount(), p.PayloadLen, pmtu)
}

func checkPMTU(pos Position, pad, payload, pmtu int) error {
	limit := pmtu
	if limit <= 0 {
		limit = MaxPMTU
	}
	switch pos {
	case PosFirst, PosMiddle:
		if pad != 0 {
			return ErrPMTUFirst
		}
		if pmtu > 0 {
			if payload != pmtu {
				return ErrPMTUFirst
			}
		} else if !ValidMTU(payload) {
			return ErrPMTUFirst
		}
	case PosLast:
		if payload < 1 || payload > limit {
			return ErrPMTULast
		}
	case PosOnly:
		if payload > limit {
			return ErrPMTUOnly
		}
	}
	return nil
}

// ValidMTU reports whether n is an InfiniBand MTU: 256, 512, 1024, 2048 or
// 4096.
func ValidMTU(n int) bool {
	return n >= 256 && n <= 4096 && n&(n-1) == 0
}

// Opcode returns the packet's opcode.
func (p *Packet) Opcode() Opcode { return Opcode(p.Buf[0]) }

// BTH returns the base transport header.
func (p *Packet) BTH() BTH { return BTH(p.Buf[:BTHLen]) }

func (p *Packet) ext(h int, n int) []byte {
	if p.Info.Headers&(1<<h) == 0 {
		return nil
	}
	off := int(p.Info.offsets[h])
	return p.Buf[off : off+n : off+n]
}

// RDETH returns the RDETH, or nil when the opcode carries none.
func (p *Packet) RDETH() RDETH { return p.ext(hRDETH, RDETHLen) }

// DETH returns the DETH, or nil when the opcode carries none.
func (p *Packet) DETH() DETH { return p.ext(hDETH, DETHLen) }

// RETH returns the RETH, or nil when the opcode carries none.
func (p *Packet) RETH() RETH { return p.ext(hRETH, RETHLen) }

// AtomicETH returns the AtomicETH, or nil when the opcode carries none.
func (p *Packet) AtomicETH() AtomicETH { return p.ext(hAtomicETH, AtomicETHLen) }

// AETH returns the AETH, or nil when the opcode carries none.
func (p *Packet) AETH() AETH { return p.ext(hAETH, AETHLen) }

// AtomicAckETH returns the AtomicAckETH, or nil when the opcode carries none.
func (p *Packet) AtomicAckETH() AtomicAckETH { return p.ext(hAtomicAckETH, AtomicAckETHLen) }

// ImmDt returns the immediate data header, or nil when the opcode carries none.
func (p *Packet) ImmDt() ImmDt { return p.ext(hImmDt, ImmDtLen) }

// IETH returns the IETH, or nil when the opcode carries none.
func (p *Packet) IETH() IETH { return p.ext(hIETH, IETHLen) }

// FETH returns the FETH of a FLUSH, or nil when the opcode carries none.
func (p *Packet) FETH() FETH { return p.ext(hFETH, FETHLen) }

// PayloadOffset returns the offset of the payload from the start of the BTH.
func (p *Packet) PayloadOffset() int { return p.Info.HeaderLen }

// Payload returns the payload, pad excluded.
func (p *Packet) Payload() []byte {
	off := p.Info.HeaderLen
	return p.Buf[off : off+p.PayloadLen : off+p.PayloadLen]
}

// ICRC returns the ICRC as carried on the wire (its four bytes read
// little-endian, the order rdma_rxe and the CRC-32 convention write them).
func (p *Packet) ICRC() uint32 { return binary.LittleEndian.Uint32(p.Buf[len(p.Buf)-ICRCLen:]) }
