//go:build linux

package afxdp

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is what every AF_XDP ring shares: the producer and consumer indices
// and the flags word, in memory mapped from the socket at the offsets the
// kernel reports (XDP_MMAP_OFFSETS), and the descriptor array after them.
//
// The indices are free-running 32-bit counters: an entry's slot is its index
// masked by size-1, and differences are taken modulo 2^32, so wrap-around
// needs no special case. Each side keeps cached copies of both indices and
// reads the other side's index (an acquire load) only when its cache says
// there is not enough room or not enough entries; a producer publishes a
// whole batch with one store of its index, which the kernel reads with an
// acquire load (smp_load_acquire in xskq_cons_read_*), so descriptors
// written before the store are visible to it. Go's sync/atomic loads and
// stores are sequentially consistent, which implies acquire and release.
type ring struct {
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
	size     uint32
	mask     uint32
	mem      []byte // the mapping (or test memory) the pointers point into
}

// newRing lays a ring of size entries (a power of two) over mem at off.
func newRing(mem []byte, off unix.XDPRingOffset, size uint32) ring {
	return ring{
		producer: (*atomic.Uint32)(unsafe.Pointer(&mem[off.Producer])),
		consumer: (*atomic.Uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags:    (*atomic.Uint32)(unsafe.Pointer(&mem[off.Flags])),
		size:     size,
		mask:     size - 1,
		mem:      mem,
	}
}

// needWakeup reports whether the kernel asks to be kicked (sendto for the TX
// ring, recvfrom or poll for the fill ring) before it looks at the ring
// again. Only meaningful with XDP_USE_NEED_WAKEUP.
func (r *ring) needWakeup() bool { return r.flags.Load()&unix.XDP_RING_NEED_WAKEUP != 0 }

// descs returns the descriptor array of a ring of size entries at off.
func descs[D any](mem []byte, off unix.XDPRingOffset, size uint32) []D {
	return unsafe.Slice((*D)(unsafe.Pointer(&mem[off.Desc])), size)
}

// ringMapLen is the length of the mapping of a ring of size entries of
// descriptor size descSize.
func ringMapLen(off unix.XDPRingOffset, size uint32, descSize uintptr) int {
	return int(off.Desc) + int(size)*int(descSize)
}
