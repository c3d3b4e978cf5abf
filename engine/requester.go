package engine

import (
	"encoding/binary"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// sendState is the engine's progress on one send WQE.
type sendState struct {
	started  bool
	done     bool // READ/atomic: its response arrived
	firstPSN wire.PSN
	lastPSN  wire.PSN
	npkts    uint32 // PSNs the WQE uses
	rcvd     uint32 // READ: response packets placed
}

// requester is the send side of a QP: which WQE and packet go out next.
type requester struct {
	psn       wire.PSN // PSN of the next new packet
	ackPSN    wire.PSN // last PSN acknowledged
	next      uint64   // SQ index of the WQE to send from
	nextPkt   uint32   // packet index within it
	started   uint64   // SQ index of the first WQE not yet given PSNs
	rdAtomic  int      // READs and atomics outstanding
	timerAt   int64    // local ACK timer, 0 when stopped
	rnrUntil  int64    // sending paused after an RNR NAK until then
	retryLeft int
	rnrLeft   int
	resend    bool // packets now going out are retransmissions
}

func (qp *QP) timeoutNs() int64 {
	if qp.timeout == 0 {
		return 0
	}
	return 4096 << qp.timeout
}

func isRdAtomic(o verbs.WROpcode) bool {
	return o == verbs.WRRDMARead || o == verbs.WRAtomicCmpAndSwp || o == verbs.WRAtomicFetchAndAdd
}

// output produces the QP's next packet: responses first, then requests.
func (qp *QP) output(now int64, buf []byte) (int, bool) {
	if qp.typ == verbs.QPTRC && qp.state >= verbs.QPSRTR && qp.state != verbs.QPSErr {
		if n, ok := qp.respOutput(now, buf); ok {
			return n, true
		}
	}
	if qp.state == verbs.QPSErr {
		qp.flush()
		if n, ok := qp.respOutput(now, buf); ok { // a last NAK
			return n, true
		}
		return 0, false
	}
	if qp.state != verbs.QPSRTS {
		return 0, false
	}
	if qp.typ == verbs.QPTUD {
		return qp.udOutput(now, buf)
	}
	return qp.reqOutput(now, buf)
}

// reqReady reports whether the requester has a request packet it may send
// now (a cheap approximation of reqOutput's conditions).
func (qp *QP) reqReady() bool {
	r := &qp.req
	return qp.state == verbs.QPSRTS && r.rnrUntil == 0 && r.next != qp.sq.tail.Load() &&
		(uint32(r.ackPSN.Distance(r.psn)) <= uint32(qp.e.cfg.Window) || r.next < r.started)
}

// reqOutput builds the next RC request packet.
func (qp *QP) reqOutput(now int64, buf []byte) (int, bool) {
	r := &qp.req
	q := qp.sq
	if r.rnrUntil != 0 {
		return 0, false
	}
	if r.next == q.tail.Load() {
		return 0, false
	}
	if uint32(r.ackPSN.Distance(r.psn)) > uint32(qp.e.cfg.Window) && r.next >= r.started {
		return 0, false // window full
	}
	i := r.next & q.mask
	s, st := &q.slots[i], &qp.sqst[i]
	wr := &s.wr
	if !st.started {
		if isRdAtomic(wr.Opcode) && r.rdAtomic >= qp.maxRdAtomic {
			return 0, false
		}
		if wr.Flags&verbs.SendFence != 0 && r.rdAtomic > 0 {
			return 0, false
		}
		n := uint32(1)
		switch wr.Opcode {
		case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		default:
			if s.length > 0 {
				n = (s.length + uint32(qp.mtu) - 1) / uint32(qp.mtu)
			}
		}
		*st = sendState{started: true, firstPSN: r.psn, lastPSN: r.psn.Add(n - 1), npkts: n}
		r.psn = r.psn.Add(n)
		r.started = r.next + 1
		if isRdAtomic(wr.Opcode) {
			r.rdAtomic++
		}
	}
	h := &qp.e.hdr
	*h = wire.Header{PKey: wire.DefaultPKey, DestQP: qp.destQPN}
	k := r.nextPkt
	h.PSN = st.firstPSN.Add(k)
	mtu := uint32(qp.mtu)
	payload := 0
	last := true
	switch wr.Opcode {
	case verbs.WRRDMARead:
		off := k * mtu
		h.Opcode = wire.RCReadRequest
		h.RETH = wire.RETHFields{VA: wr.RemoteAddr + uint64(off), RKey: wr.RKey, DMALen: s.length - min(off, s.length)}
		h.AckReq = true
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		h.Opcode = wire.RCFetchAdd
		h.AtomicETH = wire.AtomicFields{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.CompareAdd}
		if wr.Opcode == verbs.WRAtomicCmpAndSwp {
			h.Opcode = wire.RCCompareSwap
			h.AtomicETH.SwapAdd, h.AtomicETH.Compare = wr.Swap, wr.CompareAdd
		}
		h.AckReq = true
	default:
		off := k * mtu
		payload = int(min(mtu, s.length-min(off, s.length)))
		first := k == 0
		last = k+1 >= st.npkts
		h.Opcode = reqOpcode(wr.Opcode, first, last)
		if first && (wr.Opcode == verbs.WRRDMAWrite || wr.Opcode == verbs.WRRDMAWriteWithImm) {
			h.RETH = wire.RETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, DMALen: s.length}
		}
		if last {
			h.Imm, h.IETH = wr.Imm, wr.InvalidateRKey
			h.SE = wr.Flags&verbs.SendSolicited != 0
		}
		h.AckReq = last || (k+1)%uint32(qp.e.cfg.AckEvery) == 0
		hl := h.Opcode.Info().HeaderLen
		if payload > 0 && !qp.gather(s, off, buf[hl:hl+payload]) {
			qp.localError(r.next, verbs.WCLocProtErr)
			return 0, false
		}
	}
	n := qp.e.finish(buf, payload, qp.remote, qp.sport)
	if r.resend {
		qp.e.stats.Retransmits++
	}
	if wr.Opcode == verbs.WRRDMARead || last {
		r.next++
		r.nextPkt = 0
		if r.next >= r.started {
			r.resend = false
		}
	} else {
		r.nextPkt++
	}
	if r.timerAt == 0 && qp.timeoutNs() > 0 {
		r.timerAt = now + qp.timeoutNs()
	}
	qp.lastDst = qp.remote
	return n, true
}

func reqOpcode(o verbs.WROpcode, first, last bool) wire.Opcode {
	var base wire.Opcode // FIRST of the family
	switch o {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		base = wire.RCWriteFirst
	default:
		base = wire.RCSendFirst
	}
	imm := o == verbs.WRSendWithImm || o == verbs.WRRDMAWriteWithImm
	switch {
	case first && last:
		if o == verbs.WRSendWithInv {
			return wire.RCSendOnlyInvalidate
		}
		if imm {
			return base + 5
		}
		return base + 4
	case first:
		return base
	case last:
		if o == verbs.WRSendWithInv {
			return wire.RCSendLastInvalidate
		}
		if imm {
			return base + 3
		}
		return base + 2
	}
	return base + 1
}

// gather copies the WQE's bytes [off, off+len(dst)) into dst.
func (qp *QP) gather(s *sendSlot, off uint32, dst []byte) bool {
	if s.wr.Flags&verbs.SendInline != 0 {
		if int(off)+len(dst) > len(s.inline) {
			return false
		}
		copy(dst, s.inline[off:])
		return true
	}
	for _, g := range s.sges {
		if len(dst) == 0 {
			break
		}
		if off >= g.Length {
			off -= g.Length
			continue
		}
		b := sgeBytes(qp.e.MRs.lookup(g.LKey), qp.pd, g, off)
		if b == nil {
			return false
		}
		c := copy(dst, b)
		dst = dst[c:]
		off = 0
	}
	return len(dst) == 0
}

// scatter copies src into the SGEs from byte off, requiring LOCAL_WRITE.
func (qp *QP) scatter(sges []verbs.SGE, pd uint32, off uint32, src []byte) bool {
	for _, g := range sges {
		if len(src) == 0 {
			break
		}
		if off >= g.Length {
			off -= g.Length
			continue
		}
		m := qp.e.MRs.lookup(g.LKey)
		if m == nil || m.access&verbs.AccessLocalWrite == 0 {
			return false
		}
		b := sgeBytes(m, pd, g, off)
		if b == nil {
			return false
		}
		c := copy(b, src)
		src = src[c:]
		off = 0
	}
	return len(src) == 0
}

// complete handles a response: ACK/NAK, READ response, ATOMIC ACKNOWLEDGE.
func (qp *QP) complete(now int64, p *wire.Packet) {
	if qp.state != verbs.QPSRTS && qp.state != verbs.QPSSQD {
		return
	}
	r := &qp.req
	psn := p.BTH().PSN()
	// Responses for PSNs never sent are bogus.
	if !psn.Before(r.psn) {
		return
	}
	switch p.Info.Operation {
	case wire.OpAcknowledge:
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
				qp.rewind(psn)
			case wire.NAKInvalidRequest:
				qp.fatal(psn, verbs.WCRemInvReqErr)
			case wire.NAKRemoteAccess:
				qp.fatal(psn, verbs.WCRemAccessErr)
			default:
				qp.fatal(psn, verbs.WCRemOpErr)
			}
		}
	case wire.OpReadResponse:
		i, ok := qp.wqeAt(psn)
		if !ok {
			return
		}
		s, st := &qp.sq.slots[i&qp.sq.mask], &qp.sqst[i&qp.sq.mask]
		if s.wr.Opcode != verbs.WRRDMARead {
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
		if !qp.scatter(s.sges, qp.pd, st.rcvd*uint32(qp.mtu), p.Payload()) {
			qp.fatal(psn, verbs.WCLocProtErr)
			return
		}
		st.rcvd++
		if lastPkt {
			st.done = true
			qp.req.rdAtomic--
		}
		qp.acked(now, psn)
	case wire.OpAtomicAcknowledge:
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
		if !qp.scatter(s.sges, qp.pd, 0, v[:]) {
			qp.fatal(psn, verbs.WCLocProtErr)
			return
		}
		st.done = true
		qp.req.rdAtomic--
		qp.acked(now, psn)
	}
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
	if psn.After(r.ackPSN) {
		r.ackPSN = psn
		progress = true
	}
	for h := q.head.Load(); h < r.started; h = q.head.Load() {
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
		wc := verbs.WC{WRID: s.wr.WRID, Status: verbs.WCSuccess, Opcode: wcOpcode(s.wr.Opcode), QPNum: uint32(qp.num)}
		switch s.wr.Opcode {
		case verbs.WRRDMARead:
			wc.ByteLen = s.length
		case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
			wc.ByteLen = 8
		}
		// Free the slot before the completion is seen: a PostSend right
		// after Poll must find room.
		*st = sendState{}
		q.head.Store(h + 1)
		if signaled {
			qp.e.pushWC(qp.scq, &wc, false)
		}
		if r.next < h+1 {
			r.next, r.nextPkt = h+1, 0
		}
		progress = true
	}
	if progress {
		r.retryLeft, r.rnrLeft = int(qp.retryCnt), int(qp.rnrRetry)
		if q.head.Load() == r.started {
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
}

func (qp *QP) timeoutExpired(now int64) {
	r := &qp.req
	r.timerAt = 0
	if qp.sq.head.Load() == r.started {
		return
	}
	qp.e.stats.Timeouts++
	if r.retryLeft == 0 {
		qp.fatal(r.ackPSN.Add(1), verbs.WCRetryExcErr)
		return
	}
	r.retryLeft--
	// Resend from the oldest WQE not retired: from its first response
	// missing (READ), or its first packet not acknowledged.
	h := qp.sq.head.Load()
	st := &qp.sqst[h&qp.sq.mask]
	resume := st.firstPSN
	switch {
	case qp.sq.slots[h&qp.sq.mask].wr.Opcode == verbs.WRRDMARead:
		resume = st.firstPSN.Add(st.rcvd)
	case !r.ackPSN.Before(st.firstPSN) && r.ackPSN.Before(st.lastPSN):
		resume = r.ackPSN.Add(1)
	}
	qp.rewind(resume)
	r.timerAt = now + qp.timeoutNs()
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
	for h := q.head.Load(); h <= i && h != q.tail.Load(); h++ {
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
