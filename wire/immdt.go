package wire

import "encoding/binary"

// ImmDtLen is the length of the Immediate Data Extended Transport Header.
const ImmDtLen = 4

// ImmDt is a view of the Immediate Data header (IBA 9.3.7), carried by the
// *_WITH_IMMEDIATE opcodes (after the RETH on RDMA WRITE ONLY WITH IMMEDIATE,
// after the DETH on UD).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Immediate Data                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The value is opaque to the transport: libibverbs hands it to the
// application in network byte order (wc.imm_data is __be32); Imm returns it as
// the big-endian number on the wire.
type ImmDt []byte

// Imm returns the immediate data.
func (i ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(i) }

// SetImm writes the immediate data.
func (i ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(i, v) }

// IETHLen is the length of the Invalidate Extended Transport Header.
const IETHLen = 4

// IETH is a view of the Invalidate Extended Transport Header (IBA 9.3.8),
// carried by SEND LAST/ONLY WITH INVALIDATE.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     R_Key to invalidate                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IETH []byte

// RKey returns the R_Key to invalidate.
func (i IETH) RKey() uint32 { return binary.BigEndian.Uint32(i) }

// SetRKey writes the R_Key to invalidate.
func (i IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(i, v) }

// CNPPadLen is the length of the reserved field that follows the BTH in a
// RoCEv2 Congestion Notification Packet (Annex A17.9.3).
const CNPPadLen = 16
