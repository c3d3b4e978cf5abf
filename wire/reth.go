package wire

import "encoding/binary"

// RETHLen is the length of the RDMA Extended Transport Header.
const RETHLen = 16

// RETH is a view of the RDMA Extended Transport Header (IBA 9.3.3), carried by
// RDMA WRITE FIRST/ONLY and RDMA READ REQUEST.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Virtual Address (bits 63..32)                |
//	|                  Virtual Address (bits 31..0)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           R_Key                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         DMA Length                            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type RETH []byte

// VA returns the remote virtual address.
func (r RETH) VA() uint64 { return binary.BigEndian.Uint64(r) }

// RKey returns the remote key.
func (r RETH) RKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// DMALen returns the length of the whole RDMA operation in bytes.
func (r RETH) DMALen() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// Set writes all fields.
func (r RETH) Set(va uint64, rkey, dmaLen uint32) {
	binary.BigEndian.PutUint64(r, va)
	binary.BigEndian.PutUint32(r[8:], rkey)
	binary.BigEndian.PutUint32(r[12:], dmaLen)
}
