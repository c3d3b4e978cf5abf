//go:build linux && cgo && ibverbs

package main

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"net/netip"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

type gpd struct {
	c   *C.struct_ibv_pd
	ctx *gctx
	v   verbs.PD
}

type gmr struct {
	c   *C.struct_ibv_mr
	ctx *gctx
	v   verbs.MR
}

type gah struct {
	c   *C.struct_ibv_ah
	ctx *gctx
	v   verbs.AH
}

type gsrq struct {
	c   *C.struct_ibv_srq
	ctx *gctx
	v   verbs.SRQ
	mu  sync.Mutex
	rw  []verbs.RecvWR
	sge []verbs.SGE
}

type gchan struct {
	c      *C.struct_ibv_comp_channel
	ctx    *gctx
	v      verbs.CompChannel
	ev     *eventQueue[*C.struct_ibv_cq]
	cancel context.CancelFunc
}

type gcq struct {
	c   *C.struct_ibv_cq
	ctx *gctx
	v   verbs.CQ
	ch  *gchan
	sd  *soft.Device // the CQ's device (yieldToDriver)
	mu  sync.Mutex
	wc  []verbs.WC
	l3  C.uint8_t // the sl of a UD receive: its L3 header's type (l3Type)
}

func (o *gpd) owner() *gctx   { return o.ctx }
func (o *gmr) owner() *gctx   { return o.ctx }
func (o *gah) owner() *gctx   { return o.ctx }
func (o *gsrq) owner() *gctx  { return o.ctx }
func (o *gchan) owner() *gctx { return o.ctx }
func (o *gcq) owner() *gctx   { return o.ctx }

// byCQ finds the C structure of a CQ the engine names in an event.
var byCQ sync.Map // verbs.CQ -> *gcq

func fail(err error) C.int { return C.int(errno(err)) }

const einval = C.int(syscall.EINVAL)

//export gr_alloc_pd
func gr_alloc_pd(c *C.struct_ibv_context, out **C.struct_ibv_pd) C.int {
	g := ctxOf(c)
	if g == nil {
		return einval
	}
	v, err := g.v.AllocPD()
	if err != nil {
		return fail(err)
	}
	p := (*C.struct_ibv_pd)(C.calloc(1, C.sizeof_struct_ibv_pd))
	p.context = c
	put(unsafe.Pointer(p), &gpd{c: p, ctx: g, v: v})
	*out = p
	return 0
}

//export gr_dealloc_pd
func gr_dealloc_pd(p *C.struct_ibv_pd) C.int {
	o := get[gpd](unsafe.Pointer(p))
	if o == nil {
		return einval
	}
	if err := o.v.Dealloc(); err != nil {
		return fail(err)
	}
	del(unsafe.Pointer(p))
	retire(unsafe.Pointer(p))
	return 0
}

// accessOptionalRange are the access flags a provider may ignore
// (IBV_ACCESS_OPTIONAL_RANGE: relaxed ordering and the like).
const accessOptionalRange = 0x3ff00000

//export gr_reg_mr
func gr_reg_mr(p *C.struct_ibv_pd, addr unsafe.Pointer, length C.size_t, iova C.uint64_t, access C.uint, out **C.struct_ibv_mr) C.int {
	o := get[gpd](unsafe.Pointer(p))
	if o == nil || addr == nil || length == 0 || uint64(iova) != uint64(uintptr(addr)) {
		return einval
	}
	buf := unsafe.Slice((*byte)(addr), int(length))
	v, err := o.v.RegMR(buf, verbs.AccessFlags(access&^accessOptionalRange))
	if err != nil {
		return fail(err)
	}
	m := (*C.struct_ibv_mr)(C.calloc(1, C.sizeof_struct_ibv_mr))
	m.context = p.context
	m.pd = p
	m.addr = addr
	m.length = length
	m.lkey = C.uint32_t(v.LKey())
	m.rkey = C.uint32_t(v.RKey())
	put(unsafe.Pointer(m), &gmr{c: m, ctx: o.ctx, v: v})
	*out = m
	return 0
}

//export gr_dereg_mr
func gr_dereg_mr(m *C.struct_ibv_mr) C.int {
	o := get[gmr](unsafe.Pointer(m))
	if o == nil {
		return einval
	}
	if err := o.v.Dereg(); err != nil {
		return fail(err)
	}
	del(unsafe.Pointer(m))
	retire(unsafe.Pointer(m))
	return 0
}

//export gr_create_comp_channel
func gr_create_comp_channel(c *C.struct_ibv_context, out **C.struct_ibv_comp_channel) C.int {
	g := ctxOf(c)
	if g == nil {
		return einval
	}
	v, err := g.v.CreateCompChannel()
	if err != nil {
		return fail(err)
	}
	ev, err := newEventQueue[*C.struct_ibv_cq]()
	if err != nil {
		v.Destroy()
		return fail(err)
	}
	ch := (*C.struct_ibv_comp_channel)(C.calloc(1, C.sizeof_struct_ibv_comp_channel))
	ch.context = c
	ch.fd = C.int(ev.fd)
	ch.refcnt = 0
	wctx, cancel := context.WithCancel(context.Background())
	o := &gchan{c: ch, ctx: g, v: v, ev: ev, cancel: cancel}
	put(unsafe.Pointer(ch), o)
	go o.run(wctx)
	*out = ch
	return 0
}

// run moves the channel's events into its queue until it is destroyed.
func (o *gchan) run(ctx context.Context) {
	for {
		cq, err := o.v.Wait(ctx)
		if err != nil {
			if ctx.Err() != nil || cq == nil {
				return
			}
			continue
		}
		if g, ok := byCQ.Load(cq); ok {
			o.ev.push(g.(*gcq).c)
		}
	}
}

//export gr_destroy_comp_channel
func gr_destroy_comp_channel(ch *C.struct_ibv_comp_channel) C.int {
	o := get[gchan](unsafe.Pointer(ch))
	if o == nil {
		return einval
	}
	if err := o.v.Destroy(); err != nil {
		return fail(err)
	}
	o.cancel()
	del(unsafe.Pointer(ch))
	o.ev.close()
	retire(unsafe.Pointer(ch))
	return 0
}

// gr_cq_event takes the event whose count shim.c read from the channel's fd.
//
//export gr_cq_event
func gr_cq_event(ch *C.struct_ibv_comp_channel, out **C.struct_ibv_cq) C.int {
	o := get[gchan](unsafe.Pointer(ch))
	if o == nil {
		return einval
	}
	for {
		cq, ok := o.ev.pop()
		if !ok {
			return C.int(syscall.EAGAIN)
		}
		if get[gcq](unsafe.Pointer(cq)) != nil { // not destroyed meanwhile
			*out = cq
			return 0
		}
	}
}

//export gr_create_cq
func gr_create_cq(c *C.struct_ibv_context, cqe C.int, cqctx unsafe.Pointer, ch *C.struct_ibv_comp_channel, out **C.struct_ibv_cq) C.int {
	g := ctxOf(c)
	if g == nil || cqe <= 0 {
		return einval
	}
	var chv verbs.CompChannel
	var och *gchan
	if ch != nil {
		if och = get[gchan](unsafe.Pointer(ch)); och == nil || och.ctx != g {
			return einval
		}
		chv = och.v
	}
	v, err := g.v.CreateCQ(int(cqe), chv)
	if err != nil {
		return fail(err)
	}
	q := (*C.struct_ibv_cq)(C.calloc(1, C.sizeof_struct_ibv_cq))
	q.context = c
	q.channel = ch
	q.cq_context = cqctx
	q.cqe = cqe
	o := &gcq{c: q, ctx: g, v: v, ch: och, sd: g.dev.dev, wc: make([]verbs.WC, C.GR_BATCH), l3: l3Type(g.dev.opts.Addr)}
	byCQ.Store(v, o)
	put(unsafe.Pointer(q), o)
	*out = q
	return 0
}

//export gr_destroy_cq
func gr_destroy_cq(q *C.struct_ibv_cq) C.int {
	o := get[gcq](unsafe.Pointer(q))
	if o == nil {
		return einval
	}
	if err := o.v.Destroy(); err != nil {
		return fail(err)
	}
	byCQ.Delete(o.v)
	del(unsafe.Pointer(q))
	retire(unsafe.Pointer(q))
	return 0
}

// l3Type is what a UD receive's sl says of the packet, as RoCE NICs report
// it (Annex 17 A17.4.5.1 has the completion say whether a RoCE v2 packet
// was IPv4 or IPv6; ConnectX puts the L3 header's type in sl, and UCX reads
// it there to find the destination address in the receive's first 40
// bytes): 2 for IPv4 (whose header fills the second half), 1 for IPv6. A
// RoCE v2 packet has no SL of its own to report.
func l3Type(addr string) C.uint8_t {
	if a, err := netip.ParseAddr(addr); err == nil && a.Unmap().Is4() {
		return 2
	}
	return 1
}

// gr_poll_cq polls up to n (at most GR_BATCH) completions into out. A poll
// that finds none while the device's driver holds the packet path yields
// the processor to it first (yieldToDriver), then looks again.
//
//export gr_poll_cq
func gr_poll_cq(q *C.struct_ibv_cq, n C.int, out *C.struct_gr_wc) C.int {
	o := get[gcq](unsafe.Pointer(q))
	if o == nil || n < 0 || (n > 0 && out == nil) {
		return -einval
	}
	k := o.poll(int(n), out)
	if k == 0 && n > 0 && yieldToDriver(o.sd) {
		k = o.poll(int(n), out)
	}
	return C.int(k)
}

func (o *gcq) poll(n int, out *C.struct_gr_wc) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := o.v.Poll(o.wc[:min(n, len(o.wc))])
	dst := unsafe.Slice(out, k)
	for i := range k {
		w := &o.wc[i]
		dst[i] = C.struct_gr_wc{
			wr_id: C.uint64_t(w.WRID), status: C.uint32_t(w.Status), opcode: C.uint32_t(w.Opcode),
			vendor_err: C.uint32_t(w.VendorErr), byte_len: C.uint32_t(w.ByteLen), imm: C.uint32_t(w.Imm),
			invalidated_rkey: C.uint32_t(w.InvalidatedRKey), qp_num: C.uint32_t(w.QPNum), src_qp: C.uint32_t(w.SrcQP),
			wc_flags: C.uint32_t(w.Flags), pkey_index: C.uint16_t(w.PKeyIndex), slid: C.uint16_t(w.SLID),
			sl: C.uint8_t(w.SL), dlid_path_bits: C.uint8_t(w.DLIDPathBits),
		}
		if w.Flags&verbs.WCFlagGRH != 0 {
			dst[i].sl = o.l3
		}
	}
	return k
}

//export gr_req_notify_cq
func gr_req_notify_cq(q *C.struct_ibv_cq, solicited C.int) C.int {
	o := get[gcq](unsafe.Pointer(q))
	if o == nil {
		return einval
	}
	return fail(o.v.ReqNotify(solicited != 0))
}

//export gr_create_srq
func gr_create_srq(p *C.struct_ibv_pd, a *C.struct_ibv_srq_init_attr, out **C.struct_ibv_srq) C.int {
	o := get[gpd](unsafe.Pointer(p))
	if o == nil || a == nil || a.attr.max_wr == 0 {
		return einval
	}
	v, err := o.v.CreateSRQ(int(a.attr.max_wr), int(max(a.attr.max_sge, 1)))
	if err != nil {
		return fail(err)
	}
	s := (*C.struct_ibv_srq)(C.calloc(1, C.sizeof_struct_ibv_srq))
	s.context = p.context
	s.srq_context = a.srq_context
	s.pd = p
	put(unsafe.Pointer(s), &gsrq{c: s, ctx: o.ctx, v: v, rw: make([]verbs.RecvWR, 0, C.GR_BATCH)})
	*out = s
	return 0
}

//export gr_destroy_srq
func gr_destroy_srq(s *C.struct_ibv_srq) C.int {
	o := get[gsrq](unsafe.Pointer(s))
	if o == nil {
		return einval
	}
	if err := o.v.Destroy(); err != nil {
		return fail(err)
	}
	del(unsafe.Pointer(s))
	retire(unsafe.Pointer(s))
	return 0
}

//export gr_post_srq_recv
func gr_post_srq_recv(s *C.struct_ibv_srq, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	o := get[gsrq](unsafe.Pointer(s))
	if o == nil {
		if bad != nil {
			*bad = wr
		}
		return einval
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return postRecvs(o.v.PostRecv, &o.rw, &o.sge, wr, bad)
}

//export gr_create_ah
func gr_create_ah(p *C.struct_ibv_pd, a *C.struct_ibv_ah_attr, out **C.struct_ibv_ah) C.int {
	o := get[gpd](unsafe.Pointer(p))
	if o == nil || a == nil || a.is_global == 0 {
		return einval
	}
	attr := ahAttr(a)
	v, err := o.v.CreateAH(&attr)
	if err != nil {
		return fail(err)
	}
	h := (*C.struct_ibv_ah)(C.calloc(1, C.sizeof_struct_ibv_ah))
	h.context = p.context
	h.pd = p
	put(unsafe.Pointer(h), &gah{c: h, ctx: o.ctx, v: v})
	*out = h
	return 0
}

//export gr_destroy_ah
func gr_destroy_ah(h *C.struct_ibv_ah) C.int {
	o := get[gah](unsafe.Pointer(h))
	if o == nil {
		return einval
	}
	if err := o.v.Destroy(); err != nil {
		return fail(err)
	}
	del(unsafe.Pointer(h))
	retire(unsafe.Pointer(h))
	return 0
}

func ahAttr(a *C.struct_ibv_ah_attr) verbs.AHAttr {
	return verbs.AHAttr{
		DGID:         *(*verbs.GID)(unsafe.Pointer(&a.grh.dgid)),
		SGIDIndex:    uint8(a.grh.sgid_index),
		TrafficClass: uint8(a.grh.traffic_class),
		FlowLabel:    uint32(a.grh.flow_label),
		HopLimit:     uint8(a.grh.hop_limit),
		PortNum:      uint8(a.port_num),
	}
}

func fillAHAttr(a *C.struct_ibv_ah_attr, v verbs.AHAttr) {
	*a = C.struct_ibv_ah_attr{}
	*(*verbs.GID)(unsafe.Pointer(&a.grh.dgid)) = v.DGID
	a.grh.sgid_index = C.uint8_t(v.SGIDIndex)
	a.grh.traffic_class = C.uint8_t(v.TrafficClass)
	a.grh.flow_label = C.uint32_t(v.FlowLabel)
	a.grh.hop_limit = C.uint8_t(v.HopLimit)
	a.port_num = C.uint8_t(v.PortNum)
	a.is_global = 1
}

// asyncEvents moves the context's asynchronous events into its queue until
// the context closes.
func (g *gctx) asyncEvents() {
	for {
		e, err := g.v.GetAsyncEvent(context.Background())
		if err != nil {
			return
		}
		a := C.struct_gr_async{_type: C.uint32_t(e.Type), port: C.uint32_t(e.Port)}
		switch {
		case e.CQ != nil:
			if o, ok := byCQ.Load(e.CQ); ok {
				a.element = unsafe.Pointer(o.(*gcq).c)
			}
		case e.QP != nil:
			if o, ok := byQP.Load(e.QP); ok {
				a.element = unsafe.Pointer(o.(*gqp).c)
			}
		case e.SRQ != nil:
			a.element = srqOf(g, e.SRQ)
		}
		g.ev.push(a)
	}
}

func srqOf(g *gctx, v verbs.SRQ) unsafe.Pointer {
	reg.RLock()
	defer reg.RUnlock()
	for _, o := range reg.m {
		if s, ok := o.(*gsrq); ok && s.v == v {
			return unsafe.Pointer(s.c)
		}
	}
	return nil
}

//export gr_async_event
func gr_async_event(c *C.struct_ibv_context, out *C.struct_gr_async) C.int {
	g := ctxOf(c)
	if g == nil {
		return einval
	}
	a, ok := g.ev.pop()
	if !ok {
		return C.int(syscall.EAGAIN)
	}
	*out = a
	return 0
}

//export gr_chan_ok
func gr_chan_ok(ch *C.struct_ibv_comp_channel) C.int {
	if get[gchan](unsafe.Pointer(ch)) == nil {
		return 0
	}
	return 1
}

//export gr_context_ok
func gr_context_ok(c *C.struct_ibv_context) C.int {
	if ctxOf(c) == nil {
		return 0
	}
	return 1
}
