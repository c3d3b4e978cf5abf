//go:build linux && cgo && ibverbs

package main

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"runtime"
	"unsafe"
)

// allocsPerMessage measures the Go heap allocations of the library's hot
// path: a UD SEND to the QP itself on the first device (post_recv,
// post_send, poll_cq until both complete), averaged over n messages after a
// warm-up. The test of this package calls it.
// With inline, the SEND is posted IBV_SEND_INLINE (the library copies it).
func allocsPerMessage(n int, inline bool) (float64, error) {
	ds, err := configured()
	if err != nil || len(ds) == 0 {
		return 0, errors.New("no device")
	}
	var ctx *C.struct_ibv_context
	if e := gr_open_device(ds[0].c, &ctx); e != 0 {
		return 0, errors.New("open")
	}
	defer gr_close_device(ctx)
	buf := C.calloc(1, 4096)
	defer C.free(buf)
	h := &hotPath{ctx: ctx, buf: buf}
	if err := h.create(); err != nil {
		return 0, err
	}
	rsge := (*C.struct_ibv_sge)(C.calloc(2, C.sizeof_struct_ibv_sge))
	defer C.free(unsafe.Pointer(rsge))
	h.rwr = (*C.struct_ibv_recv_wr)(C.calloc(1, C.sizeof_struct_ibv_recv_wr))
	defer C.free(unsafe.Pointer(h.rwr))
	h.swr = (*C.struct_gr_swr)(C.calloc(1, C.sizeof_struct_gr_swr))
	defer C.free(unsafe.Pointer(h.swr))
	h.wcs = (*C.struct_gr_wc)(C.calloc(4, C.sizeof_struct_gr_wc))
	defer C.free(unsafe.Pointer(h.wcs))
	h.prepare(rsge, inline)
	for range 100 {
		if err := h.one(); err != nil {
			return 0, err
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		if err := h.one(); err != nil {
			return 0, err
		}
	}
	runtime.ReadMemStats(&after)
	gr_destroy_qp(h.qp)
	gr_destroy_ah(h.ah)
	gr_dereg_mr(h.mr)
	gr_destroy_cq(h.cq)
	gr_dealloc_pd(h.pd)
	return float64(after.Mallocs-before.Mallocs) / float64(n), nil
}

// hotPath is what allocsPerMessage sends with: a UD QP that sends to
// itself, its objects, and the work requests, completions and buffer every
// message reuses, all in C memory as a C program's would be.
type hotPath struct {
	ctx *C.struct_ibv_context
	buf unsafe.Pointer // 4096 bytes: receives at 0, the SEND's data at 2048
	pd  *C.struct_ibv_pd
	cq  *C.struct_ibv_cq
	mr  *C.struct_ibv_mr
	qp  *C.struct_ibv_qp
	ah  *C.struct_ibv_ah

	rwr      *C.struct_ibv_recv_wr
	swr      *C.struct_gr_swr
	wcs      *C.struct_gr_wc // room for 4
	msg, got []byte          // the SEND's data; where it lands, behind the GRH
	seq      byte            // the number of the last message, in its data
}

// create makes the objects on h.ctx: the PD, a CQ of 64, the MR of h.buf,
// the UD QP brought to RTS (Q_Key 0x11111111) and an AH for GID 1 of port
// 1, the QP's own. Its errors name what failed, no more.
func (h *hotPath) create() error {
	ia := C.struct_ibv_qp_init_attr{qp_type: C.IBV_QPT_UD}
	ia.cap = C.struct_ibv_qp_cap{max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64}
	if gr_alloc_pd(h.ctx, &h.pd) != 0 || gr_create_cq(h.ctx, 64, nil, nil, &h.cq) != 0 ||
		gr_reg_mr(h.pd, h.buf, 4096, C.uint64_t(uintptr(h.buf)), C.IBV_ACCESS_LOCAL_WRITE, &h.mr) != 0 {
		return errors.New("pd, cq or mr")
	}
	ia.send_cq, ia.recv_cq = h.cq, h.cq
	if gr_create_qp(h.pd, &ia, &h.qp) != 0 {
		return errors.New("qp")
	}
	var at C.struct_ibv_qp_attr
	at.qp_state, at.port_num, at.qkey = C.IBV_QPS_INIT, 1, 0x11111111
	for _, st := range []struct {
		s    C.enum_ibv_qp_state
		mask C.int
	}{{C.IBV_QPS_INIT, C.IBV_QP_STATE | C.IBV_QP_PKEY_INDEX | C.IBV_QP_PORT | C.IBV_QP_QKEY}, {C.IBV_QPS_RTR, C.IBV_QP_STATE}, {C.IBV_QPS_RTS, C.IBV_QP_STATE | C.IBV_QP_SQ_PSN}} {
		at.qp_state = st.s
		if gr_modify_qp(h.qp, &at, st.mask) != 0 {
			return errors.New("modify")
		}
	}
	var aa C.struct_ibv_ah_attr
	aa.is_global, aa.port_num = 1, 1
	aa.grh.sgid_index, aa.grh.hop_limit = 1, 64
	if gr_query_gid(h.ctx, 1, 1, &aa.grh.dgid) != 0 || gr_create_ah(h.pd, &aa, &h.ah) != 0 {
		return errors.New("ah")
	}
	return nil
}

// prepare fills in the work requests, allocated zeroed: rsge's two SGEs
// (2048 bytes of receive at the start of h.buf, the SEND's 64 bytes at
// 2048), the receive, and the signaled SEND to the QP itself, with inline
// posted IBV_SEND_INLINE. It also points h.msg and h.got at the SEND's
// data and at where it lands.
func (h *hotPath) prepare(rsge *C.struct_ibv_sge, inline bool) {
	sges := unsafe.Slice(rsge, 2)
	sges[0] = C.struct_ibv_sge{addr: C.uint64_t(uintptr(h.buf)), length: 2048, lkey: h.mr.lkey}
	sges[1] = C.struct_ibv_sge{addr: C.uint64_t(uintptr(h.buf)) + 2048, length: 64, lkey: h.mr.lkey}
	h.rwr.sg_list, h.rwr.num_sge = rsge, 1
	*h.swr = C.struct_gr_swr{sg_list: &sges[1], num_sge: 1, opcode: C.IBV_WR_SEND, send_flags: C.IBV_SEND_SIGNALED,
		ah: unsafe.Pointer(h.ah), remote_qpn: h.qp.qp_num, remote_qkey: 0x11111111}
	if inline {
		h.swr.send_flags |= C.IBV_SEND_INLINE
	}
	mem := unsafe.Slice((*byte)(h.buf), 4096)
	h.msg, h.got = mem[2048:2048+64], mem[40:40+64] // sent; received behind the GRH
}

// one sends the next message, its bytes numbered from h.seq, to the QP
// itself and checks that it arrived intact: post_recv, post_send, then
// poll_cq until both complete. It is the hot path allocsPerMessage
// measures.
func (h *hotPath) one() error {
	var bad *C.struct_ibv_recv_wr
	var e C.int
	h.seq++
	for i := range h.msg {
		h.msg[i] = h.seq + byte(i)
	}
	if gr_post_recv(h.qp, h.rwr, &bad) != 0 || gr_post_send(h.qp, h.swr, 1, &e) != 1 {
		return errors.New("post")
	}
	for n := 0; n < 2; {
		k := gr_poll_cq(h.cq, 4, h.wcs)
		if k < 0 {
			return errors.New("poll")
		}
		for _, w := range unsafe.Slice(h.wcs, int(k)) {
			if w.status != 0 {
				return errors.New("completion in error")
			}
		}
		n += int(k)
	}
	if string(h.got) != string(h.msg) {
		return errors.New("the message received is not the one sent")
	}
	return nil
}
