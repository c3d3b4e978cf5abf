package engine

import (
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// AsyncEvent is an asynchronous event of the engine's objects (struct
// ibv_async_event): its type and the CQ or QP it concerns.
type AsyncEvent struct {
	Type verbs.EventType
	CQ   *CQ // EventCQErr
	QP   *QP // the QP events
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
		wc.Timestamp = e.cfg.Clock()
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

func (e *Engine) event(ev AsyncEvent) {
	e.stats.AsyncEvents++
	if e.cfg.OnAsyncEvent != nil {
		e.cfg.OnAsyncEvent(ev)
	}
}

// respErrorEvent raises the event of a responder error that took the QP to
// ERROR (IBA responder class C and D errors; rdma_rxe raises
// IB_EVENT_QP_ACCESS_ERR for an R_Key violation the same way): an invalid
// request is IBV_EVENT_QP_REQ_ERR, a remote access violation
// IBV_EVENT_QP_ACCESS_ERR, anything else IBV_EVENT_QP_FATAL.
func (qp *QP) respErrorEvent(syn wire.Syndrome) {
	t := verbs.EventQPFatal
	switch syn {
	case wire.NAKInvalidRequest:
		t = verbs.EventQPReqErr
	case wire.NAKRemoteAccess:
		t = verbs.EventQPAccessErr
	}
	qp.e.event(AsyncEvent{Type: t, QP: qp})
}
