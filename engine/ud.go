package engine

import (
	"net/netip"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// udReceive delivers a UD packet: Q_Key checked, a receive consumed, the GRH
// area filled with the sender's IPv4 header in its last 20 bytes, or over
// IPv6 with its IPv6 header (fillGRH).
func (qp *QP) udReceive(now int64, p *wire.Packet, from netip.Addr) {
	qp.udReceiveTo(now, p, from, qp.e.cfg.Local)
}

// udReceiveTo is udReceive of a packet sent to dst (the device's address,
// or a multicast group the QP is attached to).
func (qp *QP) udReceiveTo(now int64, p *wire.Packet, from, dst netip.Addr) {
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
	pl := p.Payload()
	qp.e.fillGRH(&grh, from, dst, len(p.Buf))
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
	if hd == q.posted() {
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
	if !qp.e.sameFamily(dst) {
		status = verbs.WCLocQPOpErr
	} else if !qp.gather(hd, 0, buf[hl:hl+int(s.length)]) {
		status = verbs.WCLocProtErr
	}
	n := 0
	if status == verbs.WCSuccess {
		n = qp.e.finish(buf, int(s.length), dst, sport)
		qp.req.psn = qp.req.psn.Add(1)
		qp.lastDst = dst
		qp.ip = ipHeaderOf(&ah)
	}
	wc := verbs.WC{WRID: wr.WRID, Status: status, Opcode: verbs.WCSend, QPNum: uint32(qp.num)}
	signaled := status != verbs.WCSuccess || wr.Flags&verbs.SendSignaled != 0 || qp.sigAll
	q.head.Store(hd + 1) // the slot is free before its completion is seen
	if signaled {
		qp.e.pushWC(qp.scq, &wc, false)
	}
	return n, n > 0
}
