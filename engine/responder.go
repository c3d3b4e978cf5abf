package engine

import (
	"encoding/binary"
	"net/netip"
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

// responder is the receive side of an RC QP.
type responder struct {
	epsn   wire.PSN // next expected request PSN
	msn    uint32   // messages completed
	nakSeq bool     // a PSN-sequence NAK is out for the current gap
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

	// cqLost: a receive completion found the receive CQ full (overrun).
	// The message is not acknowledged and nothing more is taken; the
	// engine moves the QP to ERROR when it reports the overrun (as
	// rdma_rxe's responder goes to RESPST_ERR_CQ_OVERFLOW).
	cqLost bool
}

func (r *responder) queued() int { return r.qt - r.qh }

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
	r := &qp.resp
	if r.queued() > 0 {
		if last := &r.q[(r.qt-1)%respQueueLen]; last.kind == itemACK {
			last.psn, last.msn = psn, r.msn
			return
		}
	}
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

// respond handles a request packet. perr is Parse's ErrInvalidRequest, if
// any.
func (qp *QP) respond(now int64, p *wire.Packet, perr error) {
	r := &qp.resp
	if r.cqLost {
		return
	}
	bth := p.BTH()
	psn := bth.PSN()
	if d := psn.Diff(r.epsn); d > 0 {
		qp.e.stats.OutOfSequence++
		if !r.nakSeq {
			r.nakSeq = true
			qp.queueNAK(r.epsn, wire.NAKPSNSequence)
		}
		return
	} else if d < 0 {
		qp.duplicate(p, psn)
		return
	}
	r.nakSeq = false
	if r.queued() >= respQueueLen-1 {
		return // no room to answer: the requester will retry
	}
	if perr != nil || p.CheckPMTU(qp.mtu) != nil {
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
		if starts {
			s := qp.recvQueue().peek()
			if s == nil {
				qp.queueNAK(psn, wire.RNRNAK(qp.minRNRTimer))
				return
			}
			// Take the receive off the queue now: an SRQ feeds other QPs,
			// whose messages may start before this one ends.
			r.cur.wrid, r.cur.length = s.wrid, s.length
			r.cur.sges = append(r.cur.sges[:0], s.sges...)
			qp.recvQueue().pop()
			r.recv, r.recvOff, r.inMsg = &r.cur, 0, wire.OpSend
		}
		pl := p.Payload()
		if r.recvOff+uint32(len(pl)) > r.recv.length {
			qp.recvDone(verbs.WC{Status: verbs.WCLocLenErr, Opcode: verbs.WCRecv}, false)
			qp.respFatal(psn, wire.NAKInvalidRequest)
			return
		}
		if !qp.scatter(r.recv.sges, qp.pd, r.recvOff, pl) {
			qp.recvDone(verbs.WC{Status: verbs.WCLocProtErr, Opcode: verbs.WCRecv}, false)
			qp.respFatal(psn, wire.NAKRemoteOperation)
			return
		}
		r.recvOff += uint32(len(pl))
		if ends {
			wc := verbs.WC{Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: r.recvOff}
			if im := p.ImmDt(); im != nil {
				wc.Imm, wc.Flags = im.Imm(), verbs.WCFlagWithImm
			}
			if ie := p.IETH(); ie != nil {
				wc.InvalidatedRKey, wc.Flags = ie.RKey(), verbs.WCFlagWithInv
			}
			qp.recvDone(wc, bth.SE())
			r.msn++
		}
	case wire.OpWrite:
		if starts {
			reth := p.RETH()
			if pos == wire.PosOnly && info.Imm && qp.recvQueue().peek() == nil {
				qp.queueNAK(psn, wire.RNRNAK(qp.minRNRTimer))
				return
			}
			dst := qp.e.MRs.resolve(reth.RKey(), qp.pd, reth.VA(), reth.DMALen(), verbs.AccessRemoteWrite)
			if qp.access&verbs.AccessRemoteWrite == 0 || (dst == nil && reth.DMALen() > 0) {
				qp.respFatal(psn, wire.NAKRemoteAccess)
				return
			}
			r.wdst, r.wkey, r.woff, r.wlen, r.inMsg = dst, reth.RKey(), 0, reth.DMALen(), wire.OpWrite
		} else if r.wlen > 0 && qp.e.MRs.lookup(r.wkey) == nil {
			// Deregistered while the WRITE was under way: access revoked.
			qp.respFatal(psn, wire.NAKRemoteAccess)
			return
		}
		pl := p.Payload()
		if uint64(r.woff)+uint64(len(pl)) > uint64(len(r.wdst)) || (ends && r.woff+uint32(len(pl)) != r.wlen) {
			qp.respFatal(psn, wire.NAKInvalidRequest)
			return
		}
		if ends && info.Imm && qp.recvQueue().peek() == nil {
			qp.queueNAK(psn, wire.RNRNAK(qp.minRNRTimer))
			return
		}
		copy(r.wdst[r.woff:], pl)
		r.woff += uint32(len(pl))
		if ends {
			if info.Imm {
				s := qp.recvQueue().peek()
				r.cur.wrid, r.cur.length = s.wrid, s.length
				r.cur.sges = append(r.cur.sges[:0], s.sges...)
				qp.recvQueue().pop()
				r.recv = &r.cur
				qp.recvDone(verbs.WC{Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: r.wlen,
					Imm: p.ImmDt().Imm(), Flags: verbs.WCFlagWithImm}, bth.SE())
			}
			r.inMsg, r.wdst = wire.OpNone, nil
			r.msn++
		}
	case wire.OpReadRequest:
		reth := p.RETH()
		data := qp.e.MRs.resolve(reth.RKey(), qp.pd, reth.VA(), reth.DMALen(), verbs.AccessRemoteRead)
		if qp.access&verbs.AccessRemoteRead == 0 || (data == nil && reth.DMALen() > 0) {
			qp.respFatal(psn, wire.NAKRemoteAccess)
			return
		}
		n := (reth.DMALen() + uint32(qp.mtu) - 1) / uint32(qp.mtu)
		n = max(n, 1)
		r.msn++
		r.push(respItem{kind: itemRead, psn: psn, msn: r.msn, data: data, rkey: reth.RKey(), npkts: n})
		r.epsn = psn.Add(n)
		return
	case wire.OpCompareSwap, wire.OpFetchAdd:
		a := p.AtomicETH()
		b := qp.e.MRs.resolve(a.RKey(), qp.pd, a.VA(), 8, verbs.AccessRemoteAtomic)
		w := atomicWord(b)
		if qp.access&verbs.AccessRemoteAtomic == 0 || w == nil {
			qp.respFatal(psn, wire.NAKRemoteAccess)
			return
		}
		var orig uint64
		if op == wire.OpFetchAdd {
			orig = atomic.AddUint64(w, a.SwapAdd()) - a.SwapAdd()
		} else {
			for {
				orig = atomic.LoadUint64(w)
				if orig != a.Compare() || atomic.CompareAndSwapUint64(w, orig, a.SwapAdd()) {
					break
				}
			}
		}
		r.msn++
		if len(r.replay) > 0 {
			r.replay[r.replayNext] = atomicReplay{psn: psn, orig: orig, valid: true}
			r.replayNext = (r.replayNext + 1) % len(r.replay)
		}
		r.push(respItem{kind: itemAtomic, psn: psn, msn: r.msn, orig: orig})
		r.epsn = psn.Add(1)
		return // the ATOMIC ACKNOWLEDGE is the acknowledgement
	default:
		qp.respFatal(psn, wire.NAKInvalidRequest)
		return
	}
	if r.cqLost {
		return // the message's completion was lost: it is not acknowledged
	}
	r.epsn = psn.Add(1)
	if bth.AckReq() {
		// The ACK of a message that completed a receive may wait for the
		// reply the application is likely to post (Config.AckDelay).
		qp.queueACK(psn, ends && (op == wire.OpSend || info.Imm))
	}
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
		data := qp.e.MRs.resolve(reth.RKey(), qp.pd, reth.VA(), reth.DMALen(), verbs.AccessRemoteRead)
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
	case itemAtomic:
		h.Opcode = wire.RCAtomicAcknowledge
		h.AETH = wire.AETHFields{Syndrome: wire.ACKUnlimited, MSN: it.msn}
		h.AtomicAck = it.orig
	case itemRead:
		k := it.sent
		if len(it.data) > 0 && qp.e.MRs.lookup(it.rkey) == nil {
			// Deregistered while the READ was answered: access revoked.
			h.Opcode, h.PSN = wire.RCAcknowledge, it.psn.Add(k)
			h.AETH = wire.AETHFields{Syndrome: wire.NAKRemoteAccess, MSN: it.msn}
			qp.e.stats.NAKsSent++
			n := qp.e.finish(buf, 0, qp.remote, qp.sport)
			r.qh = r.qt // nothing more goes out
			qp.setError()
			qp.respErrorEvent(wire.NAKRemoteAccess)
			qp.lastDst = qp.remote
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
		copy(buf[hl:hl+payload], it.data[off:])
		it.sent++
		done = it.sent == it.npkts
	}
	n := qp.e.finish(buf, payload, qp.remote, qp.sport)
	if done {
		*it = respItem{}
		r.qh++
	}
	qp.lastDst = qp.remote
	return n, true
}

// udReceive delivers a UD packet: Q_Key checked, a receive consumed, the GRH
// area filled with the sender's IPv4 header in its last 20 bytes.
func (qp *QP) udReceive(now int64, p *wire.Packet, from netip.Addr) {
	_ = now
	d := p.DETH()
	if qp.state < verbs.QPSRTR || qp.state == verbs.QPSErr {
		return
	}
	if d.QKey() != qp.qkey {
		qp.e.stats.QKeyDrops++
		return
	}
	q := qp.recvQueue()
	s := q.peek()
	if s == nil {
		qp.e.stats.NoRecvDrops++
		return
	}
	var grh [40]byte
	ip := grh[20:]
	pl := p.Payload()
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(wire.IPv4UDPLen+len(p.Buf)))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	ip[8], ip[9] = 64, wire.IPProtocolUDP
	src, dst := from.Unmap().As4(), qp.e.cfg.Local.As4()
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	wire.IPv4(ip).SetChecksum()
	wc := verbs.WC{WRID: s.wrid, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(40 + len(pl)),
		QPNum: uint32(qp.num), SrcQP: uint32(d.SrcQP()), Flags: verbs.WCFlagGRH}
	if im := p.ImmDt(); im != nil {
		wc.Imm, wc.Flags = im.Imm(), wc.Flags|verbs.WCFlagWithImm
	}
	if 40+uint32(len(pl)) > s.length {
		wc.Status, wc.ByteLen = verbs.WCLocLenErr, 0
	} else if !qp.scatter(s.sges, qp.pd, 0, grh[:]) || !qp.scatter(s.sges, qp.pd, 40, pl) {
		wc.Status, wc.ByteLen = verbs.WCLocProtErr, 0
	}
	q.pop()
	qp.e.pushWC(qp.rcq, &wc, p.BTH().SE())
}

// udOutput sends the next UD work request: one packet, completed at once.
func (qp *QP) udOutput(now int64, buf []byte) (int, bool) {
	_ = now
	q := qp.sq
	hd := q.head.Load()
	if hd == q.tail.Load() {
		return 0, false
	}
	s := &q.slots[hd&q.mask]
	wr := &s.wr
	ah := wr.AH.Attr()
	dst := ah.DGID.Addr()
	sport := qp.sport
	if fl := ah.FlowLabel & 0xFFFFF; fl != 0 && qp.e.cfg.PerPacketSourcePort {
		sport = wire.SourcePort(fl, qp.num, wire.QPN(wr.RemoteQPN))
	}
	h := &qp.e.hdr
	*h = wire.Header{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: wire.QPN(wr.RemoteQPN), PSN: qp.req.psn,
		SE: wr.Flags&verbs.SendSolicited != 0}
	qkey := wr.RemoteQKey
	if qkey&0x80000000 != 0 { // IBA 10.2.5: use the QP's own Q_Key
		qkey = qp.qkey
	}
	h.DETH = wire.DETHFields{QKey: qkey, SrcQP: qp.num}
	if wr.Opcode == verbs.WRSendWithImm {
		h.Opcode, h.Imm = wire.UDSendOnlyImm, wr.Imm
	}
	hl := h.Opcode.Info().HeaderLen
	status := verbs.WCSuccess
	if !dst.Is4() {
		status = verbs.WCLocQPOpErr
	} else if !qp.gather(s, 0, buf[hl:hl+int(s.length)]) {
		status = verbs.WCLocProtErr
	}
	n := 0
	if status == verbs.WCSuccess {
		n = qp.e.finish(buf, int(s.length), dst, sport)
		qp.req.psn = qp.req.psn.Add(1)
		qp.lastDst = dst
	}
	wc := verbs.WC{WRID: wr.WRID, Status: status, Opcode: verbs.WCSend, QPNum: uint32(qp.num)}
	signaled := status != verbs.WCSuccess || wr.Flags&verbs.SendSignaled != 0 || qp.sigAll
	q.head.Store(hd + 1) // the slot is free before its completion is seen
	if signaled {
		qp.e.pushWC(qp.scq, &wc, false)
	}
	return n, n > 0
}
