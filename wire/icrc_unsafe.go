package wire

import (
	"hash/crc32"
	"unsafe"
)

// crcUpdateNoEscape is crc32.Update(crc, crc32.IEEETable, p) for a p that
// lives on the caller's stack. hash/crc32 dispatches through a function
// variable, so escape analysis cannot see that it keeps no reference to p and
// would move every caller's scratch buffer to the heap: one allocation per
// packet. It keeps none, so the pointer is passed through a uintptr, as the
// runtime's noescape does; the slice still holds a real pointer while
// crc32.Update runs, so the garbage collector and stack copying see it.
func crcUpdateNoEscape(crc uint32, p []byte) uint32 {
	q := unsafe.Slice((*byte)(noescape(unsafe.Pointer(unsafe.SliceData(p)))), len(p))
	return crc32.Update(crc, crc32.IEEETable, q)
}

// noescape hides p from escape analysis. It is an identity function.
//
//go:nosplit
func noescape(p unsafe.Pointer) unsafe.Pointer {
	x := uintptr(p)
	return *(*unsafe.Pointer)(unsafe.Pointer(&x))
}
