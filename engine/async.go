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
