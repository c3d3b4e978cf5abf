package verbstest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// The verbs of UC, memory windows, fast registration, invalidation,
// ATOMIC_WRITE and FLUSH. A provider without one (no MWAllocator,
// FastRegAllocator or MWBinder; a device whose CapFlags lack ATOMIC_WRITE or
// FLUSH_GLOBAL) skips its test, saying which.

func caps(t *testing.T, ctx verbs.Context) verbs.DeviceCap {
	t.Helper()
	a, err := ctx.QueryDevice()
	if err != nil {
		t.Fatalf("QueryDevice: %v", err)
	}
	return a.CapFlags
}

// regMR registers n bytes of s's buffer at off with access, deregistered
// at the end.
func (s *side) regMR(t *testing.T, off, n int, access verbs.AccessFlags) verbs.MR {
	t.Helper()
	mr, err := s.pd.RegMR(s.buf[off:off+n:off+n], access)
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	t.Cleanup(func() { check(t, "Dereg", mr.Dereg()) })
	return mr
}

// grant gives an RTS QP the access flags (RTS to RTS).
func grant(t *testing.T, qp verbs.QP, access verbs.AccessFlags) {
	t.Helper()
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, AccessFlags: access}, verbs.AttrState|verbs.AttrAccessFlags); err != nil {
		t.Fatalf("access flags %#x: %v", access, err)
	}
}

func testUC(t *testing.T, env *Env) {
	a := newSide(t, env, env.A, env.GIDIndexA, false)
	b := newSide(t, env, env.B, env.GIDIndexB, false)
	qa, qb := a.createQP(t, verbs.QPTUC, nil), b.createQP(t, verbs.QPTUC, nil)
	for _, x := range []struct {
		qp       verbs.QP
		me, peer *side
		peerQPN  uint32
	}{{qa, a, b, qb.Num()}, {qb, b, a, qa.Num()}} {
		steps := []struct {
			attr verbs.QPAttr
			mask verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPSInit, PortNum: env.Port, AccessFlags: verbs.AccessRemoteWrite}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: env.MTU, DestQPN: x.peerQPN, RQPSN: 0x200,
				AHAttr: verbs.AHAttr{DGID: x.peer.gid, SGIDIndex: uint8(x.me.gidx), HopLimit: 64, PortNum: env.Port}},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN},
			{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x200}, verbs.AttrState | verbs.AttrSQPSN},
		}
		for _, s := range steps {
			if err := x.qp.Modify(&s.attr, s.mask); err != nil {
				t.Fatalf("UC QP to %v: %v", s.attr.State, err)
			}
		}
	}
	fill(a.buf[:4096], 3)
	qa.Query()
	postRecv(t, qb, verbs.RecvWR{WRID: 1, SGList: b.sge(0, 4096)}, verbs.RecvWR{WRID: 2, SGList: b.sge(4096, 16)})
	post(t, qa,
		verbs.SendWR{WRID: 10, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 3000)},
		verbs.SendWR{WRID: 11, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 2000), RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()},
		verbs.SendWR{WRID: 12, Opcode: verbs.WRRDMAWriteWithImm, Imm: 0x1234, Flags: verbs.SendSignaled, SGList: a.sge(64, 16), RemoteAddr: b.mr.Addr() + 12288, RKey: b.mr.RKey()})
	sw := waitWC(t, env, a.scq, 3)
	expect(t, sw[0], 10, verbs.WCSuccess, verbs.WCSend)
	expect(t, sw[1], 11, verbs.WCSuccess, verbs.WCRDMAWrite)
	expect(t, sw[2], 12, verbs.WCSuccess, verbs.WCRDMAWrite)
	rw := waitWC(t, env, b.rcq, 2)
	expect(t, rw[0], 1, verbs.WCSuccess, verbs.WCRecv)
	expect(t, rw[1], 2, verbs.WCSuccess, verbs.WCRecvRDMAWithImm)
	qa.Query()
	qb.Query()
	if rw[0].ByteLen != 3000 || rw[1].Imm != 0x1234 || !bytes.Equal(b.buf[:3000], a.buf[:3000]) ||
		!bytes.Equal(b.buf[8192:8192+2000], a.buf[:2000]) || !bytes.Equal(b.buf[12288:12288+16], a.buf[64:80]) {
		t.Fatalf("UC data or completions wrong: %+v", rw)
	}
	// A WRITE with a bad R_Key is dropped: the QP lives on.
	post(t, qa, verbs.SendWR{WRID: 13, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x80})
	waitWC(t, env, a.scq, 1)
	postRecv(t, qb, verbs.RecvWR{WRID: 3, SGList: b.sge(0, 64)})
	post(t, qa, verbs.SendWR{WRID: 14, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 8)})
	waitWC(t, env, a.scq, 1)
	expect(t, waitWC(t, env, b.rcq, 1)[0], 3, verbs.WCSuccess, verbs.WCRecv)
}

func testAtomicWrite(t *testing.T, env *Env) {
	p := newRCPair(t, env, false)
	if caps(t, env.B)&verbs.DeviceCapAtomicWrite == 0 {
		t.Skip("the device does not report ATOMIC_WRITE")
	}
	binary.NativeEndian.PutUint64(p.a.buf[0:], 0x0102030405060708)
	p.sync()
	post(t, p.qa, verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled, SGList: p.a.sge(0, 8), RemoteAddr: p.b.mr.Addr() + 64, RKey: p.b.mr.RKey()})
	wc := waitWC(t, env, p.a.scq, 1)[0]
	expect(t, wc, 1, verbs.WCSuccess, verbs.WCAtomicWrite)
	p.sync()
	if !bytes.Equal(p.b.buf[64:72], p.a.buf[:8]) {
		t.Fatalf("ATOMIC_WRITE stored % x", p.b.buf[64:72])
	}
	// Misaligned: an invalid request (REM_INV_REQ_ERR), memory unchanged.
	before := bytes.Clone(p.b.buf)
	post(t, p.qa, verbs.SendWR{WRID: 2, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled, SGList: p.a.sge(0, 8), RemoteAddr: p.b.mr.Addr() + 68, RKey: p.b.mr.RKey()})
	expect(t, waitWC(t, env, p.a.scq, 1)[0], 2, verbs.WCRemInvReqErr, verbs.WCAtomicWrite)
	p.sync()
	if !bytes.Equal(before, p.b.buf) {
		t.Fatal("a misaligned ATOMIC_WRITE changed memory")
	}
}

func testFlush(t *testing.T, env *Env) {
	p := newRCPair(t, env, false)
	if caps(t, env.B)&verbs.DeviceCapFlushGlobal == 0 {
		t.Skip("the device does not report FLUSH_GLOBAL")
	}
	grant(t, p.qb, verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessFlushGlobal)
	mr := p.b.regMR(t, 4096, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessFlushGlobal)
	if _, err := p.qa.PostSend([]verbs.SendWR{{WRID: 9, Opcode: verbs.WRFlush, RKey: mr.RKey(), FlushType: verbs.FlushGlobal, FlushLevel: verbs.FlushMR}}); errors.Is(err, verbs.ErrNotSupported) {
		t.Skipf("the provider cannot post FLUSH: %v", err)
	} else if err != nil {
		t.Fatalf("PostSend FLUSH: %v", err)
	}
	post(t, p.qa,
		verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: p.a.sge(0, 256), RemoteAddr: mr.Addr(), RKey: mr.RKey()},
		verbs.SendWR{WRID: 2, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: mr.Addr(), RKey: mr.RKey(), FlushLen: 256, FlushType: verbs.FlushGlobal},
		verbs.SendWR{WRID: 3, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RKey: mr.RKey(), FlushType: verbs.FlushGlobal, FlushLevel: verbs.FlushMR})
	w := waitWC(t, env, p.a.scq, 2) // the first FLUSH is unsignaled
	expect(t, w[0], 2, verbs.WCSuccess, verbs.WCFlush)
	expect(t, w[1], 3, verbs.WCSuccess, verbs.WCFlush)
	// Beyond the region: a remote access error.
	post(t, p.qa, verbs.SendWR{WRID: 4, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: mr.Addr() + 4000, RKey: mr.RKey(), FlushLen: 200, FlushType: verbs.FlushGlobal})
	expect(t, waitWC(t, env, p.a.scq, 1)[0], 4, verbs.WCRemAccessErr, verbs.WCFlush)
}

func testMWType2(t *testing.T, env *Env) {
	p := newRCPair(t, env, false)
	al, ok := p.b.pd.(verbs.MWAllocator)
	if !ok {
		t.Skip("the provider has no memory windows (verbs.MWAllocator)")
	}
	mw, err := al.AllocMW(verbs.MWType2)
	if errors.Is(err, verbs.ErrNotSupported) {
		t.Skipf("AllocMW type 2: %v", err)
	} else if err != nil {
		t.Fatalf("AllocMW: %v", err)
	}
	defer mw.Dealloc()
	mr := p.b.regMR(t, 8192, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessMWBind)
	key := verbs.IncRKey(mw.RKey())
	post(t, p.qb, verbs.SendWR{WRID: 1, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
		Bind: &verbs.BindMWWR{MW: mw, RKey: key, MR: mr, Addr: mr.Addr() + 512, Length: 1024, Access: verbs.AccessRemoteWrite}})
	expect(t, waitWC(t, env, p.b.scq, 1)[0], 1, verbs.WCSuccess, verbs.WCBindMW)
	fill(p.a.buf[:64], 9)
	p.sync()
	post(t, p.qa, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: p.a.sge(0, 64), RemoteAddr: mr.Addr() + 512, RKey: key})
	expect(t, waitWC(t, env, p.a.scq, 1)[0], 2, verbs.WCSuccess, verbs.WCRDMAWrite)
	p.sync()
	if !bytes.Equal(p.b.buf[8192+512:8192+576], p.a.buf[:64]) {
		t.Fatal("WRITE through the window: data differs")
	}
	// Remote invalidation: SEND_WITH_INV names the window's key.
	postRecv(t, p.qb, verbs.RecvWR{WRID: 3, SGList: p.b.sge(0, 64)})
	post(t, p.qa, verbs.SendWR{WRID: 4, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, InvalidateRKey: key, SGList: p.a.sge(0, 8)})
	expect(t, waitWC(t, env, p.a.scq, 1)[0], 4, verbs.WCSuccess, verbs.WCSend)
	rw := waitWC(t, env, p.b.rcq, 1)[0]
	expect(t, rw, 3, verbs.WCSuccess, verbs.WCRecv)
	switch {
	case rw.Flags&verbs.WCFlagWithInv != 0 && rw.InvalidatedRKey != key:
		t.Fatalf("receive of SEND_WITH_INV: %+v", rw)
	case rw.Flags&verbs.WCFlagWithInv == 0:
		// rdma_rxe writes the kernel's IB_WC_WITH_INVALIDATE (bit 2),
		// which libibverbs reads as IBV_WC_IP_CSUM_OK: the window's
		// invalidation, checked below, is what counts.
		t.Logf("the receive of SEND_WITH_INV lacks WITH_INV (flags %#x)", uint32(rw.Flags))
	}
	// The invalidated key reaches nothing.
	before := bytes.Clone(p.b.buf)
	post(t, p.qa, verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: p.a.sge(0, 8), RemoteAddr: mr.Addr() + 512, RKey: key})
	expect(t, waitWC(t, env, p.a.scq, 1)[0], 5, verbs.WCRemAccessErr, verbs.WCRDMAWrite)
	p.sync()
	if !bytes.Equal(before, p.b.buf) {
		t.Fatal("a WRITE through an invalidated window changed memory")
	}
}

func testMWType1(t *testing.T, env *Env) {
	p := newRCPair(t, env, false)
	al, ok := p.b.pd.(verbs.MWAllocator)
	binder, ok2 := p.qb.(verbs.MWBinder)
	if !ok || !ok2 {
		t.Skip("the provider has no type 1 windows (verbs.MWAllocator, verbs.MWBinder)")
	}
	mw, err := al.AllocMW(verbs.MWType1)
	if err != nil {
		t.Fatalf("AllocMW: %v", err)
	}
	defer mw.Dealloc()
	mr := p.b.regMR(t, 8192, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessMWBind)
	key, err := binder.BindMW(&verbs.BindMWWR{MW: mw, MR: mr, Addr: mr.Addr(), Length: 256, Access: verbs.AccessRemoteRead}, 1, verbs.SendSignaled)
	if err != nil {
		t.Fatalf("BindMW: %v", err)
	}
	expect(t, waitWC(t, env, p.b.scq, 1)[0], 1, verbs.WCSuccess, verbs.WCBindMW)
	fill(p.b.buf[8192:8192+256], 4)
	p.sync()
	post(t, p.qa, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: p.a.sge(0, 256), RemoteAddr: mr.Addr(), RKey: key})
	expect(t, waitWC(t, env, p.a.scq, 1)[0], 2, verbs.WCSuccess, verbs.WCRDMARead)
	p.sync()
	if !bytes.Equal(p.a.buf[:256], p.b.buf[8192:8192+256]) {
		t.Fatal("READ through a type 1 window: data differs")
	}
	// The window grants no write.
	post(t, p.qa, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: p.a.sge(0, 8), RemoteAddr: mr.Addr(), RKey: key})
	expect(t, waitWC(t, env, p.a.scq, 1)[0], 3, verbs.WCRemAccessErr, verbs.WCRDMAWrite)
}

func testFastReg(t *testing.T, env *Env) {
	p := newRCPair(t, env, false)
	al, ok := p.b.pd.(verbs.FastRegAllocator)
	if !ok {
		t.Skip("the provider has no fast registration (verbs.FastRegAllocator; libibverbs has no REG_MR)")
	}
	fr, err := al.AllocMR(4)
	if err != nil {
		t.Fatalf("AllocMR: %v", err)
	}
	defer fr.Dereg()
	if _, err := fr.MapSG(p.b.sge(4096, 4096)); err != nil {
		t.Fatalf("MapSG: %v", err)
	}
	key := verbs.IncRKey(fr.RKey())
	post(t, p.qb, verbs.SendWR{WRID: 1, Opcode: verbs.WRRegMR, Flags: verbs.SendSignaled,
		Reg: &verbs.RegMRWR{MR: fr, Key: key, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}})
	expect(t, waitWC(t, env, p.b.scq, 1)[0], 1, verbs.WCSuccess, verbs.WCRegMR)
	post(t, p.qa, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: p.a.sge(0, 32), RemoteAddr: fr.Addr() + 100, RKey: key})
	expect(t, waitWC(t, env, p.a.scq, 1)[0], 2, verbs.WCSuccess, verbs.WCRDMAWrite)
	post(t, p.qb, verbs.SendWR{WRID: 3, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: key})
	expect(t, waitWC(t, env, p.b.scq, 1)[0], 3, verbs.WCSuccess, verbs.WCLocalInv)
	post(t, p.qa, verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: p.a.sge(0, 32), RemoteAddr: fr.Addr() + 100, RKey: key})
	expect(t, waitWC(t, env, p.a.scq, 1)[0], 4, verbs.WCRemAccessErr, verbs.WCRDMAWrite)
}
