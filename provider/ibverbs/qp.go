//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// QP is a queue pair (struct ibv_qp).
type QP struct {
	ctx  *Context
	ctl  sync.Mutex // serialises Modify, Query and Destroy
	qp   *C.struct_ibv_qp
	typ  verbs.QPType
	num  uint32
	send scratch
	recv scratch
	aw   bool // made by ibv_create_qp_ex with ATOMIC_WRITE (goroce_create_qp_aw)
}

// CreateQP creates a queue pair in RESET (ibv_create_qp).
func (p *PD) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	if attr == nil {
		return nil, fmt.Errorf("ibverbs: nil QP attributes: %w", verbs.ErrInvalidAttr)
	}
	scq, ok1 := attr.SendCQ.(*CQ)
	rcq, ok2 := attr.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return nil, fmt.Errorf("ibverbs: send and receive CQs must be this provider's: %w", verbs.ErrInvalidAttr)
	}
	var srq *SRQ
	if attr.SRQ != nil {
		var ok bool
		if srq, ok = attr.SRQ.(*SRQ); !ok || srq == nil {
			return nil, fmt.Errorf("ibverbs: SRQ of another provider: %w", verbs.ErrInvalidAttr)
		}
	}
	// Hold the PD, the CQs and the SRQ while the QP is made on them (the
	// QP then holds them: the kernel refuses to destroy them, EBUSY).
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil, p.errDestroyed()
	}
	var ia C.struct_ibv_qp_init_attr
	if ia.send_cq = scq.hold(); ia.send_cq == nil {
		return nil, fmt.Errorf("ibverbs: send CQ: %w", verbs.ErrDestroyed)
	}
	defer scq.release()
	if rcq == scq {
		ia.recv_cq = ia.send_cq
	} else {
		if ia.recv_cq = rcq.hold(); ia.recv_cq == nil {
			return nil, fmt.Errorf("ibverbs: receive CQ: %w", verbs.ErrDestroyed)
		}
		defer rcq.release()
	}
	if srq != nil {
		if ia.srq = srq.hold(); ia.srq == nil {
			return nil, fmt.Errorf("ibverbs: SRQ: %w", verbs.ErrDestroyed)
		}
		defer srq.release()
	}
	ia.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	ia.cap.max_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	ia.cap.max_send_sge = C.uint32_t(attr.Cap.MaxSendSGE)
	ia.cap.max_recv_sge = C.uint32_t(attr.Cap.MaxRecvSGE)
	ia.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	ia.qp_type = C.enum_ibv_qp_type(attr.QPType)
	if attr.SQSigAll {
		ia.sq_sig_all = 1
	}
	// An RC QP of a device with ATOMIC_WRITE is made with ibv_create_qp_ex,
	// which ibv_wr_atomic_write needs; others, or when that fails, as ever.
	var qp *C.struct_ibv_qp
	aw := false
	if attr.QPType == verbs.QPTRC && p.ctx.atomicWrite() {
		qp = C.goroce_create_qp_aw(p.pd.context, p.pd, &ia)
		aw = qp != nil
	}
	if qp == nil {
		var errno error
		if qp, errno = C.ibv_create_qp(p.pd, &ia); qp == nil {
			return nil, verbErr("ibv_create_qp", callErrno(errno), attr.QPType.String())
		}
	}
	q := &QP{ctx: p.ctx, qp: qp, typ: attr.QPType, num: uint32(qp.qp_num), aw: aw}
	q.send.alloc(C.size_t(unsafe.Sizeof(C.struct_gsend{})), C.size_t(unsafe.Sizeof(C.struct_ibv_send_wr{})))
	q.recv.alloc(C.size_t(unsafe.Sizeof(C.struct_grecv{})), C.size_t(unsafe.Sizeof(C.struct_ibv_recv_wr{})))
	if !p.ctx.track(q) {
		C.ibv_destroy_qp(qp)
		q.send.free()
		q.recv.free()
		return nil, p.ctx.errClosed()
	}
	p.ctx.mu.Lock()
	p.ctx.qps[qp] = q
	p.ctx.mu.Unlock()
	return q, nil
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.num }

// Type returns the transport type.
func (q *QP) Type() verbs.QPType { return q.typ }

// Modify changes the attributes mask names (ibv_modify_qp). Address vectors
// are global (RoCE): AHAttr's GID fields fill ah_attr.grh; a zero
// AHAttr.PortNum takes attr.PortNum, then 1.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if attr == nil {
		return fmt.Errorf("ibverbs: nil QP attributes: %w", verbs.ErrInvalidAttr)
	}
	q.ctl.Lock()
	defer q.ctl.Unlock()
	if q.qp == nil {
		return fmt.Errorf("ibverbs: modify: %w", verbs.ErrDestroyed)
	}
	var a C.struct_ibv_qp_attr
	a.qp_state = C.enum_ibv_qp_state(attr.State)
	a.cur_qp_state = C.enum_ibv_qp_state(attr.CurState)
	a.path_mtu = C.enum_ibv_mtu(attr.PathMTU)
	a.qkey = C.uint32_t(attr.QKey)
	a.rq_psn = C.uint32_t(attr.RQPSN)
	a.sq_psn = C.uint32_t(attr.SQPSN)
	a.dest_qp_num = C.uint32_t(attr.DestQPN)
	a.qp_access_flags = C.uint(attr.AccessFlags)
	a.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	a.cap.max_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	a.cap.max_send_sge = C.uint32_t(attr.Cap.MaxSendSGE)
	a.cap.max_recv_sge = C.uint32_t(attr.Cap.MaxRecvSGE)
	a.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	if mask&verbs.AttrAV != 0 {
		av := attr.AHAttr
		if av.PortNum == 0 {
			av.PortNum = attr.PortNum
		}
		if av.PortNum == 0 {
			av.PortNum = 1
		}
		fillAH(&a.ah_attr, &av)
	}
	a.pkey_index = C.uint16_t(attr.PKeyIndex)
	a.max_rd_atomic = C.uint8_t(attr.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(attr.MaxDestRdAtomic)
	a.min_rnr_timer = C.uint8_t(attr.MinRNRTimer)
	a.port_num = C.uint8_t(attr.PortNum)
	a.timeout = C.uint8_t(attr.Timeout)
	a.retry_cnt = C.uint8_t(attr.RetryCnt)
	a.rnr_retry = C.uint8_t(attr.RNRRetry)
	if rc := C.goroce_modify_qp(q.qp, &a, C.int(mask)); rc != 0 {
		return verbErr("ibv_modify_qp", int(rc), fmt.Sprintf("QP %#x to %v, mask %#x", q.num, attr.State, uint32(mask)))
	}
	return nil
}

// Query returns the attributes (ibv_query_qp).
func (q *QP) Query() (verbs.QPAttr, error) {
	q.ctl.Lock()
	defer q.ctl.Unlock()
	if q.qp == nil {
		return verbs.QPAttr{}, fmt.Errorf("ibverbs: query: %w", verbs.ErrDestroyed)
	}
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	if rc := C.goroce_query_qp(q.qp, &a, &ia); rc != 0 {
		return verbs.QPAttr{}, verbErr("ibv_query_qp", int(rc), fmt.Sprintf("QP %#x", q.num))
	}
	return verbs.QPAttr{State: verbs.QPState(a.qp_state), CurState: verbs.QPState(a.cur_qp_state),
		PathMTU: verbs.MTU(a.path_mtu), QKey: uint32(a.qkey), RQPSN: uint32(a.rq_psn), SQPSN: uint32(a.sq_psn),
		DestQPN: uint32(a.dest_qp_num), AccessFlags: verbs.AccessFlags(a.qp_access_flags),
		Cap: verbs.QPCap{MaxSendWR: uint32(a.cap.max_send_wr), MaxRecvWR: uint32(a.cap.max_recv_wr),
			MaxSendSGE: uint32(a.cap.max_send_sge), MaxRecvSGE: uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data)},
		AHAttr: readAH(&a.ah_attr), PKeyIndex: uint16(a.pkey_index), MaxRdAtomic: uint8(a.max_rd_atomic),
		MaxDestRdAtomic: uint8(a.max_dest_rd_atomic), MinRNRTimer: uint8(a.min_rnr_timer), PortNum: uint8(a.port_num),
		Timeout: uint8(a.timeout), RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry)}, nil
}

// Destroy destroys the QP (ibv_destroy_qp). Destroying twice, or after
// Close, returns nil.
func (q *QP) Destroy() error {
	q.ctl.Lock()
	defer q.ctl.Unlock()
	q.send.mu.Lock()
	defer q.send.mu.Unlock()
	q.recv.mu.Lock()
	defer q.recv.mu.Unlock()
	if q.qp == nil {
		return nil
	}
	if rc, errno := C.ibv_destroy_qp(q.qp); rc != 0 {
		return verbErr("ibv_destroy_qp", rcErrno(int(rc), errno), fmt.Sprintf("QP %#x", q.num))
	}
	q.forget()
	q.ctx.untrack(q)
	return nil
}

// forget drops a destroyed QP's C memory and map entry. Called with the
// QP's locks held.
func (q *QP) forget() {
	q.ctx.mu.Lock()
	delete(q.ctx.qps, q.qp)
	q.ctx.mu.Unlock()
	q.qp = nil
	q.send.free()
	q.recv.free()
}

// Close is Destroy (io.Closer).
func (q *QP) Close() error { return q.Destroy() }

func (q *QP) rank() int { return 0 }

func (q *QP) kill() {
	q.ctl.Lock()
	defer q.ctl.Unlock()
	q.send.mu.Lock()
	defer q.send.mu.Unlock()
	q.recv.mu.Lock()
	defer q.recv.mu.Unlock()
	if q.qp != nil {
		C.ibv_destroy_qp(q.qp)
		q.forget()
	}
}
