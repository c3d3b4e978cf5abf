package uring

import (
	"sync/atomic"
	"unsafe"
)

// sq is the submission queue. The kernel consumes entries from head, which
// it advances; this side fills entries at tail and publishes tail with a
// release store after the entries are written, once per batch. The index
// array is set once to the identity, so entry i of the array always names
// SQE i.
type sq struct {
	khead, ktail, kflagsp, kdropped *uint32 // in the shared mapping
	mask, entries                   uint32
	sqes                            []sqe
	tail                            uint32 // next entry to fill
	published                       uint32 // last tail stored to *ktail
}

func (q *sq) init(mem, sqeMem []byte, off *sqringOffsets) {
	at := func(o uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[o])) }
	q.khead, q.ktail, q.kflagsp, q.kdropped = at(off.head), at(off.tail), at(off.flags), at(off.dropped)
	q.mask = *at(off.ringMask)
	q.entries = *at(off.ringEntries)
	q.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&sqeMem[0])), q.entries)
	array := unsafe.Slice(at(off.array), q.entries)
	for i := range array {
		array[i] = uint32(i)
	}
	q.tail = atomic.LoadUint32(q.ktail)
	q.published = q.tail
}

// get returns a zeroed SQE to fill, or nil when the queue is full (every
// entry filled and not yet consumed by the kernel).
func (q *sq) get() *sqe {
	if q.tail-atomic.LoadUint32(q.khead) >= q.entries {
		return nil
	}
	s := &q.sqes[q.tail&q.mask]
	*s = sqe{}
	q.tail++
	return s
}

// space returns how many SQEs get can still return.
func (q *sq) space() uint32 { return q.entries - (q.tail - atomic.LoadUint32(q.khead)) }

// flushTail publishes the filled entries (one release store) and returns how
// many the kernel has not consumed yet: the count to pass to
// io_uring_enter.
func (q *sq) flushTail() uint32 {
	if q.tail != q.published {
		atomic.StoreUint32(q.ktail, q.tail)
		q.published = q.tail
	}
	return q.tail - atomic.LoadUint32(q.khead)
}

// kflags returns the SQ ring flags the kernel sets (CQ overflow, task run).
func (q *sq) kflags() uint32 { return atomic.LoadUint32(q.kflagsp) }

// pendingKernel returns how many published entries the kernel has not
// consumed yet.
func (q *sq) pendingKernel() uint32 { return q.published - atomic.LoadUint32(q.khead) }

// dropped returns how many SQEs the kernel found invalid and skipped.
func (q *sq) dropped() uint32 { return atomic.LoadUint32(q.kdropped) }
