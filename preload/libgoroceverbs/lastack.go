//go:build linux && cgo && ibverbs

package main

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
	"unsafe"

	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// lastACKResult is what lastACK saw.
type lastACKResult struct {
	Rounds       int    // messages received, each followed at once by ibv_destroy_qp
	AckedBefore  int    // rounds in which the library's device had sent a packet (the ACK) when destroy returned
	PeerOK       int    // rounds in which the peer's SEND completed successfully
	Retransmits  uint64 // the peer's request packets sent again
	UnknownDrops uint64 // packets the library's device received for no QP (a retransmission after destroy)
}

// lastACK measures what ibv_destroy_qp does with the ACK of the last
// message an RC QP received. A device of the library on addrA (its socket
// opened by inA, in the namespace of addrA) and a plain soft device on
// addrB (opened by inB) connect a fresh RC QP pair in each of rounds
// rounds; the peer sends one message, and the library's side polls its
// receive completion (gr_poll_cq) and destroys its QP (gr_destroy_qp) at
// once, as a program that has received all it waited for does. The test
// of this package calls it.
func lastACK(inA, inB func(func() error) error, addrA, addrB netip.Addr, rounds int) (lastACKResult, error) {
	var res lastACKResult
	configured() // the environment's devices first; this one is the test's own
	dA := newDevice(soft.OpenOptions{Name: "lastack", Addr: addrA.String(), Path: "udp"}, addrA)
	devs = append(devs, dA)
	var ctx *C.struct_ibv_context
	if err := inA(func() error {
		if gr_open_device(dA.c, &ctx) != 0 {
			return errors.New("open the library's device")
		}
		return nil
	}); err != nil {
		return res, err
	}
	defer gr_close_device(ctx)
	var sdB *soft.Device
	if err := inB(func() error {
		var err error
		sdB, _, err = soft.Open(soft.OpenOptions{Name: "peer", Addr: addrB.String(), Path: "udp"})
		return err
	}); err != nil {
		return res, err
	}
	defer sdB.Close()
	b, err := newPeer(sdB)
	if err != nil {
		return res, err
	}
	a, err := newLibSide(ctx)
	if err != nil {
		return res, err
	}
	defer a.close()
	for range rounds {
		acked, ok, err := lastACKRound(a, b, dA.dev)
		if err != nil {
			return res, err
		}
		res.Rounds++
		if acked {
			res.AckedBefore++
		}
		if ok {
			res.PeerOK++
		}
	}
	res.Retransmits = sdB.Stats().Retransmits
	res.UnknownDrops = dA.dev.Stats().UnknownQPDrops
	return res, nil
}

// peer is the plain soft device's side of lastACK.
type peer struct {
	ctx verbs.Context
	pd  verbs.PD
	cq  verbs.CQ
	mr  verbs.MR
}

func newPeer(d *soft.Device) (*peer, error) {
	p := &peer{}
	var err error
	if p.ctx, err = d.Open(); err != nil {
		return nil, err
	}
	if p.pd, err = p.ctx.AllocPD(); err != nil {
		return nil, err
	}
	if p.cq, err = p.ctx.CreateCQ(16, nil); err != nil {
		return nil, err
	}
	p.mr, err = p.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	return p, err
}

// libSide is the library's side of lastACK: its objects, made through the
// C entry points.
type libSide struct {
	ctx *C.struct_ibv_context
	pd  *C.struct_ibv_pd
	cq  *C.struct_ibv_cq
	mr  *C.struct_ibv_mr
	buf unsafe.Pointer
	wcs *C.struct_gr_wc
}

func newLibSide(ctx *C.struct_ibv_context) (*libSide, error) {
	s := &libSide{ctx: ctx, buf: C.calloc(1, 64), wcs: (*C.struct_gr_wc)(C.calloc(4, C.sizeof_struct_gr_wc))}
	if gr_alloc_pd(ctx, &s.pd) != 0 || gr_create_cq(ctx, 16, nil, nil, &s.cq) != 0 ||
		gr_reg_mr(s.pd, s.buf, 64, C.uint64_t(uintptr(s.buf)), C.IBV_ACCESS_LOCAL_WRITE, &s.mr) != 0 {
		return nil, errors.New("the library's PD, CQ or MR")
	}
	return s, nil
}

func (s *libSide) close() {
	gr_dereg_mr(s.mr)
	gr_destroy_cq(s.cq)
	gr_dealloc_pd(s.pd)
	C.free(s.buf)
	C.free(unsafe.Pointer(s.wcs))
}

// lastACKRound runs one round of lastACK: it reports whether the library's
// device had sent a packet since the peer's SEND when gr_destroy_qp
// returned, and whether the peer's SEND completed successfully.
func lastACKRound(a *libSide, b *peer, dA *soft.Device) (acked, ok bool, err error) {
	ia := C.struct_ibv_qp_init_attr{qp_type: C.IBV_QPT_RC, send_cq: a.cq, recv_cq: a.cq}
	ia.cap = C.struct_ibv_qp_cap{max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1}
	var q *C.struct_ibv_qp
	if gr_create_qp(a.pd, &ia, &q) != 0 {
		return false, false, errors.New("the library's QP")
	}
	qa := get[gqp](unsafe.Pointer(q))
	qb, err := b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.cq, RecvCQ: b.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		gr_destroy_qp(q)
		return false, false, err
	}
	defer qb.Destroy()
	if err := connectPair(get[gctx](unsafe.Pointer(a.ctx)).v, qa.v, b.ctx, qb); err != nil {
		gr_destroy_qp(q)
		return false, false, err
	}
	q.state = C.IBV_QPS_RTS
	if _, err := qa.v.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{{Addr: uint64(uintptr(a.buf)), Length: 64, LKey: uint32(a.mr.lkey)}}}}); err != nil {
		gr_destroy_qp(q)
		return false, false, err
	}
	tx := dA.Stats().TxPackets
	if _, err := qb.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: b.mr.Addr(), Length: 16, LKey: b.mr.LKey()}}}}); err != nil {
		gr_destroy_qp(q)
		return false, false, err
	}
	// The receive completes; the QP is destroyed at once.
	for t0 := time.Now(); gr_poll_cq(a.cq, 4, a.wcs) != 1; {
		if time.Since(t0) > 2*time.Second {
			gr_destroy_qp(q)
			return false, false, errors.New("the library's receive did not complete")
		}
	}
	if a.wcs.status != 0 {
		return false, false, fmt.Errorf("the library's receive completed with status %d", a.wcs.status)
	}
	if e := gr_destroy_qp(q); e != 0 {
		return false, false, fmt.Errorf("ibv_destroy_qp: errno %d", e)
	}
	acked = dA.Stats().TxPackets > tx
	wc := make([]verbs.WC, 1)
	for t0 := time.Now(); time.Since(t0) < 2*time.Second; time.Sleep(100 * time.Microsecond) {
		if b.cq.Poll(wc) == 1 {
			return acked, wc[0].Status == verbs.WCSuccess, nil
		}
	}
	return acked, false, nil
}

// connectPair connects two RC QPs, each from its own context.
func connectPair(ca verbs.Context, qa verbs.QP, cb verbs.Context, qb verbs.QP) error {
	ea, err := verbs.NewEndpoint(ca, qa, 1, verbs.DefaultGIDIndex)
	if err != nil {
		return err
	}
	eb, err := verbs.NewEndpoint(cb, qb, 1, verbs.DefaultGIDIndex)
	if err != nil {
		return err
	}
	// One retry after the default timeout (about 67 ms): a last ACK that
	// never left shows as a retransmission to a QP that is gone, then as a
	// SEND that failed.
	o := &verbs.ConnectOptions{RetryCnt: 1}
	if err := verbs.Connect(qa, ea, eb, o); err != nil {
		return err
	}
	return verbs.Connect(qb, eb, ea, o)
}
