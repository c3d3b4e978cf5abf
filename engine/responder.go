package engine

import (
	"sync/atomic"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// Responder outputs, in the order they must go out.
const (
	itemACK = iota + 1
	itemNAK
	itemRead
	itemAtomic
	itemCNP // a congestion notification (RoCEv2 Annex A17)
)

type respItem struct {
	kind  uint8
	psn   wire.PSN
	syn   wire.Syndrome
	msn   uint32
	data  []byte // READ: the bytes to return
	rkey  uint32 // READ: its R_Key, checked before every response packet
	npkts uint32
	sent  uint32
	orig  uint64 // atomic: the value before the operation
}

type atomicReplay struct {
	psn   wire.PSN
	orig  uint64
	valid bool
}

const respQueueLen = 64

// A gap in the request PSNs is NAKed once, as IBA (9.7.5.1.2) and rdma_rxe
// do, and the requests behind it dropped silently; but when the request
// resent for the NAK is lost too (a congested queue drops the resend as it
// dropped the first), the requester hears nothing more and waits for its
// local ACK timer (67 ms by default): through a 500 Mbit/s bottleneck with a
// 64 KB queue, 2,102 timeouts for 181 k packets. So respond NAKs the gap
// again when a request arrives behind the last one seen beyond it, or that
// one comes again: on a path that keeps order, only a resend round (or a
// tail loss probe, which sends the last packet again) does that, and the
// packet missing did not come, or the NAK was lost.

// responder is the receive side of an RC QP.
type responder struct {
	epsn   wire.PSN // next expected request PSN
	msn    uint32   // messages completed
	nakSeq bool     // a PSN-sequence NAK is out for the current gap
	oosMax wire.PSN // the last request PSN seen beyond the gap
	rnrPSN wire.PSN // PSN an RNR NAK was sent for
	rnr    bool

	// The message being received.
	inMsg   wire.Operation
	recv    *recvSlot // the receive in use: &cur while a SEND is received
	cur     recvSlot  // a copy, taken off the (shared) queue when the SEND starts
	recvOff uint32
	wdst    []byte
	wkey    uint32 // R_Key of the WRITE in progress: checked on every packet
	woff    uint32
	wlen    uint32

	q          [respQueueLen]respItem
	qh, qt     int // queue head (next out) and tail, as counts
	replay     []atomicReplay
	replayNext int
	ackDue     int64 // when a held ACK (the only queued item) must go out; 0: none held
	stream     bool  // a message ended without AckReq since the last ACK queued
	cnpAt      int64 // when the last CNP was queued (congested)

	// UC: ucDrop, packets are dropped up to the next that starts a
	// message (one was lost); ucPeeked, recv is the head of the QP's own
	// receive queue, popped only when the message completes.
	ucDrop   bool
	ucPeeked bool

	// cqLost: a receive completion found the receive CQ full (overrun).
	// The message is not acknowledged and nothing more is taken; the
	// engine moves the QP to ERROR when it reports the overrun (as
	// rdma_rxe's responder goes to RESPST_ERR_CQ_OVERFLOW).
	cqLost bool
}

func (r *responder) queued() int { return r.qt - r.qh }

// nextMSN counts a completed message: the MSN is 24 bits and wraps (an
// MSN past wire.MSNMask would make every later ACK unbuildable).
func (r *responder) nextMSN() { r.msn = (r.msn + 1) & wire.MSNMask }

func (r *responder) push(it respItem) bool {
	if r.queued() >= respQueueLen {
		return false
	}
	r.q[r.qt%respQueueLen] = it
	r.qt++
	return true
}

// queueACK adds an ACK, merged into a queued ACK not yet sent.
func (qp *QP) queueACK(psn wire.PSN, hold bool) {
	if !qp.resp.mergeACK(psn) {
		qp.pushACK(psn, hold)
	}
}

// mergeACK merges an ACK of psn into the last queued item if that is an ACK
// not yet sent, and reports whether it did (small enough to inline: most
// ACKs of a batch merge).
func (r *responder) mergeACK(psn wire.PSN) bool {
	if r.qt == r.qh {
		return false
	}
	last := &r.q[(r.qt-1)%respQueueLen]
	if last.kind != itemACK {
		return false
	}
	last.psn, last.msn = psn, r.msn
	return true
}

// pushACK queues an ACK of psn as a new item.
func (qp *QP) pushACK(psn wire.PSN, hold bool) {
	r := &qp.resp
	r.push(respItem{kind: itemACK, psn: psn, syn: wire.ACKUnlimited, msn: r.msn})
	if d := qp.e.cfg.AckDelay; hold && d > 0 && r.queued() == 1 {
		r.ackDue = max(qp.e.now+d, 1)
	}
}

// holdACK reports whether the responder's only queued item, a plain ACK,
// is still held back (Config.AckDelay): its delay has not ended and the
// requester has nothing to send that it could go out with.
func (qp *QP) holdACK(now int64) bool {
	r := &qp.resp
	if r.ackDue == 0 {
		return false
	}
	if now >= r.ackDue || r.queued() != 1 || r.q[r.qh%respQueueLen].kind != itemACK || qp.reqReady() {
		r.ackDue = 0
		return false
	}
	return true
}

func (qp *QP) queueNAK(psn wire.PSN, syn wire.Syndrome) {
	r := &qp.resp
	if syn.IsRNR() {
		qp.e.stats.RNRSent++
	} else {
		qp.e.stats.NAKsSent++
	}
	r.push(respItem{kind: itemNAK, psn: psn, syn: syn, msn: r.msn})
}

// respFatal NAKs psn and moves the QP to ERROR (IBA 9.9.3: responder class
// C and D errors).
func (qp *QP) respFatal(psn wire.PSN, syn wire.Syndrome) {
	qp.queueNAK(psn, syn)
	qp.setError()
	qp.respErrorEvent(syn)
}

func (qp *QP) recvQueue() *recvQueue {
	if qp.srq != nil {
		return qp.srq
	}
	return qp.rq
}

// respond handles a request packet, as rdma_rxe's rxe_resp.c does: the PSN
// checked (a duplicate answered by duplicate, a gap NAKed once), the opcode
// sequence and the packet validated, then the operation executed by its
// family's function and, if the requester asked, acknowledged. perr is
// Parse's ErrInvalidRequest, if any.
func (qp *QP) respond(now int64, p *wire.Packet, perr error) {
	r := &qp.resp
	if r.cqLost {
		return
	}
	bth := p.BTH()
	psn := bth.PSN()
	if psn != r.epsn {
		qp.outOfSequence(p, psn)
		return
	}
	r.nakSeq = false
	if r.queued() >= respQueueLen-1 {
		return // no room to answer: the requester will retry
	}
	// An ONLY packet within the path MTU passes CheckPMTU: the common case
	// skips its call.
	if perr != nil || (p.Info.Position != wire.PosOnly || p.PayloadLen > qp.mtu) && p.CheckPMTU(qp.mtu) != nil {
		qp.respFatal(psn, wire.NAKInvalidRequest)
		return
	}
	info := p.Info
	pos := info.Position
	starts := pos == wire.PosFirst || pos == wire.PosOnly
	ends := pos == wire.PosLast || pos == wire.PosOnly
	op := info.Operation
	if (op == wire.OpSend || op == wire.OpWrite) && (starts == (r.inMsg != wire.OpNone) || (!starts && r.inMsg != op)) {
		// A FIRST inside a message, or a MIDDLE/LAST outside one.
		qp.respFatal(psn, wire.NAKInvalidRequest)
		return
	}
	switch op {
	case wire.OpSend:
		if !qp.respSend(p, psn, starts, ends) {
			return
		}
	case wire.OpWrite:
		if pos == wire.PosOnly && !info.Imm {
			// A WRITE ONLY without immediate, the common case, in line:
			// when the region grants it and the payload fills its DMA length
			// (as Parse holds it to), respWrite's checks pass, and no state
			// outlives the packet. Otherwise respWrite says what is wrong.
			reth := p.RETH()
			dst := qp.e.MRs.resolve(reth.RKey(), qp.pd, reth.VA(), reth.DMALen(), verbs.AccessRemoteWrite)
			if pl := p.Payload(); qp.access&verbs.AccessRemoteWrite != 0 && (dst != nil || reth.DMALen() == 0) && len(pl) == len(dst) {
				copy(dst, pl)
				r.nextMSN()
				break
			}
		}
		if !qp.respWrite(p, psn, starts, ends) {
			return
		}
	case wire.OpReadRequest:
		qp.respRead(p, psn)
		return // the READ response is the acknowledgement
	case wire.OpCompareSwap, wire.OpFetchAdd:
		qp.respAtomic(p, psn)
		return // the ATOMIC ACKNOWLEDGE is the acknowledgement
	case wire.OpAtomicWrite, wire.OpFlush:
		qp.respA19(p, psn)
		return // the empty READ RESPONSE is the acknowledgement
	default:
		qp.respFatal(psn, wire.NAKInvalidRequest)
		return
	}
	if r.cqLost {
		return // the message's completion was lost: it is not acknowledged
	}
	r.epsn = psn.Add(1)
	// The acknowledgement, in line: as a call of its own (respAck) it cost
	// 2 ns a work request in BenchmarkPostPoll (165.5 against 163.5 ns, 10
	// interleaved runs), which is why respond runs past 80 lines.
	if !bth.AckReq() {
		// A message that asks for no ACK leaves it to a later one: the
		// requester has more queued (a stream), which awaits no reply, so
		// an ACK held for one goes (as below).
		if ends {
			r.stream, r.ackDue = true, 0
		}
		return
	}
	// The ACK of a message that completed a receive may wait for the
	// reply the application is likely to post (Config.AckDelay), unless
	// messages that asked for none came before it.
	if !r.mergeACK(psn) { // queueACK, the common case inlined
		qp.pushACK(psn, ends && (op == wire.OpSend || info.Imm) && !r.stream)
	} else {
		// A second message behind a held ACK: a stream, which awaits no
		// reply. Holding its ACK would only stall the sender's window
		// (send_bw 4 KiB between two namespaces: 1.1-1.3 against 3 GB/s
		// when the hold's timer fired late).
		r.ackDue = 0
	}
	r.stream = false
}

// outOfSequence answers a request packet p whose PSN psn is not the one
// the responder expects: one beyond it counts as out of sequence and is
// answered with a NAK PSN sequence error; one before it is a duplicate
// (duplicate's answer).
func (qp *QP) outOfSequence(p *wire.Packet, psn wire.PSN) {
	r := &qp.resp
	if psn.Diff(r.epsn) < 0 {
		qp.duplicate(p, psn)
		return
	}
	qp.e.stats.OutOfSequence++
	if !r.nakSeq || !psn.After(r.oosMax) {
		// Once per gap, as rdma_rxe; again when a packet behind the last
		// seen comes, or that one again: the requester resends (go-back-N
		// from the NAK'd PSN, or a tail loss probe of its last packet), and
		// the resend of the PSN missing, or the NAK, was lost too.
		r.nakSeq = true
		qp.queueNAK(r.epsn, wire.NAKPSNSequence)
	}
	r.oosMax = psn
}

// takeRecv takes receive s off its queue into the responder's own copy,
// which the message then uses: an SRQ feeds other QPs, whose messages may
// start before this one ends.
func (qp *QP) takeRecv(s *recvSlot) {
	r := &qp.resp
	r.cur.wrid, r.cur.length = s.wrid, s.length
	r.cur.sges = append(r.cur.sges[:0], s.sges...)
	qp.recvQueue().pop()
	r.recv = &r.cur
}

// respSend executes a packet of a SEND (rxe_resp.c's send_data_in): the
// first takes a receive (or RNR NAKs), each is scattered into it, the last
// completes it. It reports whether the packet was executed, to be
// acknowledged.
func (qp *QP) respSend(p *wire.Packet, psn wire.PSN, starts, ends bool) bool {
	r := &qp.resp
	info := p.Info
	if starts {
		s := qp.recvQueue().peek()
		if s == nil {
			qp.queueNAK(psn, wire.RNRNAK(qp.minRNRTimer))
			return false
		}
		qp.takeRecv(s)
		r.recvOff, r.inMsg = 0, wire.OpSend
	}
	pl := p.Payload()
	if r.recvOff+uint32(len(pl)) > r.recv.length {
		qp.recvDone(verbs.WC{Status: verbs.WCLocLenErr, Opcode: verbs.WCRecv}, false)
		qp.respFatal(psn, wire.NAKInvalidRequest)
		return false
	}
	if !qp.scatter(r.recv.sges, qp.pd, r.recvOff, pl) {
		qp.recvDone(verbs.WC{Status: verbs.WCLocProtErr, Opcode: verbs.WCRecv}, false)
		qp.respFatal(psn, wire.NAKRemoteOperation)
		return false
	}
	r.recvOff += uint32(len(pl))
	if ends && info.Invalidate && qp.e.MRs.invalidate(p.IETH().RKey(), qp.pd) != nil {
		// rxe's RESPST_ERR_INVALIDATE_RKEY: class J, an invalid request.
		qp.recvDone(verbs.WC{Status: verbs.WCRemInvReqErr, Opcode: verbs.WCRecv}, false)
		qp.respFatal(psn, wire.NAKInvalidRequest)
		return false
	}
	if ends {
		wc := verbs.WC{Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: r.recvOff}
		if im := p.ImmDt(); im != nil {
			wc.Imm, wc.Flags = im.Imm(), verbs.WCFlagWithImm
		}
		if ie := p.IETH(); ie != nil {
			wc.InvalidatedRKey, wc.Flags = ie.RKey(), verbs.WCFlagWithInv
		}
		qp.recvDone(wc, p.BTH().SE())
		r.nextMSN()
	}
	return true
}

// respWrite executes a packet of an RDMA WRITE (rxe_resp.c's check_rkey and
// write_data_in): the first resolves the R_Key, each is copied in, the last
// of a WRITE with immediate consumes a receive. It reports whether the
// packet was executed, to be acknowledged.
func (qp *QP) respWrite(p *wire.Packet, psn wire.PSN, starts, ends bool) bool {
	r := &qp.resp
	info := p.Info
	if starts {
		reth := p.RETH()
		if info.Position == wire.PosOnly && info.Imm && qp.recvQueue().peek() == nil {
			qp.queueNAK(psn, wire.RNRNAK(qp.minRNRTimer))
			return false
		}
		dst := qp.e.MRs.resolveFor(qp, reth.RKey(), reth.VA(), reth.DMALen(), verbs.AccessRemoteWrite)
		if qp.access&verbs.AccessRemoteWrite == 0 || (dst == nil && reth.DMALen() > 0) {
			qp.respFatal(psn, wire.NAKRemoteAccess)
			return false
		}
		r.wdst, r.wkey, r.woff, r.wlen, r.inMsg = dst, reth.RKey(), 0, reth.DMALen(), wire.OpWrite
	} else if r.wlen > 0 && !qp.e.MRs.liveKey(r.wkey) {
		// Deregistered while the WRITE was under way: access revoked.
		qp.respFatal(psn, wire.NAKRemoteAccess)
		return false
	}
	pl := p.Payload()
	if uint64(r.woff)+uint64(len(pl)) > uint64(len(r.wdst)) || (ends && r.woff+uint32(len(pl)) != r.wlen) {
		qp.respFatal(psn, wire.NAKInvalidRequest)
		return false
	}
	if ends && info.Imm && qp.recvQueue().peek() == nil {
		qp.queueNAK(psn, wire.RNRNAK(qp.minRNRTimer))
		return false
	}
	copy(r.wdst[r.woff:], pl)
	r.woff += uint32(len(pl))
	if ends {
		if info.Imm {
			qp.takeRecv(qp.recvQueue().peek())
			qp.recvDone(verbs.WC{Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: r.wlen,
				Imm: p.ImmDt().Imm(), Flags: verbs.WCFlagWithImm}, p.BTH().SE())
		}
		r.inMsg, r.wdst = wire.OpNone, nil
		r.nextMSN()
	}
	return true
}

// respRead executes an RDMA READ request (rxe_resp.c's read_reply): the
// R_Key resolved, the response packets queued, the expected PSN moved past
// them.
func (qp *QP) respRead(p *wire.Packet, psn wire.PSN) {
	r := &qp.resp
	reth := p.RETH()
	data := qp.e.MRs.resolveFor(qp, reth.RKey(), reth.VA(), reth.DMALen(), verbs.AccessRemoteRead)
	if qp.access&verbs.AccessRemoteRead == 0 || (data == nil && reth.DMALen() > 0) {
		qp.respFatal(psn, wire.NAKRemoteAccess)
		return
	}
	n := (reth.DMALen() + uint32(qp.mtu) - 1) / uint32(qp.mtu)
	n = max(n, 1)
	r.nextMSN()
	r.push(respItem{kind: itemRead, psn: psn, msn: r.msn, data: data, rkey: reth.RKey(), npkts: n})
	r.epsn = psn.Add(n)
}

// respAtomic executes a COMPARE SWAP or FETCH ADD (rxe_resp.c's
// atomic_reply): the word changed atomically, its old value kept for a
// duplicate and queued in the ATOMIC ACKNOWLEDGE.
func (qp *QP) respAtomic(p *wire.Packet, psn wire.PSN) {
	r := &qp.resp
	a := p.AtomicETH()
	b := qp.e.MRs.resolveFor(qp, a.RKey(), a.VA(), 8, verbs.AccessRemoteAtomic)
	w := atomicWord(b)
	if qp.access&verbs.AccessRemoteAtomic == 0 || w == nil {
		qp.respFatal(psn, wire.NAKRemoteAccess)
		return
	}
	var orig uint64
	if p.Info.Operation == wire.OpFetchAdd {
		orig = atomic.AddUint64(w, a.SwapAdd()) - a.SwapAdd()
	} else {
		for {
			orig = atomic.LoadUint64(w)
			if orig != a.Compare() || atomic.CompareAndSwapUint64(w, orig, a.SwapAdd()) {
				break
			}
		}
	}
	r.nextMSN()
	if len(r.replay) > 0 {
		r.replay[r.replayNext] = atomicReplay{psn: psn, orig: orig, valid: true}
		r.replayNext = (r.replayNext + 1) % len(r.replay)
	}
	r.push(respItem{kind: itemAtomic, psn: psn, msn: r.msn, orig: orig})
	r.epsn = psn.Add(1)
}

// recvDone completes the receive WQE in use with wc and retires it.
func (qp *QP) recvDone(wc verbs.WC, solicited bool) {
	r := &qp.resp
	if r.recv == nil {
		return
	}
	wc.WRID, wc.QPNum, wc.SrcQP = r.recv.wrid, uint32(qp.num), uint32(qp.destQPN)
	r.recv = nil
	r.inMsg = wire.OpNone
	if !qp.e.pushWC(qp.rcq, &wc, solicited) {
		r.cqLost = true // see cqLost
	}
}

// duplicate answers a request whose PSN is behind the expected one: SEND
// and WRITE are acknowledged again and never executed twice, READ is
// executed again, an atomic is answered from the replay cache.
func (qp *QP) duplicate(p *wire.Packet, psn wire.PSN) {
	qp.e.stats.Duplicates++
	r := &qp.resp
	switch p.Info.Operation {
	case wire.OpReadRequest:
		reth := p.RETH()
		data := qp.e.MRs.resolveFor(qp, reth.RKey(), reth.VA(), reth.DMALen(), verbs.AccessRemoteRead)
		if data == nil && reth.DMALen() > 0 {
			return
		}
		n := max((reth.DMALen()+uint32(qp.mtu)-1)/uint32(qp.mtu), 1)
		r.push(respItem{kind: itemRead, psn: psn, msn: r.msn, data: data, rkey: reth.RKey(), npkts: n})
	case wire.OpCompareSwap, wire.OpFetchAdd:
		for _, a := range r.replay {
			if a.valid && a.psn == psn {
				r.push(respItem{kind: itemAtomic, psn: psn, msn: r.msn, orig: a.orig})
				return
			}
		}
	case wire.OpAtomicWrite, wire.OpFlush:
		// Answered again, not executed again (rxe replays the resource).
		r.push(respItem{kind: itemRead, psn: psn, msn: r.msn, npkts: 1})
	default:
		qp.queueACK(r.epsn.Sub(1), false)
	}
}

// respOutput builds the responder's next packet.
func (qp *QP) respOutput(now int64, buf []byte) (int, bool) {
	r := &qp.resp
	if qp.holdACK(now) || r.queued() == 0 {
		return 0, false
	}
	it := &r.q[r.qh%respQueueLen]
	h := &qp.e.hdr
	*h = wire.Header{PKey: wire.DefaultPKey, DestQP: qp.destQPN, PSN: it.psn}
	payload := 0
	done := true
	switch it.kind {
	case itemACK, itemNAK:
		h.Opcode = wire.RCAcknowledge
		h.AETH = wire.AETHFields{Syndrome: it.syn, MSN: it.msn}
	case itemCNP:
		// RoCEv2 Annex A17: BTH opcode 0x81, the peer QP, BECN set, PSN
		// 0, then 16 reserved bytes (AppendTransport zeroes them).
		h.Opcode, h.BECN, h.PSN = wire.CNP, true, 0
	case itemAtomic:
		h.Opcode = wire.RCAtomicAcknowledge
		h.AETH = wire.AETHFields{Syndrome: wire.ACKUnlimited, MSN: it.msn}
		h.AtomicAck = it.orig
	case itemRead:
		k := it.sent
		if len(it.data) > 0 && !qp.e.MRs.liveKey(it.rkey) {
			// Deregistered while the READ was answered: access revoked.
			h.Opcode, h.PSN = wire.RCAcknowledge, it.psn.Add(k)
			h.AETH = wire.AETHFields{Syndrome: wire.NAKRemoteAccess, MSN: it.msn}
			qp.e.stats.NAKsSent++
			n := qp.e.finish(buf, 0, qp.remote, qp.sport)
			r.qh = r.qt // nothing more goes out
			qp.setError()
			qp.respErrorEvent(wire.NAKRemoteAccess)
			return n, true
		}
		h.PSN = it.psn.Add(k)
		switch {
		case it.npkts == 1:
			h.Opcode = wire.RCReadResponseOnly
		case k == 0:
			h.Opcode = wire.RCReadResponseFirst
		case k == it.npkts-1:
			h.Opcode = wire.RCReadResponseLast
		default:
			h.Opcode = wire.RCReadResponseMiddle
		}
		h.AETH = wire.AETHFields{Syndrome: wire.ACKUnlimited, MSN: it.msn}
		off := int(k) * qp.mtu
		payload = min(qp.mtu, len(it.data)-off)
		hl := h.Opcode.Info().HeaderLen
		// Copied even for OutputGather: the responder's application may
		// write this memory while the READ is answered (the data is then
		// undefined, but must not fail its ICRC), and the copy keeps the
		// payload and the ICRC computed over it consistent.
		copy(buf[hl:hl+payload], it.data[off:])
		it.sent++
		done = it.sent == it.npkts
	}
	n := qp.e.finish(buf, payload, qp.remote, qp.sport)
	if done {
		*it = respItem{}
		r.qh++
	}
	return n, true
}
