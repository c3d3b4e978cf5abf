package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// isA19 reports whether o is one of the operations of IBA annex A19
// (ATOMIC WRITE, FLUSH): requests of one packet, answered with an empty
// RDMA READ RESPONSE ONLY, counted among the READs and atomics.
func isA19(o verbs.WROpcode) bool { return o == verbs.WRAtomicWrite || o == verbs.WRFlush }

// isLocalOp reports whether o is executed by the requester without a packet
// (rxe's WR_LOCAL_OP_MASK): LOCAL_INV, BIND_MW, REG_MR.
func isLocalOp(o verbs.WROpcode) bool {
	return o == verbs.WRLocalInv || o == verbs.WRBindMW || o == verbs.WRRegMR
}

// flushFence is stored to by a FLUSH of global visibility: an atomic store,
// which orders every write the engine placed before it.
var flushFence atomic.Uint32

// respA19 executes an ATOMIC WRITE or a FLUSH (rxe_resp.c's check_op_valid,
// check_rkey, atomic_write_reply and process_flush) and queues its empty RDMA
// READ RESPONSE ONLY. A QP without the access (REMOTE_WRITE; the FLUSH
// placement type's FLUSH_GLOBAL or FLUSH_PERSISTENT), a length other than 8,
// or an ATOMIC WRITE address not 8-byte aligned is an invalid request; a key
// that names no memory granting it, or a range beyond the region or window,
// a remote access error. Both NAKs move the QP to ERROR.
func (qp *QP) respA19(p *wire.Packet, psn wire.PSN) {
	r := &qp.resp
	reth := p.RETH()
	if reth.DMALen() > 1<<31 {
		qp.respFatal(psn, wire.NAKInvalidRequest)
		return
	}
	if p.Info.Operation == wire.OpAtomicWrite {
		if qp.access&verbs.AccessRemoteWrite == 0 {
			qp.respFatal(psn, wire.NAKInvalidRequest)
			return
		}
		b := qp.e.MRs.resolveFor(qp, reth.RKey(), reth.VA(), reth.DMALen(), verbs.AccessRemoteWrite)
		if b == nil {
			qp.respFatal(psn, wire.NAKRemoteAccess)
			return
		}
		w := atomicWord(b)
		if p.PayloadLen != 8 || reth.DMALen() != 8 || w == nil {
			qp.respFatal(psn, wire.NAKInvalidRequest) // RESPST_ERR_LENGTH, RESPST_ERR_MISALIGNED_ATOMIC
			return
		}
		atomic.StoreUint64(w, binary.NativeEndian.Uint64(p.Payload()))
	} else if !qp.respFlush(p, psn) {
		return
	}
	r.nextMSN()
	r.push(respItem{kind: itemRead, psn: psn, msn: r.msn, npkts: 1})
	r.epsn = psn.Add(1)
}

// respFlush checks and executes a FLUSH, and reports whether it did (else
// it NAKed it).
func (qp *QP) respFlush(p *wire.Packet, psn wire.PSN) bool {
	reth := p.RETH()
	f := p.FETH()
	typ := f.PlacementType()
	var need verbs.AccessFlags
	if typ&wire.FlushGlobal != 0 {
		need |= verbs.AccessFlushGlobal
	}
	if typ&wire.FlushPersistent != 0 {
		need |= verbs.AccessFlushPersistent
	}
	if qp.access&need != need || need == 0 || f.Selectivity() > wire.FlushMR {
		qp.respFatal(psn, wire.NAKInvalidRequest)
		return false
	}
	ok := false
	if f.Selectivity() == wire.FlushMR {
		ok = qp.e.MRs.grants(qp, reth.RKey(), need)
	} else {
		ok = qp.e.MRs.resolveFor(qp, reth.RKey(), reth.VA(), reth.DMALen(), need) != nil
	}
	if !ok {
		qp.respFatal(psn, wire.NAKRemoteAccess)
		return false
	}
	flushFence.Add(1) // visibility; a region never grants FLUSH_PERSISTENT (no persistent memory)
	return true
}

// grants reports whether key names VALID memory qp may reach with need
// (a FLUSH of a whole region or window).
func (t *MRTable) grants(qp *QP, key uint32, need verbs.AccessFlags) bool {
	if key&mwKeyBit != 0 {
		w := t.lookupMW(key)
		return w != nil && w.pd == qp.pd && (w.typ != verbs.MWType2 || w.qp == qp) && w.access&need == need &&
			w.mr != nil && w.mr.live.Load() != 0
	}
	m := t.lookup(key)
	return m != nil && m.pd == qp.pd && m.access&need == need
}

// completeA19 completes an ATOMIC WRITE or FLUSH with its response: an
// RDMA READ RESPONSE ONLY without payload (anything else is a bad
// response, as rxe_comp.c's check_ack).
func (qp *QP) completeA19(now int64, p *wire.Packet, psn wire.PSN, st *sendState) {
	if st.done {
		qp.acked(now, psn)
		return
	}
	if p.Info.Position != wire.PosOnly || p.PayloadLen != 0 {
		qp.fatal(psn, verbs.WCBadRespErr)
		return
	}
	st.done = true
	qp.req.rdAtomic--
	qp.acked(now, psn)
}

// execLocal executes a local operation WQE (rxe_do_local_ops) and returns
// its status: LOCAL_INV of a fast-registration region or type 2 window
// (LOC_QP_OP_ERR when refused), REG_MR (LOC_QP_OP_ERR), BIND_MW of a type 2
// window, or of a type 1 window by QP.BindMW (MW_BIND_ERR).
func (qp *QP) execLocal(s *sendSlot) verbs.WCStatus {
	wr := &s.wr
	t := qp.e.MRs
	switch wr.Opcode {
	case verbs.WRLocalInv:
		if t.invalidate(wr.InvalidateRKey, qp.pd) != nil {
			return verbs.WCLocQPOpErr
		}
	case verbs.WRRegMR:
		if wr.Reg == nil || t.regFast(wr.Reg, qp.pd) != nil {
			return verbs.WCLocQPOpErr
		}
	case verbs.WRBindMW:
		if wr.Bind == nil || t.bindMW(qp, wr.Bind) != nil {
			return verbs.WCMWBindErr
		}
	}
	return verbs.WCSuccess
}

// reqLocal executes the local operation WQEs at the requester's cursor on an
// RC QP, in order, each when the requester reaches it (a fenced one when no
// READ or atomic is outstanding). It gives them no PSN: a WQE whose last
// PSN is the one before its first retires when everything before it is
// acknowledged. It reports whether the cursor now rests at a WQE to send.
func (qp *QP) reqLocal(now int64) bool {
	r := &qp.req
	q := qp.sq
	for r.next != q.posted() {
		i := r.next & q.mask
		s, st := &q.slots[i], &qp.sqst[i]
		if !isLocalOp(s.wr.Opcode) {
			return true
		}
		if !st.started {
			if s.wr.Flags&verbs.SendFence != 0 && r.rdAtomic > 0 {
				return false
			}
			*st = sendState{started: true, done: true, firstPSN: r.psn, lastPSN: r.psn.Sub(1)}
			r.started = r.next + 1
			if status := qp.execLocal(s); status != verbs.WCSuccess {
				qp.localError(r.next, status)
				return false
			}
		}
		r.next++
		r.nextPkt = 0
		if qp.sq.head.Load() < r.next && r.ackPSN == r.psn.Sub(1) {
			qp.acked(now, r.ackPSN) // nothing before it awaits an ACK: it retires now
		}
	}
	return false
}

// qpTransition is a QP state transition.
type qpTransition struct{ f, t verbs.QPState }

// ucModifyRules are ibv_modify_qp's rules for UC (IBA 11.2.4.2 table 91).
var ucModifyRules = func() map[qpTransition]modifyRule {
	const s = verbs.AttrState
	type k = qpTransition
	path := verbs.AttrAltPath | verbs.AttrPathMigState
	return map[k]modifyRule{
		{verbs.QPSReset, verbs.QPSInit}: {s | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags, 0},
		{verbs.QPSInit, verbs.QPSInit}:  {s, verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPSInit, verbs.QPSRTR}: {s | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN,
			verbs.AttrPKeyIndex | verbs.AttrAccessFlags | verbs.AttrAltPath},
		{verbs.QPSRTR, verbs.QPSRTS}: {s | verbs.AttrSQPSN, verbs.AttrCurState | verbs.AttrAccessFlags | path},
		{verbs.QPSRTS, verbs.QPSRTS}: {s, verbs.AttrCurState | verbs.AttrAccessFlags | path},
	}
}()

// copyMemOp gives a posted REG_MR's or BIND_MW's description a copy of its
// own (the application may reuse its struct once PostSend returns).
func copyMemOp(wr *verbs.SendWR) {
	if wr.Reg != nil {
		r := *wr.Reg
		wr.Reg = &r
	}
	if wr.Bind != nil {
		b := *wr.Bind
		wr.Bind = &b
	}
}

// checkNewWR checks the RC work requests of this file (n is the bytes of
// their SGEs).
func checkNewWR(wr *verbs.SendWR, n uint64, bind1 bool) error {
	switch wr.Opcode {
	case verbs.WRAtomicWrite:
		if n != 8 {
			return errors.New("ATOMIC_WRITE needs 8 bytes (one 8-byte SGE, or 8 inline)")
		}
	case verbs.WRFlush:
		if wr.FlushType == 0 || wr.FlushType&^(verbs.FlushGlobal|verbs.FlushPersistent) != 0 || wr.FlushLevel > verbs.FlushMR {
			return fmt.Errorf("FLUSH placement type %d, level %d", wr.FlushType, wr.FlushLevel)
		}
		if len(wr.SGList) != 0 {
			return errors.New("FLUSH takes no SGE")
		}
	default:
		return checkLocalWR(wr, bind1)
	}
	return nil
}

// checkLocalWR checks LOCAL_INV, BIND_MW and REG_MR work requests (bind1:
// QP.BindMW posts a type 1 window's bind).
func checkLocalWR(wr *verbs.SendWR, bind1 bool) error {
	switch wr.Opcode {
	case verbs.WRBindMW:
		if wr.Bind == nil || wr.Bind.MW == nil {
			return errors.New("BIND_MW without Bind and its window")
		}
		if wr.Bind.MW.Type() != verbs.MWType2 && !bind1 {
			return errors.New("BIND_MW of a type 1 window: bind it with BindMW")
		}
	case verbs.WRRegMR:
		if wr.Reg == nil || wr.Reg.MR == nil {
			return errors.New("REG_MR without Reg and its region")
		}
	}
	if len(wr.SGList) != 0 {
		return fmt.Errorf("%v takes no SGE", wr.Opcode)
	}
	return nil
}

// checkUCWR checks a work request for a UC QP: SEND, RDMA WRITE (with
// immediate or not) and the local operations.
func checkUCWR(wr *verbs.SendWR, bind1 bool) error {
	switch wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		return nil
	case verbs.WRLocalInv, verbs.WRBindMW, verbs.WRRegMR:
		return checkLocalWR(wr, bind1)
	}
	return fmt.Errorf("opcode %v on a UC QP (SEND, RDMA_WRITE, their _WITH_IMM, LOCAL_INV, BIND_MW, REG_MR)", wr.Opcode)
}
