package engine

import (
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/verbs"
)

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
	// An empty CQ, what a spinning poller mostly finds, is told by two
	// loads: no lock, no store (head moves only under mu, and a completion
	// pushed after the loads is the next poll's).
	if c.tail.Load() == c.head.Load() || len(wc) == 0 {
		return 0
	}
	c.mu.Lock()
	h := c.head.Load()
	n := int(c.tail.Load() - h)
	if n > len(wc) {
		n = len(wc)
	}
	for i := 0; i < n; i++ {
		wc[i] = c.slots[(h+uint64(i))&c.mask]
	}
	if n > 0 {
		c.head.Store(h + uint64(n))
	}
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

// CQ overrun, as libibverbs and IBA specify it: when the engine has a
// completion for a CQ with no room left, the completion is lost, the CQ is in
// error (it takes no completion any more, so that none is seen out of order
// after a gap), the consumer gets IBV_EVENT_CQ_ERR (rdma_rxe's rxe_cq_post
// raises IB_EVENT_CQ_ERR the same way), and every QP the CQ serves goes to
// ERROR with IBV_EVENT_QP_FATAL, a local work queue catastrophic error:
// their work is flushed (into their other CQ, when they have one). Nothing is
// lost silently: each completion the CQ could not take is counted in
// Stats.CQOverruns.

// pushWC stamps a completion (Config.Clock) and adds it to cq, or records
// its overrun and reports false.
func (e *Engine) pushWC(cq *CQ, wc *verbs.WC, solicited bool) bool {
	if e.cfg.Clock != nil {
		// A completion caused by a received packet carries the time the
		// kernel received it, when the packet path knows it.
		if wc.Timestamp = e.rxTime; wc.Timestamp == 0 {
			wc.Timestamp = e.cfg.Clock()
		}
	}
	if !cq.failed && cq.push(wc, solicited) {
		return true
	}
	e.stats.CQOverruns++
	if !cq.failed {
		cq.failed = true
		cq.overrun.Store(true)
		e.overran = append(e.overran, cq) // rare: allocation allowed
	}
	return false
}

// raiseOverruns reports the CQs that overran since the last call and moves
// the QPs they serve to ERROR. The engine calls it where no QP is half-way
// through an update: at the end of Tick and at the start of Output
// (NextDeadline asks for a Tick at once while an overrun is pending).
func (e *Engine) raiseOverruns() {
	for len(e.overran) > 0 {
		cq := e.overran[0]
		e.overran = e.overran[1:]
		e.event(AsyncEvent{Type: verbs.EventCQErr, CQ: cq})
		for _, qp := range e.qps {
			if qp == nil || (qp.scq != cq && qp.rcq != cq) || qp.state == verbs.QPSReset || qp.state == verbs.QPSErr {
				continue
			}
			qp.setError()
			e.event(AsyncEvent{Type: verbs.EventQPFatal, QP: qp})
			qp.flush() // what the CQ in error cannot take is counted
		}
	}
	e.overran = e.overran[:0]
}
