package engine

import (
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/verbs"
)

// The rings between the application and the engine. A producer writes a slot,
// then publishes it with one release store of the tail; the consumer reads the
// tail with an acquire load, uses the slots, and gives them back with one
// release store of the head. Producers on the application side may be several
// goroutines: they serialise on a mutex no engine path takes.

// cacheLinePad keeps indices written by different sides on separate lines.
type cacheLinePad [64]byte

// sendSlot is a posted send work request, its SGEs and inline data copied in.
type sendSlot struct {
	wr     verbs.SendWR
	sges   []verbs.SGE // cap = max SGEs; wr.SGList aliases it
	inline []byte      // cap = max inline data
	length uint32      // total bytes of the SGEs (or of the inline data)
}

// sendQueue is a QP's send queue.
type sendQueue struct {
	mu    sync.Mutex // producers (PostSend)
	_     cacheLinePad
	tail  atomic.Uint64 // written by the producer
	_     cacheLinePad
	head  atomic.Uint64 // written by the engine when a WQE retires
	_     cacheLinePad
	slots []sendSlot
	mask  uint64
}

func newSendQueue(n, maxSGE, maxInline int) *sendQueue {
	size := roundPow2(n)
	q := &sendQueue{slots: make([]sendSlot, size), mask: uint64(size - 1)}
	for i := range q.slots {
		q.slots[i].sges = make([]verbs.SGE, 0, maxSGE)
		q.slots[i].inline = make([]byte, 0, maxInline)
	}
	return q
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
	for i := range q.slots {
		q.slots[i].sges = make([]verbs.SGE, 0, maxSGE)
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

// CQ is a completion queue ring: the engine produces, the application
// consumes with Poll.
type CQ struct {
	mu       sync.Mutex // consumers (Poll)
	_        cacheLinePad
	tail     atomic.Uint64 // engine
	_        cacheLinePad
	head     atomic.Uint64 // application
	_        cacheLinePad
	slots    []verbs.WC
	mask     uint64
	capacity int
	// overrun is set when the engine had a completion and no room: the CQ
	// is then in error (IBV_EVENT_CQ_ERR; see pushWC). failed is the same,
	// for the engine's goroutine alone.
	overrun atomic.Bool
	failed  bool
	// Notify, when set, is called by the engine (on its goroutine) after it
	// added completions while the CQ was armed.
	Notify func()
	armed  atomic.Uint32 // 0 not armed, 1 any completion, 2 solicited only
}

// NewCQ returns a completion queue with room for at least n completions.
func NewCQ(n int) *CQ {
	size := roundPow2(n)
	return &CQ{slots: make([]verbs.WC, size), mask: uint64(size - 1), capacity: size}
}

// Capacity returns how many completions the CQ holds.
func (c *CQ) Capacity() int { return c.capacity }

// Overrun reports whether the CQ overflowed: it is then in error and takes
// no more completions; those it holds can still be polled.
func (c *CQ) Overrun() bool { return c.overrun.Load() }

// push adds a completion (engine side). It reports false on overrun.
func (c *CQ) push(wc *verbs.WC, solicited bool) bool {
	t := c.tail.Load()
	if t-c.head.Load() >= uint64(len(c.slots)) {
		c.overrun.Store(true)
		return false
	}
	c.slots[t&c.mask] = *wc
	c.tail.Store(t + 1)
	if a := c.armed.Load(); a != 0 && (a == 1 || solicited || wc.Status != verbs.WCSuccess) {
		if c.armed.CompareAndSwap(a, 0) && c.Notify != nil {
			c.Notify()
		}
	}
	return true
}

// Poll moves up to len(wc) completions into wc and returns how many. Safe
// from any goroutine; it does not allocate.
func (c *CQ) Poll(wc []verbs.WC) int {
	c.mu.Lock()
	h := c.head.Load()
	n := int(c.tail.Load() - h)
	if n > len(wc) {
		n = len(wc)
	}
	for i := 0; i < n; i++ {
		wc[i] = c.slots[(h+uint64(i))&c.mask]
	}
	c.head.Store(h + uint64(n))
	c.mu.Unlock()
	return n
}

// Arm asks for one Notify call at the next completion (the next solicited or
// error completion when solicitedOnly).
func (c *CQ) Arm(solicitedOnly bool) {
	v := uint32(1)
	if solicitedOnly {
		v = 2
	}
	c.armed.Store(v)
	// A completion may have landed before the arm: report it now.
	if c.tail.Load() != c.head.Load() && c.armed.CompareAndSwap(v, 0) && c.Notify != nil && !solicitedOnly {
		c.Notify()
	}
}

func roundPow2(n int) int {
	s := 1
	for s < n {
		s <<= 1
	}
	return s
}
