//go:build linux && cgo && ibverbs

package main

/*
#include "shim.h"
*/
import "C"

import (
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// gqp is a QP; its C structure is a struct ibv_qp_ex (qp_base first).
type gqp struct {
	c   *C.struct_ibv_qp
	ctx *gctx
	v   verbs.QP

	mu  sync.Mutex // the scratch below
	sw  []verbs.SendWR
	sge []verbs.SGE
	rw  []verbs.RecvWR
	rge []verbs.SGE

	// Inline data is copied here before it is posted (the engine takes
	// inline data from registered memory; a program's need not be):
	// GR_BATCH slots of inlMax bytes, allocated at the first inline post.
	inlMax int
	inl    []byte
	inlMR  verbs.MR
}

func (o *gqp) owner() *gctx { return o.ctx }

var byQP sync.Map // verbs.QP -> *gqp

//export gr_create_qp
func gr_create_qp(p *C.struct_ibv_pd, a *C.struct_ibv_qp_init_attr, out **C.struct_ibv_qp) C.int {
	o := get[gpd](unsafe.Pointer(p))
	if o == nil || a == nil {
		return einval
	}
	scq, rcq := get[gcq](unsafe.Pointer(a.send_cq)), get[gcq](unsafe.Pointer(a.recv_cq))
	if scq == nil || rcq == nil || scq.ctx != o.ctx || rcq.ctx != o.ctx {
		return einval
	}
	init := verbs.QPInitAttr{
		SendCQ: scq.v, RecvCQ: rcq.v, QPType: verbs.QPType(a.qp_type), SQSigAll: a.sq_sig_all != 0,
		Cap: verbs.QPCap{
			MaxSendWR: uint32(a.cap.max_send_wr), MaxRecvWR: uint32(a.cap.max_recv_wr),
			MaxSendSGE: uint32(a.cap.max_send_sge), MaxRecvSGE: uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data),
		},
	}
	if a.srq != nil {
		s := get[gsrq](unsafe.Pointer(a.srq))
		if s == nil {
			return einval
		}
		init.SRQ = s.v
	}
	v, err := o.v.CreateQP(&init)
	if err != nil {
		return fail(err)
	}
	q := (*C.struct_ibv_qp)(C.calloc(1, C.sizeof_struct_gr_qpx))
	q.context = p.context
	q.qp_context = a.qp_context
	q.pd = p
	q.send_cq = a.send_cq
	q.recv_cq = a.recv_cq
	q.srq = a.srq
	q.qp_num = C.uint32_t(v.Num())
	q.state = C.IBV_QPS_RESET
	q.qp_type = a.qp_type
	g := &gqp{c: q, ctx: o.ctx, v: v, sw: make([]verbs.SendWR, 0, C.GR_BATCH), rw: make([]verbs.RecvWR, 0, C.GR_BATCH)}
	if at, err := v.Query(); err == nil {
		fillCap(&a.cap, at.Cap, init.Cap)
		g.inlMax = int(a.cap.max_inline_data)
	}
	byQP.Store(v, g)
	put(unsafe.Pointer(q), g)
	*out = q
	return 0
}

// fillCap reports the capacities the QP has, at least those asked for.
func fillCap(c *C.struct_ibv_qp_cap, got, asked verbs.QPCap) {
	c.max_send_wr = C.uint32_t(max(got.MaxSendWR, asked.MaxSendWR))
	c.max_recv_wr = C.uint32_t(max(got.MaxRecvWR, asked.MaxRecvWR))
	c.max_send_sge = C.uint32_t(max(got.MaxSendSGE, asked.MaxSendSGE))
	c.max_recv_sge = C.uint32_t(max(got.MaxRecvSGE, asked.MaxRecvSGE))
	c.max_inline_data = C.uint32_t(max(got.MaxInlineData, asked.MaxInlineData))
}

//export gr_destroy_qp
func gr_destroy_qp(q *C.struct_ibv_qp) C.int {
	o := get[gqp](unsafe.Pointer(q))
	if o == nil {
		return einval
	}
	if q.qp_type == C.IBV_QPT_RC && q.state >= C.IBV_QPS_RTR {
		o.drain()
	}
	if err := o.v.Destroy(); err != nil {
		return fail(err)
	}
	byQP.Delete(o.v)
	del(unsafe.Pointer(q))
	C.gr_qpx_free(q)
	o.freeInline()
	retire(unsafe.Pointer(q))
	return 0
}

// drain lets the last ACKs of an RC QP leave before the QP goes, as a
// NIC's would: otherwise the peer's last send may never complete (a peer
// rdma_rxe's ibv_rc_pingpong resent its last message after the library's
// client had finished). First the ACK the QP's responder holds back a few
// microseconds for a reply, which will not come, is sent at once, and
// every response it queued is handed to the packet path
// (soft.QP.WaitResponses, at most drainLimit): held, that ACK waited for
// the driver's timer, which on a loaded machine may run late. Then the
// device waits until it has been quiet for drainQuiet (at most 200 ms), so
// that an ACK the network lost is sent again for the peer's retransmission
// while the QP is still there.
func (o *gqp) drain() {
	if sq, ok := o.v.(*soft.QP); ok && !sq.WaitResponses(drainLimit) {
		debug("ibv_destroy_qp: QP %d still had responses queued after %v", o.c.qp_num, drainLimit)
	}
	o.ctx.dev.dev.WaitQuiet(drainQuiet, 200*time.Millisecond)
}

const (
	drainLimit = 100 * time.Millisecond
	drainQuiet = 2 * time.Millisecond
)

// The attribute mask bits a modify may carry (IBV_QP_STATE ... IBV_QP_DEST_QPN
// and IBV_QP_RATE_LIMIT, which a soft device takes and ignores).
const (
	knownMask   = 1<<21 - 1
	maskRate    = 1 << 25
	maskAltPath = 1 << 14
)

//export gr_modify_qp
func gr_modify_qp(q *C.struct_ibv_qp, a *C.struct_ibv_qp_attr, mask C.int) C.int {
	o := get[gqp](unsafe.Pointer(q))
	if o == nil || a == nil {
		return einval
	}
	m := uint32(mask) &^ maskRate
	if m&^knownMask != 0 || m&maskAltPath != 0 {
		return einval
	}
	if m&uint32(verbs.AttrAV) != 0 && a.ah_attr.is_global == 0 {
		return einval // RoCE addresses by GID: an AV needs its GRH
	}
	attr := verbs.QPAttr{
		State: verbs.QPState(a.qp_state), CurState: verbs.QPState(a.cur_qp_state), PathMTU: verbs.MTU(a.path_mtu),
		QKey: uint32(a.qkey), RQPSN: uint32(a.rq_psn), SQPSN: uint32(a.sq_psn), DestQPN: uint32(a.dest_qp_num),
		AccessFlags: verbs.AccessFlags(a.qp_access_flags), AHAttr: ahAttr(&a.ah_attr), PKeyIndex: uint16(a.pkey_index),
		MaxRdAtomic: uint8(a.max_rd_atomic), MaxDestRdAtomic: uint8(a.max_dest_rd_atomic), MinRNRTimer: uint8(a.min_rnr_timer),
		PortNum: uint8(a.port_num), Timeout: uint8(a.timeout), RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry),
		Cap: verbs.QPCap{MaxSendWR: uint32(a.cap.max_send_wr), MaxRecvWR: uint32(a.cap.max_recv_wr),
			MaxSendSGE: uint32(a.cap.max_send_sge), MaxRecvSGE: uint32(a.cap.max_recv_sge), MaxInlineData: uint32(a.cap.max_inline_data)},
	}
	if err := o.v.Modify(&attr, verbs.QPAttrMask(m)); err != nil {
		return fail(err)
	}
	if m&uint32(verbs.AttrState) != 0 {
		q.state = a.qp_state
	}
	return 0
}

//export gr_query_qp
func gr_query_qp(q *C.struct_ibv_qp, a *C.struct_ibv_qp_attr, init *C.struct_ibv_qp_init_attr) C.int {
	o := get[gqp](unsafe.Pointer(q))
	if o == nil || a == nil || init == nil {
		return einval
	}
	v, err := o.v.Query()
	if err != nil {
		return fail(err)
	}
	*a = C.struct_ibv_qp_attr{
		qp_state: C.enum_ibv_qp_state(v.State), cur_qp_state: C.enum_ibv_qp_state(v.CurState), path_mtu: C.enum_ibv_mtu(v.PathMTU),
		qkey: C.uint32_t(v.QKey), rq_psn: C.uint32_t(v.RQPSN), sq_psn: C.uint32_t(v.SQPSN), dest_qp_num: C.uint32_t(v.DestQPN),
		qp_access_flags: C.uint(v.AccessFlags), pkey_index: C.uint16_t(v.PKeyIndex),
		max_rd_atomic: C.uint8_t(v.MaxRdAtomic), max_dest_rd_atomic: C.uint8_t(v.MaxDestRdAtomic), min_rnr_timer: C.uint8_t(v.MinRNRTimer),
		port_num: C.uint8_t(v.PortNum), timeout: C.uint8_t(v.Timeout), retry_cnt: C.uint8_t(v.RetryCnt), rnr_retry: C.uint8_t(v.RNRRetry),
	}
	fillCap(&a.cap, v.Cap, verbs.QPCap{})
	fillAHAttr(&a.ah_attr, v.AHAttr)
	*init = C.struct_ibv_qp_init_attr{qp_context: q.qp_context, send_cq: q.send_cq, recv_cq: q.recv_cq, srq: q.srq, qp_type: q.qp_type}
	init.cap = a.cap
	q.state = a.qp_state
	return 0
}

// gr_post_send posts n work requests shim.c took apart; it returns how many
// were posted and sets *err to the errno of the first that was not.
//
//export gr_post_send
func gr_post_send(q *C.struct_ibv_qp, wrs *C.struct_gr_swr, n C.int, errOut *C.int) C.int {
	o := get[gqp](unsafe.Pointer(q))
	if o == nil || n < 0 {
		*errOut = einval
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	in := unsafe.Slice(wrs, int(n))
	o.sw, o.sge = o.sw[:0], o.sge[:0]
	for i := range in {
		w := &in[i]
		if w.num_sge < 0 || (w.num_sge > 0 && w.sg_list == nil) {
			return o.postSome(i, errOut, syscall.EINVAL)
		}
		s0 := len(o.sge)
		if w.send_flags&C.IBV_SEND_INLINE != 0 && w.num_sge > 0 {
			g, e := o.stageInline(i, unsafe.Slice(w.sg_list, int(w.num_sge)))
			if e != 0 {
				return o.postSome(i, errOut, e)
			}
			o.sge = append(o.sge, g)
		} else {
			for _, g := range unsafe.Slice(w.sg_list, int(w.num_sge)) {
				o.sge = append(o.sge, verbs.SGE{Addr: uint64(g.addr), Length: uint32(g.length), LKey: uint32(g.lkey)})
			}
		}
		wr := verbs.SendWR{
			WRID: uint64(w.wr_id), Opcode: verbs.WROpcode(w.opcode), Flags: verbs.SendFlags(w.send_flags),
			Imm: uint32(w.imm), InvalidateRKey: uint32(w.invalidate_rkey), RemoteAddr: uint64(w.remote_addr),
			RKey: uint32(w.rkey), CompareAdd: uint64(w.compare_add), Swap: uint64(w.swap),
			RemoteQPN: uint32(w.remote_qpn), RemoteQKey: uint32(w.remote_qkey),
		}
		if o.c.qp_type == C.IBV_QPT_UD {
			ah := get[gah](w.ah)
			if ah == nil {
				return o.postSome(i, errOut, syscall.EINVAL)
			}
			wr.AH = ah.v
		}
		wr.SGList = o.sge[s0:len(o.sge):len(o.sge)]
		zeroLengthWrite(&wr)
		o.sw = append(o.sw, wr)
	}
	return o.postSome(len(in), errOut, 0)
}

// zeroLengthRKey is the key a zero-length RDMA WRITE posted with none is
// sent with. C programs post such a WRITE to fence or flush a QP (UCX's RC
// transport does, with RKey 0); it reaches no memory, and a responder checks
// no key for it (InfiniBand C9-88; Linux rdma_rxe and goroce skip the check),
// but the verbs package refuses a remote operation without a key.
const zeroLengthRKey = 0xffffffff

func zeroLengthWrite(wr *verbs.SendWR) {
	if wr.RKey != 0 || (wr.Opcode != verbs.WRRDMAWrite && wr.Opcode != verbs.WRRDMAWriteWithImm) {
		return
	}
	for _, g := range wr.SGList {
		if g.Length != 0 {
			return
		}
	}
	wr.RKey = zeroLengthRKey
}

// stageInline copies the inline data of the batch's i-th request into its
// slot of the QP's inline buffer and returns the one SGE that names it, as
// a NIC copies inline data into its WQE: the program's buffers need no key.
func (o *gqp) stageInline(i int, sges []C.struct_ibv_sge) (verbs.SGE, syscall.Errno) {
	n := 0
	for _, g := range sges {
		n += int(g.length)
	}
	if n > o.inlMax {
		debug("ibv_post_send on QP %d: %d bytes inline, max_inline_data is %d", o.c.qp_num, n, o.inlMax)
		return verbs.SGE{}, syscall.EINVAL
	}
	if o.inl == nil {
		if e := o.allocInline(); e != 0 {
			return verbs.SGE{}, e
		}
	}
	slot := o.inl[i*o.inlMax : (i+1)*o.inlMax]
	off := 0
	for _, g := range sges {
		if g.length == 0 {
			continue
		}
		if g.addr == 0 {
			return verbs.SGE{}, syscall.EINVAL
		}
		off += copy(slot[off:], unsafe.Slice((*byte)(C.gr_ptr(g.addr)), int(g.length)))
	}
	return verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&slot[0]))), Length: uint32(n), LKey: o.inlMR.LKey()}, 0
}

// allocInline makes the QP's inline buffer, in C memory registered with its PD.
func (o *gqp) allocInline() syscall.Errno {
	pd := get[gpd](unsafe.Pointer(o.c.pd))
	if pd == nil || o.inlMax <= 0 {
		return syscall.EINVAL
	}
	size := C.GR_BATCH * o.inlMax
	p := C.calloc(1, C.size_t(size))
	if p == nil {
		return syscall.ENOMEM
	}
	buf := unsafe.Slice((*byte)(p), size)
	mr, err := pd.v.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		C.free(p)
		return syscall.Errno(fail(err))
	}
	o.inl, o.inlMR = buf, mr
	return 0
}

func (o *gqp) freeInline() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inl == nil {
		return
	}
	o.inlMR.Dereg()
	C.free(unsafe.Pointer(&o.inl[0]))
	o.inl = nil
}

// postSome posts the first k requests made ready; e is why the one after
// them was not.
func (o *gqp) postSome(k int, errOut *C.int, e syscall.Errno) C.int {
	got, err := 0, error(nil)
	if k > 0 {
		got, err = o.v.PostSend(o.sw[:k])
	}
	switch {
	case err != nil:
		debug("ibv_post_send on QP %d: %v", o.c.qp_num, err)
		*errOut = fail(err)
	case e != 0:
		*errOut = C.int(e)
	default:
		*errOut = 0
	}
	return C.int(got)
}

//export gr_post_recv
func gr_post_recv(q *C.struct_ibv_qp, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	o := get[gqp](unsafe.Pointer(q))
	if o == nil {
		if bad != nil {
			*bad = wr
		}
		return einval
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return postRecvs(o.v.PostRecv, &o.rw, &o.rge, wr, bad)
}

// postRecvs posts a list of receive requests, GR_BATCH at a time.
func postRecvs(post func([]verbs.RecvWR) (int, error), rw *[]verbs.RecvWR, sge *[]verbs.SGE, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	for wr != nil {
		first := wr
		*rw, *sge = (*rw)[:0], (*sge)[:0]
		for ; wr != nil && len(*rw) < C.GR_BATCH; wr = wr.next {
			if wr.num_sge < 0 || (wr.num_sge > 0 && wr.sg_list == nil) {
				break
			}
			s0 := len(*sge)
			for _, g := range unsafe.Slice(wr.sg_list, int(wr.num_sge)) {
				*sge = append(*sge, verbs.SGE{Addr: uint64(g.addr), Length: uint32(g.length), LKey: uint32(g.lkey)})
			}
			*rw = append(*rw, verbs.RecvWR{WRID: uint64(wr.wr_id), SGList: (*sge)[s0:len(*sge):len(*sge)]})
		}
		n, err := 0, error(nil)
		if len(*rw) > 0 {
			n, err = post(*rw)
		}
		if err == nil && n == len(*rw) && (wr == nil || len(*rw) == C.GR_BATCH) {
			continue
		}
		if err == nil {
			err = syscall.EINVAL // a malformed request after those posted
		}
		for range n {
			first = first.next
		}
		if bad != nil {
			*bad = first
		}
		return fail(err)
	}
	return 0
}
