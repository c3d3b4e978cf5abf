package wire

import "encoding/binary"

// BTHLen is the length of the Base Transport Header.
const BTHLen = 12

// BTH is a view of the Base Transport Header (IBA 9.2), the first header of
// every RoCEv2 transport packet.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad|  TVer |         Partition Key         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|  Resv6a   |              Destination QP                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|   Resv7     |            Packet Sequence Number             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// S: solicited event; M: migration request; Pad: pad count (0..3 bytes after
// the payload); TVer: transport version, 0; F/B: FECN/BECN (the byte holding
// them is masked out of the ICRC); A: AckReq.
type BTH []byte

// Opcode returns the opcode.
func (b BTH) Opcode() Opcode { return Opcode(b[0]) }

// SE returns the solicited-event bit.
func (b BTH) SE() bool { return b[1]&0x80 != 0 }

// MigReq returns the migration-request bit.
func (b BTH) MigReq() bool { return b[1]&0x40 != 0 }

// PadCount returns the number of pad bytes after the payload.
func (b BTH) PadCount() int { return int(b[1]>>4) & 3 }

// TVer returns the transport header version (0 for IBA 1.x).
func (b BTH) TVer() uint8 { return b[1] & 0x0F }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[2:]) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[4]&0x80 != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[4]&0x40 != 0 }

// Resv6a returns the six reserved bits after FECN and BECN.
func (b BTH) Resv6a() uint8 { return b[4] & 0x3F }

// DestQP returns the destination queue pair number.
func (b BTH) DestQP() QPN { return QPN(binary.BigEndian.Uint32(b[4:]) & QPNMask) }

// AckReq returns the acknowledge-request bit.
func (b BTH) AckReq() bool { return b[8]&0x80 != 0 }

// Resv7 returns the seven reserved bits after AckReq.
func (b BTH) Resv7() uint8 { return b[8] & 0x7F }

// PSN returns the packet sequence number.
func (b BTH) PSN() PSN { return PSN(binary.BigEndian.Uint32(b[8:]) & PSNMask) }

// SetOpcode sets the opcode.
func (b BTH) SetOpcode(o Opcode) { b[0] = byte(o) }

// SetFlags sets the SE, M, pad count and TVer byte.
func (b BTH) SetFlags(se, migReq bool, pad int, tver uint8) {
	b[1] = bit(se, 0x80) | bit(migReq, 0x40) | byte(pad&3)<<4 | tver&0x0F
}

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { binary.BigEndian.PutUint16(b[2:], k) }

// SetECN sets the FECN and BECN bits and clears Resv6a.
func (b BTH) SetECN(fecn, becn bool) { b[4] = bit(fecn, 0x80) | bit(becn, 0x40) }

// SetDestQP sets the destination QP (its top 8 bits are dropped).
func (b BTH) SetDestQP(q QPN) { b[5], b[6], b[7] = byte(q>>16), byte(q>>8), byte(q) }

// SetAckReqPSN sets the AckReq bit and the PSN, clearing Resv7.
func (b BTH) SetAckReqPSN(ackReq bool, p PSN) {
	binary.BigEndian.PutUint32(b[8:], uint32(p&PSNMask))
	b[8] = bit(ackReq, 0x80)
}

func bit(v bool, m byte) byte {
	if v {
		return m
	}
	return 0
}
