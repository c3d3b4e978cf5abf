package engine

import (
	"encoding/binary"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// complete handles a response, as rdma_rxe's rxe_comp.c does: an ACK or NAK
// (completeAck), a READ response (completeRead), an ATOMIC ACKNOWLEDGE
// (completeAtomic). Responses for PSNs never sent are bogus and dropped.
func (qp *QP) complete(now int64, p *wire.Packet) {
	if qp.state != verbs.QPSRTS && qp.state != verbs.QPSSQD {
		return
	}
	psn := p.BTH().PSN()
	if !psn.Before(qp.req.psn) {
		return
	}
	switch p.Info.Operation {
	case wire.OpAcknowledge:
		qp.completeAck(now, p, psn)
	case wire.OpReadResponse:
		qp.completeRead(now, p, psn)
	case wire.OpAtomicAcknowledge:
		qp.completeAtomic(now, p, psn)
	}
}

// completeAck handles an ACK, an RNR NAK (pause, then resend, while
// rnr_retry lasts) or a NAK (resend after a PSN sequence error; otherwise
// the WQE fails and the QP goes to ERROR).
func (qp *QP) completeAck(now int64, p *wire.Packet, psn wire.PSN) {
	r := &qp.req
	syn := p.AETH().Syndrome()
	switch {
	case syn.IsACK():
		qp.acked(now, psn)
	case syn.IsRNR():
		qp.e.stats.RNRReceived++
		qp.acked(now, psn.Sub(1))
		if r.rnrLeft == 0 {
			qp.fatal(psn, verbs.WCRNRRetryExcErr)
			return
		}
		if qp.rnrRetry != 7 {
			r.rnrLeft--
		}
		qp.rewind(psn)
		r.rnrUntil = now + int64(wire.RNRTimer(syn.Value()))
		r.timerAt = 0
	default: // NAK
		qp.e.stats.NAKsReceived++
		qp.acked(now, psn.Sub(1))
		switch syn {
		case wire.NAKPSNSequence:
			if qp.path != nil {
				qp.e.onLoss(qp.path, now)
			}
			qp.rewind(psn)
		case wire.NAKInvalidRequest:
			qp.fatal(psn, verbs.WCRemInvReqErr)
		case wire.NAKRemoteAccess:
			qp.fatal(psn, verbs.WCRemAccessErr)
		default:
			qp.fatal(psn, verbs.WCRemOpErr)
		}
	}
}

// completeRead places a READ response packet: in order (a gap asks again
// from the first missing), shaped as the request, scattered into the WQE's
// SGEs; the last completes the READ.
func (qp *QP) completeRead(now int64, p *wire.Packet, psn wire.PSN) {
	i, ok := qp.wqeAt(psn)
	if !ok {
		return
	}
	s, st := &qp.sq.slots[i&qp.sq.mask], &qp.sqst[i&qp.sq.mask]
	if s.wr.Opcode != verbs.WRRDMARead {
		if isA19(s.wr.Opcode) {
			qp.completeA19(now, p, psn, st)
		}
		return
	}
	if st.done { // a duplicate: it still acknowledges what precedes it
		qp.acked(now, psn)
		return
	}
	want := st.firstPSN.Add(st.rcvd)
	if psn != want {
		if psn.After(want) { // a response packet was lost
			qp.rewind(want)
		}
		return
	}
	// Responses must match the request's shape.
	pos := p.Info.Position
	lastPkt := st.rcvd+1 == st.npkts
	if (lastPkt && pos != wire.PosLast && pos != wire.PosOnly) || (!lastPkt && (pos == wire.PosLast || pos == wire.PosOnly)) {
		qp.fatal(psn, verbs.WCBadRespErr)
		return
	}
	if !qp.scatter(s.wr.SGList, qp.pd, st.rcvd*uint32(qp.mtu), p.Payload()) {
		qp.fatal(psn, verbs.WCLocProtErr)
		return
	}
	st.rcvd++
	if lastPkt {
		st.done = true
		qp.req.rdAtomic--
	}
	qp.acked(now, psn)
}

// completeAtomic places the original value an ATOMIC ACKNOWLEDGE returns
// and completes the atomic.
func (qp *QP) completeAtomic(now int64, p *wire.Packet, psn wire.PSN) {
	i, ok := qp.wqeAt(psn)
	if !ok {
		return
	}
	s, st := &qp.sq.slots[i&qp.sq.mask], &qp.sqst[i&qp.sq.mask]
	if s.wr.Opcode != verbs.WRAtomicCmpAndSwp && s.wr.Opcode != verbs.WRAtomicFetchAndAdd {
		return
	}
	if st.done {
		qp.acked(now, psn)
		return
	}
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], p.AtomicAckETH().Orig())
	if !qp.scatter(s.wr.SGList, qp.pd, 0, v[:]) {
		qp.fatal(psn, verbs.WCLocProtErr)
		return
	}
	st.done = true
	qp.req.rdAtomic--
	qp.acked(now, psn)
}

// wqeAt returns the SQ index of the started WQE whose PSNs include psn.
func (qp *QP) wqeAt(psn wire.PSN) (uint64, bool) {
	q := qp.sq
	for i := q.head.Load(); i < qp.req.started; i++ {
		st := &qp.sqst[i&q.mask]
		if !psn.Before(st.firstPSN) && !psn.After(st.lastPSN) {
			return i, true
		}
	}
	return 0, false
}

// acked retires, in order, the WQEs that everything up to psn completes.
func (qp *QP) acked(now int64, psn wire.PSN) {
	r := &qp.req
	q := qp.sq
	progress := false
	old := r.ackPSN
	if psn.After(r.ackPSN) {
		r.ackPSN = psn
		progress = true
	}
	// The head is stored (an atomic store, a full barrier) before each
	// completion and at the end, not for every WQE retired.
	h := q.head.Load()
	stored := h
	for h < r.started {
		s, st := &q.slots[h&q.mask], &qp.sqst[h&q.mask]
		if isRdAtomic(s.wr.Opcode) {
			// A READ or atomic is complete when its response came, and its
			// response acknowledges it.
			if !st.done {
				if r.ackPSN.After(st.lastPSN) {
					// Acknowledged past it: its response was lost. Only what
					// came before it is acknowledged; ask again from there.
					resume := st.firstPSN.Add(st.rcvd)
					if r.ackPSN.After(resume.Sub(1)) {
						r.ackPSN = resume.Sub(1)
					}
					qp.rewind(resume)
				}
				break
			}
			if st.lastPSN.After(r.ackPSN) {
				r.ackPSN = st.lastPSN
			}
		} else if st.lastPSN.After(r.ackPSN) {
			break
		}
		signaled := s.wr.Flags&verbs.SendSignaled != 0 || qp.sigAll
		*st = sendState{}
		h++
		if r.next < h {
			r.next, r.nextPkt = h, 0
		}
		progress = true
		if signaled {
			wc := verbs.WC{WRID: s.wr.WRID, Status: verbs.WCSuccess, Opcode: wcOpcode(s.wr.Opcode), QPNum: uint32(qp.num)}
			switch s.wr.Opcode {
			case verbs.WRRDMARead:
				wc.ByteLen = s.length
			case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd, verbs.WRAtomicWrite:
				wc.ByteLen = 8
			}
			// Free the slot before the completion is seen: a PostSend
			// right after Poll must find room.
			q.head.Store(h)
			qp.e.pushWC(qp.scq, &wc, false)
			h = q.head.Load() // as a Notify callback left it (Destroy flushes)
			stored = h
		}
	}
	if h != stored {
		q.head.Store(h)
	}
	if qp.path != nil {
		qp.ccAcked(now, old)
		qp.armProbe(now)
	}
	if progress {
		r.retryLeft, r.rnrLeft = int(qp.retryCnt), int(qp.rnrRetry)
		if h == r.started {
			r.timerAt = 0
		} else if t := qp.timeoutNs(); t > 0 {
			r.timerAt = now + t
		}
	}
}

// rewind makes the requester send again from psn (go-back-N).
func (qp *QP) rewind(psn wire.PSN) {
	i, ok := qp.wqeAt(psn)
	if !ok {
		return
	}
	st := &qp.sqst[i&qp.sq.mask]
	r := &qp.req
	r.next, r.nextPkt = i, st.firstPSN.Distance(psn)
	r.resend = true
	if qp.path != nil {
		qp.ccRewind(psn)
	}
}

func (qp *QP) timeoutExpired(now int64) {
	r := &qp.req
	r.timerAt = 0
	if qp.sq.head.Load() == r.started {
		return
	}
	if r.ccOut == 0 && qp.path != nil {
		// Nothing of the QP is in the network: it went back (go-back-N)
		// and its path's congestion window has held it since. The peer
		// has nothing to answer; waiting for the window is no retry, or
		// QPs that many others outran for a while died of it.
		r.timerAt = now + qp.timeoutNs()
		return
	}
	qp.e.stats.Timeouts++
	if r.retryLeft == 0 {
		qp.fatal(r.ackPSN.Add(1), verbs.WCRetryExcErr)
		return
	}
	r.retryLeft--
	if qp.path != nil {
		qp.e.onTimeout(qp.path, now)
	}
	qp.rewind(qp.resumePSN())
	r.timerAt = now + qp.timeoutNs()
}

// resumePSN returns where a resend after a timeout starts: at the oldest
// WQE not retired, from its first response missing (READ), or its first
// packet not acknowledged.
func (qp *QP) resumePSN() wire.PSN {
	r := &qp.req
	h := qp.sq.head.Load()
	st := &qp.sqst[h&qp.sq.mask]
	resume := st.firstPSN
	switch {
	case qp.sq.slots[h&qp.sq.mask].wr.Opcode == verbs.WRRDMARead:
		resume = st.firstPSN.Add(st.rcvd)
	case !r.ackPSN.Before(st.firstPSN) && r.ackPSN.Before(st.lastPSN):
		resume = r.ackPSN.Add(1)
	}
	return resume
}

// fatal completes the WQE holding psn with status, moves the QP to ERROR
// and flushes everything after it.
func (qp *QP) fatal(psn wire.PSN, status verbs.WCStatus) {
	q := qp.sq
	i, ok := qp.wqeAt(psn)
	if !ok {
		i = q.head.Load()
	}
	qp.completeError(i, status)
	qp.setError()
	qp.flush()
}

// localError fails the WQE at SQ index i with a local error.
func (qp *QP) localError(i uint64, status verbs.WCStatus) {
	qp.completeError(i, status)
	qp.setError()
	qp.flush()
}

// completeError retires WQEs up to i: those before i as flushed (they were
// not acknowledged), i with status.
func (qp *QP) completeError(i uint64, status verbs.WCStatus) {
	q := qp.sq
	for h := q.head.Load(); h <= i && h != q.posted(); h++ {
		s := &q.slots[h&q.mask]
		wc := verbs.WC{WRID: s.wr.WRID, Status: verbs.WCWRFlushErr, Opcode: wcOpcode(s.wr.Opcode), QPNum: uint32(qp.num)}
		if h == i {
			wc.Status = status
		}
		qp.sqst[h&q.mask] = sendState{}
		q.head.Store(h + 1)
		qp.e.pushWC(qp.scq, &wc, false)
	}
}

func wcOpcode(o verbs.WROpcode) verbs.WCOpcode {
	switch o {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		return verbs.WCRDMAWrite
	case verbs.WRRDMARead:
		return verbs.WCRDMARead
	case verbs.WRAtomicCmpAndSwp:
		return verbs.WCCompSwap
	case verbs.WRAtomicFetchAndAdd:
		return verbs.WCFetchAdd
	case verbs.WRAtomicWrite:
		return verbs.WCAtomicWrite
	case verbs.WRFlush:
		return verbs.WCFlush
	case verbs.WRLocalInv:
		return verbs.WCLocalInv
	case verbs.WRBindMW:
		return verbs.WCBindMW
	case verbs.WRRegMR:
		return verbs.WCRegMR
	}
	return verbs.WCSend
}
