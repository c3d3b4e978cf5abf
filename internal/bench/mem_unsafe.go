package bench

import (
	"sync/atomic"
	"unsafe"
)

// loadByte reads b[i] with an atomic load of the aligned 32-bit word that
// holds it: WRITE latency polls memory that the device's driver writes from
// another goroutine, and sync/atomic has no byte operations. b must be
// 4-byte aligned and a multiple of 4 long (the session's buffer is both).
func loadByte(b []byte, i int) byte {
	w := atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[i&^3])))
	return (*[4]byte)(unsafe.Pointer(&w))[i&3]
}

// storeByte sets b[i] with an atomic store of its word; this goroutine must
// be the only one writing that word.
func storeByte(b []byte, i int, v byte) {
	p := (*uint32)(unsafe.Pointer(&b[i&^3]))
	w := atomic.LoadUint32(p)
	(*[4]byte)(unsafe.Pointer(&w))[i&3] = v
	atomic.StoreUint32(p, w)
}
