package engine

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/verbs"
)

// The rings between the application and the engine. A producer writes a slot,
// then publishes it with one release store of the tail; the consumer reads the
// tail with an acquire load, uses the slots, and gives them back with one
// release store of the head. Producers on the application side may be several
// goroutines: they serialise on a lock no engine path takes (a mutex; the
// send queue's is a bit of its tail's word).

// cacheLinePad keeps indices written by different sides on separate lines.
type cacheLinePad [64]byte

// sendSlot is a posted send work request, its SGEs copied in: a single
// one (the common case) into sge, more into the queue's share of the slot
// (sendQueue.sgesOf); its inline data goes into the queue's inlineOf. At
// 128 bytes a slot is two cache lines, all a WQE of one SGE touches (the
// SGE beside the WR, not in an array of its own).
type sendSlot struct {
	wr     verbs.SendWR // wr.SGList is the slot's copy: sge[:] for one SGE
	sge    [1]verbs.SGE
	length uint32 // total bytes of the SGEs (or of the inline data)
}

// sendQueue is a QP's send queue. Its producers' lock and its tail are one
// word (see lock), so that a post of one WR, a 64-byte write_bw client's
// every message, takes two locked instructions instead of a mutex's two and
// the tail's release store.
type sendQueue struct {
	// word is the tail (the WRs ever posted) times two, plus one while a
	// producer holds the lock.
	word  atomic.Uint64
	_     cacheLinePad
	head  atomic.Uint64 // written by the engine when a WQE retires
	_     cacheLinePad
	slots []sendSlot
	mask  uint64
	// One backing array each for the SGEs of WRs of several and the
	// inline data of all slots, maxSGE and maxInline a slot, in slot order:
	// the engine walks the ring in order, and contiguous memory lets the
	// processor prefetch it (a separate small allocation per slot was a
	// cache miss per work request in deep queues).
	sges      []verbs.SGE
	inline    []byte
	maxSGE    int
	maxInline int
	// lastSig is the index, plus one, of the last signaled WR posted (0:
	// none yet). Producers only, under their lock (QP.PostSendAwaited).
	lastSig uint64
}

// posted returns the tail: the WRs published to the engine.
func (q *sendQueue) posted() uint64 { return q.word.Load() >> 1 }

// lock takes the producers' lock and returns the tail. A producer that
// finds it held yields until it is let go: the holder only fills slots.
func (q *sendQueue) lock() uint64 {
	for {
		w := q.word.Load()
		if w&1 == 0 && q.word.CompareAndSwap(w, w|1) {
			return w >> 1
		}
		runtime.Gosched()
	}
}

// unlock publishes the tail t (the one lock returned, or past the slots
// filled since) and lets the producers' lock go, in one release store.
func (q *sendQueue) unlock(t uint64) { q.word.Store(t << 1) }

func newSendQueue(n, maxSGE, maxInline int) *sendQueue {
	size := roundPow2(n)
	return &sendQueue{slots: make([]sendSlot, size), mask: uint64(size - 1),
		sges: make([]verbs.SGE, size*maxSGE), inline: make([]byte, size*maxInline), maxSGE: maxSGE, maxInline: maxInline}
}

// sgesOf returns the room for the SGEs of a WR of several in slot i
// (an index of the ring, masked here), empty.
func (q *sendQueue) sgesOf(i uint64) []verbs.SGE {
	j := int(i&q.mask) * q.maxSGE
	return q.sges[j : j : j+q.maxSGE]
}

// inlineOf returns the room for the inline data of slot i, empty.
func (q *sendQueue) inlineOf(i uint64) []byte {
	j := int(i&q.mask) * q.maxInline
	return q.inline[j : j : j+q.maxInline]
}

// recvSlot is a posted receive work request.
type recvSlot struct {
	wrid   uint64
	sges   []verbs.SGE
	length uint32
}

// recvQueue is a receive queue or a shared receive queue.
type recvQueue struct {
	mu    sync.Mutex
	_     cacheLinePad
	tail  atomic.Uint64
	_     cacheLinePad
	head  atomic.Uint64
	_     cacheLinePad
	slots []recvSlot
	mask  uint64
	limit int // max WRs the user asked for
}

func newRecvQueue(n, maxSGE int) *recvQueue {
	size := roundPow2(n)
	q := &recvQueue{slots: make([]recvSlot, size), mask: uint64(size - 1), limit: n}
	sges := make([]verbs.SGE, size*maxSGE) // contiguous, as newSendQueue's
	for i := range q.slots {
		q.slots[i].sges = sges[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
	}
	return q
}

// peek returns the oldest posted receive, or nil.
func (q *recvQueue) peek() *recvSlot {
	h := q.head.Load()
	if h == q.tail.Load() {
		return nil
	}
	return &q.slots[h&q.mask]
}

// pop retires the oldest posted receive.
func (q *recvQueue) pop() { q.head.Store(q.head.Load() + 1) }

func roundPow2(n int) int {
	s := 1
	for s < n {
		s <<= 1
	}
	return s
}
