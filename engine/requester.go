package engine

import (
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
	resend    bool     // packets now going out are retransmissions
	unasked   int      // packets sent since the last one with AckReq
	askPSN    wire.PSN // the last packet sent that asked for an ACK (AckAwaited)
	// Congestion control (ccPath): sndNxt follows the last PSN sent (a
	// rewind takes it back), ccOut is what the QP counts in its path's
	// inflight, and rttPSN, sent at rttAt (0: none), times a round trip.
	sndNxt wire.PSN
	sndMax wire.PSN // the PSN after the last ever sent: a packet before it is a retransmission
	ccOut  int
	rttPSN wire.PSN
	rttAt  int64
	// probeAt is when the tail loss probe resends (ccProbe), 0: not armed.
	probeAt  int64
	probeSet int64 // when probeAt was set
	probes   int   // probes sent since an ACK last made progress
	// probeWaited: the probe found no confirmation and waits longer.
	probeWaited bool
	// ccWaiting: the QP is in its path's queue of QPs the window held
	// (ccPath.waitq).
	ccWaiting bool
	// ccTurn is how many more packets the QP may send in its turn at the
	// window (ccPath.admit) before it queues again.
	ccTurn int
}

func (qp *QP) timeoutNs() int64 {
	if qp.timeout == 0 {
		return 0
	}
	return 4096 << qp.timeout
}

func isRdAtomic(o verbs.WROpcode) bool {
	return o == verbs.WRRDMARead || o == verbs.WRAtomicCmpAndSwp || o == verbs.WRAtomicFetchAndAdd || isA19(o)
}

// reqReady reports whether the requester has a request packet it may send
// now (a cheap approximation of reqOutput's conditions).
func (qp *QP) reqReady() bool {
	r := &qp.req
	return qp.state == verbs.QPSRTS && r.rnrUntil == 0 && r.next != qp.sq.posted() && qp.windowOpen(qp.nextPSN(), 1, false)
}

// nextPSN returns the PSN of the request packet the requester sends next:
// within the WQE at r.next if it started, else the next PSN to give.
func (qp *QP) nextPSN() wire.PSN {
	r := &qp.req
	if r.next < r.started {
		return qp.sqst[r.next&qp.sq.mask].firstPSN.Add(r.nextPkt)
	}
	return r.psn
}

// windowOpen reports whether the packet at psn, covering span PSNs, may go
// now: no more than Config.Window packets of the QP unacknowledged with it,
// retransmissions included (a go-back-N resends at most a window), and
// room in its path's congestion window (ccPath.admit) and its pacing
// (paced), whose tokens a packet about to go takes.
func (qp *QP) windowOpen(psn wire.PSN, span uint32, take bool) bool {
	r := &qp.req
	if psn.Diff(r.ackPSN) > int32(qp.e.cfg.Window) { // signed: a READ asked again may sit before ackPSN
		return false
	}
	if p := qp.path; p != nil && psn.Add(span).After(r.sndNxt) {
		if span == 1 && qp.sparse() {
			return true // see ccPath: a message of one packet, nothing in flight
		}
		return qp.e.paced(p, int(span), false) && p.admit(qp, int(span), take) && (!take || qp.e.paced(p, int(span), true))
	}
	return true
}

// reqOutput builds the next RC request packet (rdma_rxe's rxe_req.c): the
// WQE at r.next given its PSNs when it starts (startWQE), the packet's
// headers and payload built, the packet sealed, the cursor and
// the local ACK timer advanced.
//
// It is the sender's hot path and stays one function of about 140 lines
// on purpose: split into a prologue (the WQE and the window), a payload
// gather and an epilogue (the counters, the cursor, the timer), three
// calls a packet the compiler does not inline, it cost 6 ns a work request
// in BenchmarkPostPoll (169 against 163 ns, 8 interleaved runs).
func (qp *QP) reqOutput(now int64, buf []byte) (int, bool) {
	r := &qp.req
	q := qp.sq
	if r.rnrUntil != 0 {
		return 0, false
	}
	if r.next == q.posted() {
		return 0, false
	}
	i := r.next & q.mask
	s, st := &q.slots[i], &qp.sqst[i]
	wr := &s.wr
	if wr.Opcode >= verbs.WRLocalInv && isLocalOp(wr.Opcode) { // LOCAL_INV, BIND_MW, REG_MR: executed, no packet
		if !qp.reqLocal(now) {
			return 0, false
		}
		i = r.next & q.mask
		s, st = &q.slots[i], &qp.sqst[i]
		wr = &s.wr
	}
	span := uint32(1)
	if wr.Opcode == verbs.WRRDMARead {
		span = max((s.length-min(r.nextPkt*uint32(qp.mtu), s.length)+uint32(qp.mtu)-1)/uint32(qp.mtu), 1)
	}
	if psn := qp.nextPSN(); !qp.windowOpen(psn, span, true) {
		return 0, false // window full: the QP's, or its path's
	}
	if !st.started {
		if !isRdAtomic(wr.Opcode) && wr.Flags&verbs.SendFence == 0 && s.length <= uint32(qp.mtu) {
			// startWQE's work for a one-packet WQE that waits for nothing,
			// without its call.
			*st = sendState{started: true, firstPSN: r.psn, lastPSN: r.psn, npkts: 1}
			r.psn = r.psn.Add(1)
			r.started = r.next + 1
		} else if !qp.startWQE(s, st) {
			return 0, false
		}
	}
	payload, last := 0, true
	k := r.nextPkt
	h := &qp.e.hdr
	*h = wire.Header{PKey: wire.DefaultPKey, DestQP: qp.destQPN, PSN: st.firstPSN.Add(k)}
	if isRdAtomic(wr.Opcode) {
		rdAtomicHeader(h, s, k*uint32(qp.mtu))
		if wr.Opcode == verbs.WRAtomicWrite { // its 8 bytes
			if payload = 8; !qp.gather(i, 0, buf[h.Opcode.Info().HeaderLen:][:8]) {
				qp.localError(r.next, verbs.WCLocProtErr)
				return 0, false
			}
		}
	} else {
		// A packet of a SEND or WRITE, the sender's hot path, in line: its
		// headers, and its payload gathered into buf; a gather that fails
		// fails the WQE.
		mtu := uint32(qp.mtu)
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
		// AckReq: see askLast and ccPath.closes; and the first packet on
		// a path with nothing in flight asks, so that the path's least
		// round trip is timed on a packet no window of its own queues
		// behind (senders that start together timed their first packets
		// behind their first windows, took that queue for the path's
		// delay, and held the bottleneck's queue that high).
		r.unasked++
		if h.AckReq = r.unasked >= qp.e.cfg.AckEvery || last && qp.askLast(s) || qp.path != nil && (qp.path.closes(qp.e.rrRun, qp.runQuantum(), r.ccTurn) || qp.path.timeIdle()); h.AckReq {
			r.unasked = 0
		}
		if payload > 0 {
			dst := buf[h.Opcode.Info().HeaderLen:][:payload]
			var gathered bool
			if len(wr.SGList) == 1 && wr.Flags&verbs.SendInline == 0 {
				// One SGE (in s.sge), the common case: gather's work
				// without its call.
				g := s.sge[0]
				b := sgeBytes(qp.e.MRs.lookup(g.LKey), qp.pd, g, off)
				if qp.e.gather && payload >= GatherMin && len(b) >= payload {
					qp.e.ext, gathered = b[:payload], true // left where it lies (OutputGather)
				} else {
					gathered = b != nil && copy(dst, b) == payload
				}
			} else {
				gathered = qp.gather(i, off, dst)
			}
			if !gathered {
				qp.localError(r.next, verbs.WCLocProtErr)
				return 0, false
			}
		}
	}
	n := qp.e.finish(buf, payload, qp.remote, qp.sport)
	if h.AckReq {
		r.askPSN = h.PSN
	}
	if qp.path != nil {
		if r.ccOut == 0 && r.probes == 0 {
			// The QP had nothing in the network (its window held it): the
			// local ACK timer runs from this packet (RFC 6298 5.1), not
			// from the wait, which a QP among many sharing a window spent
			// (4 ms of waiting fired 2,323 timeouts in a simulated incast).
			// Not when a tail loss probe took it back: the probes of a
			// peer that answers nothing, every few milliseconds, kept the
			// timer from ever firing, and the QP from RETRY_EXC_ERR
			// (TestProbesKeepNoTimer).
			r.timerAt = 0
		}
		qp.ccSent(now, h.PSN, span, h.AckReq)
		qp.armProbe(now)
	}
	if r.resend && h.PSN.Before(r.sndMax) {
		qp.e.stats.Retransmits++ // sent before: packets of a WQE started but never sent are not
	}
	if end := h.PSN.Add(span); end.After(r.sndMax) {
		r.sndMax = end
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
	return n, true
}

// startWQE gives the WQE at r.next its PSNs, one per packet, unless it must
// wait: a READ or atomic beyond max_rd_atomic, or a fenced WQE behind one.
func (qp *QP) startWQE(s *sendSlot, st *sendState) bool {
	r := &qp.req
	wr := &s.wr
	if isRdAtomic(wr.Opcode) && r.rdAtomic >= qp.maxRdAtomic {
		return false
	}
	if wr.Flags&verbs.SendFence != 0 && r.rdAtomic > 0 {
		return false
	}
	n := uint32(1)
	switch wr.Opcode {
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
	default:
		if s.length > uint32(qp.mtu) { // no division for a one-packet message
			n = (s.length + uint32(qp.mtu) - 1) / uint32(qp.mtu)
		}
	}
	*st = sendState{started: true, firstPSN: r.psn, lastPSN: r.psn.Add(n - 1), npkts: n}
	r.psn = r.psn.Add(n)
	r.started = r.next + 1
	if isRdAtomic(wr.Opcode) {
		r.rdAtomic++
	}
	return true
}

// rdAtomicHeader fills h, its PSN set, for the packet of a READ or atomic
// WQE at byte off of the READ (a READ asked again from a lost response on
// asks for the rest). Out of line: a sender's hot path is SEND and WRITE.
//
//go:noinline
func rdAtomicHeader(h *wire.Header, s *sendSlot, off uint32) {
	wr := &s.wr
	h.AckReq = true
	switch wr.Opcode {
	case verbs.WRRDMARead:
		h.Opcode = wire.RCReadRequest
		h.RETH = wire.RETHFields{VA: wr.RemoteAddr + uint64(off), RKey: wr.RKey, DMALen: s.length - min(off, s.length)}
		return
	case verbs.WRAtomicWrite:
		h.Opcode = wire.RCAtomicWrite
		h.RETH = wire.RETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, DMALen: 8}
		return
	case verbs.WRFlush:
		h.Opcode, h.FlushType, h.FlushLevel = wire.RCFlush, wr.FlushType, wr.FlushLevel
		h.RETH = wire.RETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, DMALen: wr.FlushLen}
		return
	}
	h.Opcode = wire.RCFetchAdd
	h.AtomicETH = wire.AtomicFields{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.CompareAdd}
	if wr.Opcode == verbs.WRAtomicCmpAndSwp {
		h.Opcode = wire.RCCompareSwap
		h.AtomicETH.SwapAdd, h.AtomicETH.Compare = wr.Swap, wr.CompareAdd
	}
}

// askLast and reqOutput decide the AckReq bit of a SEND's or WRITE's
// packet: every AckEvery-th packet asks, and so does a message's last
// packet when it ends a burst (no WQE is queued behind it), when its WQE
// is signaled (the application waits for that completion), when no
// packet that asked is awaiting its ACK (AckAwaited), or on a
// retransmission. The last packet of a message with more queued behind it
// asks for nothing otherwise: the ACK of a later one acknowledges every
// PSN before it. rdma_rxe asks on
// every message's last packet; a 64 KiB WRITE stream between two
// namespaces then drew 0.68 ACKs a WRITE (a responder merges those of a
// batch), each a system call and a datagram on both sides, where one every
// AckEvery packets, or a round trip, is enough: 0.28. The window
// (Config.Window, at least 2*AckEvery) never fills with packets that ask
// for nothing, and a READ or atomic that a later WQE waits for (a fence,
// max_rd_atomic) is answered, which acknowledges the PSNs before it.
func (qp *QP) askLast(s *sendSlot) bool {
	r := &qp.req
	return r.resend || r.next+1 == qp.sq.posted() || s.wr.Flags&verbs.SendSignaled != 0 || qp.sigAll || !qp.AckAwaited()
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
