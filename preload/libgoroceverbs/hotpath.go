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
	var pd *C.struct_ibv_pd
	var cq *C.struct_ibv_cq
	var mr *C.struct_ibv_mr
	var qp *C.struct_ibv_qp
	var ah *C.struct_ibv_ah
	buf := C.calloc(1, 4096)
	defer C.free(buf)
	ia := C.struct_ibv_qp_init_attr{qp_type: C.IBV_QPT_UD}
	ia.cap = C.struct_ibv_qp_cap{max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64}
	if gr_alloc_pd(ctx, &pd) != 0 || gr_create_cq(ctx, 64, nil, nil, &cq) != 0 ||
		gr_reg_mr(pd, buf, 4096, C.uint64_t(uintptr(buf)), C.IBV_ACCESS_LOCAL_WRITE, &mr) != 0 {
		return 0, errors.New("pd, cq or mr")
	}
	ia.send_cq, ia.recv_cq = cq, cq
	if gr_create_qp(pd, &ia, &qp) != 0 {
		return 0, errors.New("qp")
	}
	var at C.struct_ibv_qp_attr
	at.qp_state, at.port_num, at.qkey = C.IBV_QPS_INIT, 1, 0x11111111
	for _, st := range []struct {
		s    C.enum_ibv_qp_state
		mask C.int
	}{{C.IBV_QPS_INIT, C.IBV_QP_STATE | C.IBV_QP_PKEY_INDEX | C.IBV_QP_PORT | C.IBV_QP_QKEY}, {C.IBV_QPS_RTR, C.IBV_QP_STATE}, {C.IBV_QPS_RTS, C.IBV_QP_STATE | C.IBV_QP_SQ_PSN}} {
		at.qp_state = st.s
		if gr_modify_qp(qp, &at, st.mask) != 0 {
			return 0, errors.New("modify")
		}
	}
	var aa C.struct_ibv_ah_attr
	aa.is_global, aa.port_num = 1, 1
	aa.grh.sgid_index, aa.grh.hop_limit = 1, 64
	if gr_query_gid(ctx, 1, 1, &aa.grh.dgid) != 0 || gr_create_ah(pd, &aa, &ah) != 0 {
		return 0, errors.New("ah")
	}
	rsge := (*C.struct_ibv_sge)(C.calloc(2, C.sizeof_struct_ibv_sge))
	defer C.free(unsafe.Pointer(rsge))
	sges := unsafe.Slice(rsge, 2)
	sges[0] = C.struct_ibv_sge{addr: C.uint64_t(uintptr(buf)), length: 2048, lkey: mr.lkey}
	sges[1] = C.struct_ibv_sge{addr: C.uint64_t(uintptr(buf)) + 2048, length: 64, lkey: mr.lkey}
	rwr := (*C.struct_ibv_recv_wr)(C.calloc(1, C.sizeof_struct_ibv_recv_wr))
	defer C.free(unsafe.Pointer(rwr))
	rwr.sg_list, rwr.num_sge = rsge, 1
	swr := (*C.struct_gr_swr)(C.calloc(1, C.sizeof_struct_gr_swr))
	defer C.free(unsafe.Pointer(swr))
	*swr = C.struct_gr_swr{sg_list: &sges[1], num_sge: 1, opcode: C.IBV_WR_SEND, send_flags: C.IBV_SEND_SIGNALED,
		ah: unsafe.Pointer(ah), remote_qpn: qp.qp_num, remote_qkey: 0x11111111}
	if inline {
		swr.send_flags |= C.IBV_SEND_INLINE
	}
	wcs := (*C.struct_gr_wc)(C.calloc(4, C.sizeof_struct_gr_wc))
	defer C.free(unsafe.Pointer(wcs))
	mem := unsafe.Slice((*byte)(buf), 4096)
	msg, got := mem[2048:2048+64], mem[40:40+64] // sent; received behind the GRH
	seq := byte(0)
	one := func() error {
		var bad *C.struct_ibv_recv_wr
		var e C.int
		seq++
		for i := range msg {
			msg[i] = seq + byte(i)
		}
		if gr_post_recv(qp, rwr, &bad) != 0 || gr_post_send(qp, swr, 1, &e) != 1 {
			return errors.New("post")
		}
		for n := 0; n < 2; {
			k := gr_poll_cq(cq, 4, wcs)
			if k < 0 {
				return errors.New("poll")
			}
			for _, w := range unsafe.Slice(wcs, int(k)) {
				if w.status != 0 {
					return errors.New("completion in error")
				}
			}
			n += int(k)
		}
		if string(got) != string(msg) {
			return errors.New("the message received is not the one sent")
		}
		return nil
	}
	for range 100 {
		if err := one(); err != nil {
			return 0, err
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		if err := one(); err != nil {
			return 0, err
		}
	}
	runtime.ReadMemStats(&after)
	gr_destroy_qp(qp)
	gr_destroy_ah(ah)
	gr_dereg_mr(mr)
	gr_destroy_cq(cq)
	gr_dealloc_pd(pd)
	return float64(after.Mallocs-before.Mallocs) / float64(n), nil
}
