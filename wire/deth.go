package wire

import "encoding/binary"

// DETHLen is the length of the Datagram Extended Transport Header.
const DETHLen = 8

// DETH is a view of the Datagram Extended Transport Header (IBA 9.3.2),
// carried by UD (and RD request) packets only, never by RC.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Queue Key                            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |                Source QP                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type DETH []byte

// QKey returns the queue key.
func (d DETH) QKey() uint32 { return binary.BigEndian.Uint32(d) }

// Reserved returns the reserved byte.
func (d DETH) Reserved() uint8 { return d[4] }

// SrcQP returns the source queue pair number.
func (d DETH) SrcQP() QPN { return QPN(binary.BigEndian.Uint32(d[4:]) & QPNMask) }

// Set writes the Q_Key and source QP and clears the reserved byte.
func (d DETH) Set(qkey uint32, src QPN) {
	binary.BigEndian.PutUint32(d, qkey)
	binary.BigEndian.PutUint32(d[4:], uint32(src&QPNMask))
}

// RDETHLen is the length of the Reliable Datagram Extended Transport Header.
const RDETHLen = 4

// RDETH is a view of the Reliable Datagram Extended Transport Header
// (IBA 9.3.1). goroce decodes RD packets but does not implement RD.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |                EE-Context                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type RDETH []byte

// EEC returns the end-to-end context.
func (r RDETH) EEC() uint32 { return binary.BigEndian.Uint32(r) & 0xFFFFFF }

// SetEEC writes the end-to-end context and clears the reserved byte.
func (r RDETH) SetEEC(eec uint32) { binary.BigEndian.PutUint32(r, eec&0xFFFFFF) }
