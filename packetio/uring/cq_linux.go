package uring

import (
	"sync/atomic"
	"unsafe"
)

// cq is the completion queue. The kernel fills entries at tail, which it
// publishes with a release store; this side reads tail with an acquire load,
// copies entries out from head and publishes head (one release store per
// batch, by release) so that the kernel may reuse the entries.
type cq struct {
	khead, ktail, koverflow *uint32 // in the shared mapping
	mask, entries           uint32
	cqes                    []cqe
	head                    uint32 // next entry to read
	tail                    uint32 // last tail loaded
	published               uint32 // last head stored to *khead
}

func (q *cq) init(mem []byte, off *cqringOffsets) {
	at := func(o uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[o])) }
	q.khead, q.ktail, q.koverflow = at(off.head), at(off.tail), at(off.overflow)
	q.mask = *at(off.ringMask)
	q.entries = *at(off.ringEntries)
	q.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&mem[off.cqes])), q.entries)
	q.head = atomic.LoadUint32(q.khead)
	q.tail = q.head
	q.published = q.head
}

// next copies out the next completion, if there is one.
func (q *cq) next() (cqe, bool) {
	if q.head == q.tail {
		q.tail = atomic.LoadUint32(q.ktail)
		if q.head == q.tail {
			return cqe{}, false
		}
	}
	c := q.cqes[q.head&q.mask]
	q.head++
	return c, true
}

// ready returns how many completions are waiting.
func (q *cq) ready() uint32 { return atomic.LoadUint32(q.ktail) - q.head }

// release gives the entries read so far back to the kernel.
func (q *cq) release() {
	if q.head != q.published {
		atomic.StoreUint32(q.khead, q.head)
		q.published = q.head
	}
}

// overflowed returns how many completions the kernel had to drop (only on
// kernels without IORING_FEAT_NODROP; later ones keep a backlog instead).
func (q *cq) overflowed() uint32 { return atomic.LoadUint32(q.koverflow) }
