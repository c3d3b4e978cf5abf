package engine

import (
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// UC (Unreliable Connected) queue pairs, as rdma_rxe runs them: SEND and
// RDMA WRITE (with or without immediate) in the packets of RC's shapes under
// UC opcodes, nothing acknowledged and nothing resent. A work request
// completes when its last packet is sent. The responder places packets in
// PSN order; a packet lost makes it drop the rest of that message (IBA
// 9.8.3: the receive it had begun stays posted, or with an SRQ completes
// with REM_INV_REQ_ERR), and it takes up again at the next FIRST or ONLY.

// ucOutput builds the UC QP's next packet.
func (qp *QP) ucOutput(now int64, buf []byte) (int, bool) {
	r := &qp.req
	q := qp.sq
	hd := q.head.Load()
	for ; hd != q.posted() && isLocalOp(q.slots[hd&q.mask].wr.Opcode); hd = q.head.Load() {
		status := qp.execLocal(&q.slots[hd&q.mask])
		qp.ucRetire(hd, status)
		if status != verbs.WCSuccess {
			return 0, false
		}
	}
	if hd == q.posted() {
		return 0, false
	}
	s := &q.slots[hd&q.mask]
	wr := &s.wr
	mtu := uint32(qp.mtu)
	npkts := max((s.length+mtu-1)/mtu, 1)
	k := r.nextPkt
	off := k * mtu
	payload := int(min(mtu, s.length-min(off, s.length)))
	first, last := k == 0, k+1 >= npkts
	h := &qp.e.hdr
	*h = wire.Header{Opcode: reqOpcode(wr.Opcode, first, last) | 0x20, PKey: wire.DefaultPKey, DestQP: qp.destQPN, PSN: r.psn}
	if first && (wr.Opcode == verbs.WRRDMAWrite || wr.Opcode == verbs.WRRDMAWriteWithImm) {
		h.RETH = wire.RETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, DMALen: s.length}
	}
	if last {
		h.Imm = wr.Imm
		h.SE = wr.Flags&verbs.SendSolicited != 0
	}
	if payload > 0 && !qp.gather(hd, off, buf[h.Opcode.Info().HeaderLen:][:payload]) {
		qp.ucRetire(hd, verbs.WCLocProtErr)
		return 0, false
	}
	n := qp.e.finish(buf, payload, qp.remote, qp.sport)
	r.psn = r.psn.Add(1)
	if last {
		r.nextPkt = 0
		qp.ucRetire(hd, verbs.WCSuccess)
	} else {
		r.nextPkt++
	}
	return n, true
}

// ucRetire retires the WQE at SQ index hd with status, completing it when
// signaled or failed; a failure moves the QP to ERROR.
func (qp *QP) ucRetire(hd uint64, status verbs.WCStatus) {
	q := qp.sq
	s := &q.slots[hd&q.mask]
	wc := verbs.WC{WRID: s.wr.WRID, Status: status, Opcode: wcOpcode(s.wr.Opcode), QPNum: uint32(qp.num)}
	signaled := status != verbs.WCSuccess || s.wr.Flags&verbs.SendSignaled != 0 || qp.sigAll
	q.head.Store(hd + 1)
	qp.req.next, qp.req.started = hd+1, hd+1
	if signaled {
		qp.e.pushWC(qp.scq, &wc, false)
	}
	if status != verbs.WCSuccess {
		qp.setError()
		qp.flush()
	}
}

// ucReceive handles a packet for a UC QP (rxe_resp.c's check_psn and
// check_op_seq for UC, with the message a lost packet breaks dropped whole).
func (qp *QP) ucReceive(p *wire.Packet, perr error) {
	r := &qp.resp
	if r.cqLost || qp.state < verbs.QPSRTR || qp.state == verbs.QPSErr {
		return
	}
	info := p.Info
	psn := p.BTH().PSN()
	starts := info.Position == wire.PosFirst || info.Position == wire.PosOnly
	ends := info.Position == wire.PosLast || info.Position == wire.PosOnly
	op := info.Operation
	if psn != r.epsn || r.ucDrop || (!starts && r.inMsg != op) || (starts && r.inMsg != wire.OpNone) {
		// A packet was lost (or a message left without its end): the
		// message under way is dropped, and so is every packet up to the
		// next that starts one.
		qp.ucAbandon()
		if !starts {
			r.ucDrop = true
			r.epsn = psn.Add(1)
			return
		}
		r.ucDrop = false
	}
	r.epsn = psn.Add(1)
	if perr != nil || (info.Position != wire.PosOnly || p.PayloadLen > qp.mtu) && p.CheckPMTU(qp.mtu) != nil {
		qp.ucAbandon()
		r.ucDrop = !ends
		return
	}
	switch op {
	case wire.OpSend:
		qp.ucSend(p, starts, ends)
	case wire.OpWrite:
		qp.ucWrite(p, starts, ends)
	}
}

// ucAbandon drops the message under way: its receive stays posted (it was
// only peeked at), or, taken from an SRQ, completes with REM_INV_REQ_ERR.
func (qp *QP) ucAbandon() {
	r := &qp.resp
	if r.recv != nil {
		if r.ucPeeked {
			r.recv, r.inMsg = nil, wire.OpNone
		} else {
			qp.recvDone(verbs.WC{Status: verbs.WCRemInvReqErr, Opcode: verbs.WCRecv}, false)
		}
	}
	r.ucPeeked = false
	r.inMsg, r.wdst = wire.OpNone, nil
}

// ucRecv takes the receive a UC message consumes: from the QP's own queue
// it is only peeked at, and popped when the message completes.
func (qp *QP) ucRecv() bool {
	r := &qp.resp
	if qp.srq != nil {
		s := qp.srq.peek()
		if s == nil {
			return false
		}
		qp.takeRecv(s)
		r.ucPeeked = false
		return true
	}
	s := qp.rq.peek()
	if s == nil {
		return false
	}
	r.recv, r.ucPeeked = s, true
	return true
}

// ucDone completes the message's receive with wc and pops it from the QP's
// queue if it was only peeked at.
func (qp *QP) ucDone(wc verbs.WC, se bool) {
	r := &qp.resp
	peeked := r.ucPeeked
	r.ucPeeked = false
	qp.recvDone(wc, se)
	if peeked {
		qp.rq.pop()
	}
}

// ucSend places a packet of a SEND. No receive, or a message longer than
// it, drops the message.
func (qp *QP) ucSend(p *wire.Packet, starts, ends bool) {
	r := &qp.resp
	if starts {
		if !qp.ucRecv() {
			r.ucDrop = !ends
			return
		}
		r.recvOff, r.inMsg = 0, wire.OpSend
	}
	pl := p.Payload()
	if r.recvOff+uint32(len(pl)) > r.recv.length {
		qp.ucAbandon()
		r.ucDrop = !ends
		return
	}
	if !qp.scatter(r.recv.sges, qp.pd, r.recvOff, pl) {
		qp.ucDone(verbs.WC{Status: verbs.WCLocProtErr, Opcode: verbs.WCRecv}, false)
		qp.setError()
		return
	}
	r.recvOff += uint32(len(pl))
	if ends {
		wc := verbs.WC{Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: r.recvOff}
		if im := p.ImmDt(); im != nil {
			wc.Imm, wc.Flags = im.Imm(), verbs.WCFlagWithImm
		}
		qp.ucDone(wc, p.BTH().SE())
	}
}

// ucWrite places a packet of an RDMA WRITE. A key that does not grant the
// range (or a QP without REMOTE_WRITE), or a WRITE with immediate finding
// no receive, drops the message.
func (qp *QP) ucWrite(p *wire.Packet, starts, ends bool) {
	r := &qp.resp
	info := p.Info
	if starts {
		reth := p.RETH()
		dst := qp.e.MRs.resolveFor(qp, reth.RKey(), reth.VA(), reth.DMALen(), verbs.AccessRemoteWrite)
		if qp.access&verbs.AccessRemoteWrite == 0 || (dst == nil && reth.DMALen() > 0) {
			r.ucDrop = !ends
			return
		}
		r.wdst, r.wkey, r.woff, r.wlen, r.inMsg = dst, reth.RKey(), 0, reth.DMALen(), wire.OpWrite
	} else if r.wlen > 0 && !qp.e.MRs.liveKey(r.wkey) {
		qp.ucAbandon()
		r.ucDrop = !ends
		return
	}
	pl := p.Payload()
	if uint64(r.woff)+uint64(len(pl)) > uint64(len(r.wdst)) || (ends && r.woff+uint32(len(pl)) != r.wlen) {
		qp.ucAbandon()
		r.ucDrop = !ends
		return
	}
	if ends && info.Imm && !qp.ucRecv() {
		qp.ucAbandon()
		return
	}
	copy(r.wdst[r.woff:], pl)
	r.woff += uint32(len(pl))
	if ends {
		if info.Imm {
			qp.ucDone(verbs.WC{Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: r.wlen,
				Imm: p.ImmDt().Imm(), Flags: verbs.WCFlagWithImm}, p.BTH().SE())
		}
		r.inMsg, r.wdst = wire.OpNone, nil
	}
}
