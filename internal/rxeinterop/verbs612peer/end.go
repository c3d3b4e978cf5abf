package main

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/verbs"
)

// end is one end's objects: RC QPs x and y, UC QP u, a registered buffer
// and a type 2 window over [1024, 2048) of it.
type end struct {
	ctx      verbs.Context
	gidx     int
	gid      verbs.GID
	pd       verbs.PD
	scq, rcq verbs.CQ
	x, y, u  verbs.QP
	z        verbs.QP // RC, for FLUSH only: its failure leaves x and y alone
	mr       verbs.MR
	buf      []byte
	mw       verbs.MW
	mwKey    uint32
	role     byte
	flushMR  verbs.MR // [6144, 8192) with FLUSH_GLOBAL, or nil
}

const mrAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic | verbs.AccessMWBind

func newEnd(ctx verbs.Context, gidx int) (*end, error) {
	e := &end{ctx: ctx, gidx: gidx, buf: make([]byte, 8192)}
	var err error
	if e.gid, err = ctx.QueryGID(1, gidx); err != nil {
		return nil, err
	}
	if e.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if e.scq, err = ctx.CreateCQ(64, nil); err != nil {
		return nil, err
	}
	if e.rcq, err = ctx.CreateCQ(64, nil); err != nil {
		return nil, err
	}
	if e.mr, err = e.pd.RegMR(e.buf, mrAccess); err != nil {
		return nil, fmt.Errorf("RegMR: %w", err)
	}
	qa := &verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	for _, q := range []*verbs.QP{&e.x, &e.y, &e.z} {
		if *q, err = e.pd.CreateQP(qa); err != nil {
			return nil, fmt.Errorf("CreateQP RC: %w", err)
		}
	}
	qa.QPType = verbs.QPTUC
	if e.u, err = e.pd.CreateQP(qa); err != nil {
		return nil, fmt.Errorf("CreateQP UC: %w", err)
	}
	// A region a FLUSH may name; a device or library that refuses the
	// access flag leaves FLUSH out.
	if e.flushMR, err = e.pd.RegMR(e.buf[6144:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessFlushGlobal); err != nil {
		fmt.Println("no FLUSH region:", err)
		e.flushMR = nil
	}
	al, ok := e.pd.(verbs.MWAllocator)
	if !ok {
		return nil, errors.New("the provider has no memory windows")
	}
	if e.mw, err = al.AllocMW(verbs.MWType2); err != nil {
		return nil, fmt.Errorf("AllocMW: %w", err)
	}
	return e, nil
}

// theirs is the QP this end sends its requests on; mine the one the peer
// sends its requests to (the window is bound through it).
func (e *end) theirs() verbs.QP {
	if e.role == 1 {
		return e.x
	}
	return e.y
}

func (e *end) mine() verbs.QP {
	if e.role == 1 {
		return e.y
	}
	return e.x
}

// connect brings the QPs to RTS aimed at the peer's, and posts the
// receives: one on mine (the SEND_WITH_INV), one on u (the UC SEND).
func (e *end) connect(t *info) error {
	av := verbs.AHAttr{DGID: t.GID, SGIDIndex: uint8(e.gidx), HopLimit: 64, PortNum: 1}
	rc := verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	for _, c := range []struct {
		qp  verbs.QP
		dst uint32
	}{{e.x, t.X}, {e.y, t.Y}, {e.z, t.Z}} {
		steps := []struct {
			a verbs.QPAttr
			m verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: rc}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: c.dst, RQPSN: 0x100, MaxDestRdAtomic: 4, MinRNRTimer: 12, AHAttr: av},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x100, Timeout: 17, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
				verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := c.qp.Modify(&s.a, s.m); err != nil {
				return fmt.Errorf("RC QP to %v: %w", s.a.State, err)
			}
		}
	}
	steps := []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: t.U, RQPSN: 0x100, AHAttr: av}, verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN},
		{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x100}, verbs.AttrState | verbs.AttrSQPSN},
	}
	for _, s := range steps {
		if err := e.u.Modify(&s.a, s.m); err != nil {
			return fmt.Errorf("UC QP to %v: %w", s.a.State, err)
		}
	}
	if e.flushMR != nil {
		if err := e.z.Modify(&verbs.QPAttr{State: verbs.QPSRTS, AccessFlags: rc | verbs.AccessFlushGlobal}, verbs.AttrState|verbs.AttrAccessFlags); err != nil {
			fmt.Println("no FLUSH access on the QP:", err)
			e.flushMR = nil
		}
	}
	if _, err := e.mine().PostRecv([]verbs.RecvWR{{WRID: 201, SGList: e.sge(4096, 64)}}); err != nil {
		return err
	}
	_, err := e.u.PostRecv([]verbs.RecvWR{{WRID: 202, SGList: e.sge(4352, 128)}})
	return err
}

func (e *end) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}
}

// post posts wrs on qp and waits for n completions on cq, each wanted.
func (e *end) post(qp verbs.QP, wrs []verbs.SendWR, want ...verbs.WCStatus) ([]verbs.WC, error) {
	if _, err := qp.PostSend(wrs); err != nil {
		return nil, err
	}
	wcs, err := e.wait(e.scq, len(want))
	for i := range wcs {
		if wcs[i].Status != want[i] {
			return wcs, fmt.Errorf("completion %d: %v %v, want %v", i, wcs[i].Opcode, wcs[i].Status, want[i])
		}
	}
	return wcs, err
}

func (e *end) wait(cq verbs.CQ, n int) ([]verbs.WC, error) {
	var out []verbs.WC
	w := make([]verbs.WC, 8)
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < n {
		k := cq.Poll(w[:n-len(out)])
		out = append(out, w[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				return out, fmt.Errorf("%d of %d completions in 20 s", len(out), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return out, nil
}

// bindMW binds the window over [1024, 2048) through mine (BIND_MW).
func (e *end) bindMW() error {
	e.mwKey = verbs.IncRKey(e.mw.RKey())
	_, err := e.post(e.mine(), []verbs.SendWR{{WRID: 1, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
		Bind: &verbs.BindMWWR{MW: e.mw, RKey: e.mwKey, MR: e.mr, Addr: e.mr.Addr() + 1024, Length: 1024, Access: verbs.AccessRemoteWrite}}}, verbs.WCSuccess)
	return err
}

func (e *end) atomicWrite(t *info) error {
	for i := range 8 {
		e.buf[512+i] = e.role * 0x11
	}
	wcs, err := e.post(e.theirs(), []verbs.SendWR{{WRID: 2, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled, SGList: e.sge(512, 8),
		RemoteAddr: t.Addr, RKey: t.RKey}}, verbs.WCSuccess)
	if err == nil && wcs[0].Opcode != verbs.WCAtomicWrite {
		err = fmt.Errorf("completion opcode %v", wcs[0].Opcode)
	}
	if err == nil {
		fmt.Println("PASS atomic_write")
	}
	return err
}

func (e *end) ucOps(t *info) error {
	pattern(e.buf[600:664], e.role)
	pattern(e.buf[700:800], e.role+4)
	_, err := e.post(e.u, []verbs.SendWR{
		{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: e.sge(600, 64), RemoteAddr: t.Addr + 64, RKey: t.RKey},
		{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: e.sge(700, 100)}}, verbs.WCSuccess, verbs.WCSuccess)
	if err == nil {
		fmt.Println("PASS uc_write_send")
	}
	return err
}

func (e *end) mwOps(t *info) error {
	pattern(e.buf[900:916], e.role+8)
	_, err := e.post(e.theirs(), []verbs.SendWR{
		{WRID: 5, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: e.sge(900, 16), RemoteAddr: t.Addr + 1024, RKey: t.MWKey},
		{WRID: 6, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, SGList: e.sge(900, 8), InvalidateRKey: t.MWKey}}, verbs.WCSuccess, verbs.WCSuccess)
	if err == nil {
		fmt.Println("PASS mw_write_send_with_inv")
	}
	return err
}

// check checks what the peer placed, and the receives it completed.
func (e *end) check(t *info) error {
	want := make([]byte, 100)
	for i := range 8 {
		want[i] = t.Role * 0x11
	}
	if !bytes.Equal(e.buf[0:8], want[:8]) {
		return fmt.Errorf("ATOMIC_WRITE placed % x", e.buf[0:8])
	}
	if pattern(want[:64], t.Role); !bytes.Equal(e.buf[64:128], want[:64]) {
		return fmt.Errorf("UC WRITE placed % x", e.buf[64:80])
	}
	if pattern(want[:16], t.Role+8); !bytes.Equal(e.buf[1024:1040], want[:16]) {
		return fmt.Errorf("WRITE through the window placed % x", e.buf[1024:1040])
	}
	wcs, err := e.wait(e.rcq, 2)
	if err != nil {
		return err
	}
	for _, w := range wcs {
		if w.Status != verbs.WCSuccess {
			return fmt.Errorf("receive %d: %v", w.WRID, w.Status)
		}
		fmt.Printf("receive wr_id %d: %d bytes, flags %#x, invalidated rkey %#x (the window's %#x)\n", w.WRID, w.ByteLen, uint32(w.Flags), w.InvalidatedRKey, e.mwKey)
		if w.WRID == 202 {
			if pattern(want[:100], t.Role+4); w.ByteLen != 100 || !bytes.Equal(e.buf[4352:4452], want[:100]) {
				return fmt.Errorf("UC SEND received %d bytes % x", w.ByteLen, e.buf[4352:4360])
			}
		}
	}
	return nil
}

// writeInvalidated writes through the peer's window, which this end's
// SEND_WITH_INV invalidated: REM_ACCESS_ERR.
func (e *end) writeInvalidated(t *info) error {
	_, err := e.post(e.theirs(), []verbs.SendWR{{WRID: 7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: e.sge(900, 16),
		RemoteAddr: t.Addr + 1040, RKey: t.MWKey}}, verbs.WCRemAccessErr)
	return err
}

// flush sends FLUSHes of global visibility to the peer's FLUSH region, a
// range and the whole region, on QP z, when the peer has one and this end
// can post them.
func (e *end) flush(t *info) error {
	if t.FlushKey == 0 {
		fmt.Println("SKIP flush: the peer has no FLUSH region")
		return nil
	}
	wrs := []verbs.SendWR{
		{WRID: 8, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: t.FlushAddr, RKey: t.FlushKey, FlushLen: 256, FlushType: verbs.FlushGlobal},
		{WRID: 9, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RKey: t.FlushKey, FlushType: verbs.FlushGlobal, FlushLevel: verbs.FlushMR},
	}
	if _, err := e.z.PostSend(wrs[:1]); errors.Is(err, verbs.ErrNotSupported) {
		fmt.Println("SKIP flush: this end cannot post FLUSH:", err)
		return nil
	} else if err != nil {
		return err
	}
	if w, err := e.wait(e.scq, 1); err != nil {
		return err
	} else if w[0].Status != verbs.WCSuccess {
		return fmt.Errorf("FLUSH of a range: %v (vendor error %#x)", w[0].Status, w[0].VendorErr)
	}
	wcs, err := e.post(e.z, wrs[1:], verbs.WCSuccess)
	if err == nil && wcs[0].Opcode != verbs.WCFlush {
		err = fmt.Errorf("completion opcode %v", wcs[0].Opcode)
	}
	if err == nil {
		fmt.Println("PASS flush")
	}
	return err
}
