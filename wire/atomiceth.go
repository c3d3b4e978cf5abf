package wire

import "encoding/binary"

// AtomicETHLen is the length of the Atomic Extended Transport Header.
const AtomicETHLen = 28

// AtomicETH is a view of the Atomic Extended Transport Header (IBA 9.3.4),
// carried by COMPARE SWAP and FETCH ADD.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              Virtual Address (64 bits, 8-byte aligned)        |
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           R_Key                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Swap (COMPARE SWAP) or Add (FETCH ADD) Data         |
//	|                          (64 bits)                            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Compare Data (64 bits)                       |
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AtomicETH []byte

// VA returns the remote virtual address of the 8-byte operand.
func (a AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(a) }

// RKey returns the remote key.
func (a AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(a[8:]) }

// SwapAdd returns the swap value (COMPARE SWAP) or the addend (FETCH ADD).
func (a AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(a[12:]) }

// Compare returns the compare value (COMPARE SWAP; ignored by FETCH ADD).
func (a AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(a[20:]) }

// Set writes all fields.
func (a AtomicETH) Set(va uint64, rkey uint32, swapAdd, compare uint64) {
	binary.BigEndian.PutUint64(a, va)
	binary.BigEndian.PutUint32(a[8:], rkey)
	binary.BigEndian.PutUint64(a[12:], swapAdd)
	binary.BigEndian.PutUint64(a[20:], compare)
}

// AtomicAckETHLen is the length of the Atomic Acknowledge Extended Transport
// Header.
const AtomicAckETHLen = 8

// AtomicAckETH is a view of the Atomic Acknowledge Extended Transport Header
// (IBA 9.3.6), carried after the AETH by ATOMIC ACKNOWLEDGE.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Original Remote Data (64 bits, before the op)        |
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AtomicAckETH []byte

// Orig returns the value the remote word held before the atomic operation.
func (a AtomicAckETH) Orig() uint64 { return binary.BigEndian.Uint64(a) }

// SetOrig writes the original remote data.
func (a AtomicAckETH) SetOrig(v uint64) { binary.BigEndian.PutUint64(a, v) }
