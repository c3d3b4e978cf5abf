package soft

import (
	"context"
	"sync"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/verbs"
)

// asyncState routes the engine's asynchronous events to the contexts whose
// objects they concern.
type asyncState struct {
	// Guarded by the device mutex (the engine raises events with it held,
	// and objects are created and destroyed with it held).
	cqs map[*engine.CQ]*CQ
	qps map[*engine.QP]*QP
}

// onAsyncEvent is the engine's OnAsyncEvent: it runs on the driver with the
// device mutex held, and never blocks.
func (d *Device) onAsyncEvent(ev engine.AsyncEvent) {
	a := &d.async
	switch {
	case ev.CQ != nil:
		if cq := a.cqs[ev.CQ]; cq != nil && cq.ctx != nil {
			cq.ctx.events.put(verbs.AsyncEvent{Type: ev.Type, CQ: cq})
			cq.wake() // a PollWait on the CQ returns its error
		}
	case ev.QP != nil:
		if qp := a.qps[ev.QP]; qp != nil && qp.ctx != nil {
			qp.ctx.events.put(verbs.AsyncEvent{Type: ev.Type, QP: qp})
		}
	}
}

// track records the soft objects of engine objects. Called with d.mu held.
func (d *Device) trackCQ(cq *CQ) {
	if d.async.cqs == nil {
		d.async.cqs = map[*engine.CQ]*CQ{}
	}
	d.async.cqs[cq.cq] = cq
}

func (d *Device) trackQP(qp *QP) {
	if d.async.qps == nil {
		d.async.qps = map[*engine.QP]*QP{}
	}
	d.async.qps[qp.qp] = qp
}

// eventQueue holds a context's asynchronous events until GetAsyncEvent
// takes them. It is unbounded, so that no event is ever dropped: events are
// rare (a CQ overruns once; a QP goes to ERROR once per connection), and
// their number is bounded by the objects the context created.
type eventQueue struct {
	mu     sync.Mutex
	events []verbs.AsyncEvent
	ready  chan struct{} // holds a token while events is not empty
	// ctxGone and devGone close when the context or the device closes.
	ctxGone, devGone <-chan struct{}
}

func newEventQueue(ctxGone, devGone <-chan struct{}) *eventQueue {
	return &eventQueue{ready: make(chan struct{}, 1), ctxGone: ctxGone, devGone: devGone}
}

func (q *eventQueue) put(ev verbs.AsyncEvent) {
	q.mu.Lock()
	q.events = append(q.events, ev)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// get takes the oldest event, waiting for one until ctx ends.
func (q *eventQueue) get(ctx context.Context) (verbs.AsyncEvent, error) {
	for {
		q.mu.Lock()
		if len(q.events) > 0 {
			ev := q.events[0]
			q.events[0] = verbs.AsyncEvent{}
			q.events = q.events[1:]
			more := len(q.events) > 0
			q.mu.Unlock()
			if more {
				select {
				case q.ready <- struct{}{}:
				default:
				}
			}
			return ev, nil
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-ctx.Done():
			return verbs.AsyncEvent{}, ctx.Err()
		case <-q.ctxGone:
			return verbs.AsyncEvent{}, errCtxClosed
		case <-q.devGone:
			return verbs.AsyncEvent{}, errClosed
		}
	}
}

// GetAsyncEvent returns the next asynchronous event of an object created
// through this context, waiting for one until ctx ends (ibv_get_async_event;
// no acknowledgement is needed). The soft device raises IBV_EVENT_CQ_ERR
// when a CQ overruns (a completion found it full: the CQ is then in error and
// takes no more completions), and IBV_EVENT_QP_FATAL for every QP the CQ
// serves, which the overrun moved to ERROR; IBV_EVENT_QP_ACCESS_ERR or
// IBV_EVENT_QP_REQ_ERR when a QP's responder met a remote access violation
// or an invalid request and went to ERROR. Closing the context or the
// device wakes the waiters with an error matching verbs.ErrDestroyed.
func (c *Context) GetAsyncEvent(ctx context.Context) (verbs.AsyncEvent, error) {
	if err := c.alive(); err != nil {
		return verbs.AsyncEvent{}, err
	}
	return c.events.get(ctx)
}
