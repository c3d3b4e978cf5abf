// Package verbstest is a conformance suite for verbs providers: the same
// tests run against provider/soft (two soft devices) and provider/ibverbs
// (rdma_rxe or a NIC), so that both behave as libibverbs says.
//
// Run covers RC (SEND, SEND_WITH_IMM, RDMA WRITE, WRITE_WITH_IMM, READ,
// compare-swap, fetch-add, a batch of 32 work requests in one post), UD
// (SEND and SEND_WITH_IMM through an address handle, the 40-byte GRH), a
// shared receive queue fed by two QPs, completion events (ReqNotify, then
// the channel's Wait, and Wait cancelled by its context), an RDMA WRITE with
// a wrong rkey (REM_ACCESS_ERR, then WR_FLUSH_ERR for what follows, send and
// receive), queue pair state transitions, asynchronous events (a CQ overrun
// raises CQ_ERR; GetAsyncEvent is cancelled by its context) and malformed
// requests; and lifetimes as libibverbs enforces them: destroying a PD,
// CQ, completion channel or SRQ still in use fails with verbs.ErrBusy and
// changes nothing, every call after the context (or its device) closed
// fails with verbs.ErrDestroyed, Close and Destroy wake the goroutines
// waiting in CompChannel.Wait and GetAsyncEvent within 100 ms, and closing
// everything in random orders from several goroutines while others post,
// poll and wait neither panics nor hangs.
package verbstest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Env is what the suite runs on: two contexts whose ports reach each other.
// A and B may be the same device (rdma_rxe talks to itself through its own
// GID), or even the same context.
type Env struct {
	A, B verbs.Context
	// Port is the port both sides use (default 1).
	Port uint8
	// GIDIndexA and GIDIndexB are the GID indexes of A and B's addresses.
	GIDIndexA, GIDIndexB int
	// MTU is the RC path MTU (default 1024).
	MTU verbs.MTU
	// Alloc returns memory to register, Free releases it (default: make and
	// nothing).
	Alloc func(n int) ([]byte, error)
	Free  func([]byte) error
	// Wait bounds every wait for a completion (default 20 s: rdma_rxe under
	// emulation is slow).
	Wait time.Duration
	// Fresh, when set, returns two new contexts the lifetime tests may
	// close (Context.Close, and the device's close where that is another
	// call), reaching each other as A and B do, cleaned up at the end of
	// the test. Without it those tests skip.
	Fresh func(t *testing.T) Fresh
	// McastGroup, when set, is an IP multicast group that A's UD sends
	// reach B through (a multicast route, the group joined on B's
	// interface by attaching): the multicast test then checks delivery
	// too, not only attach and detach.
	McastGroup netip.Addr
}

func needFresh(f func(*testing.T, *Env)) func(*testing.T, *Env) {
	return func(t *testing.T, env *Env) {
		if env.Fresh == nil {
			t.Skip("Env.Fresh is not set: no contexts to close")
		}
		f(t, env)
	}
}

func (e *Env) defaults() {
	if e.Port == 0 {
		e.Port = 1
	}
	if e.MTU == 0 {
		e.MTU = verbs.MTU1024
	}
	if e.Alloc == nil {
		e.Alloc = func(n int) ([]byte, error) { return make([]byte, n), nil }
	}
	if e.Wait == 0 {
		e.Wait = 20 * time.Second
	}
}

// Run runs the suite's tests as subtests of t.
func Run(t *testing.T, env Env) {
	env.defaults()
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *Env)
	}{
		{"RC/Ops", testRCOps},
		{"RC/Batch", testRCBatch},
		{"RC/SRQ", testSRQ},
		{"RC/RemoteAccessError", testRemoteAccessError},
		{"UD", testUD},
		{"UD/Mcast", testMcast},
		{"Events", testEvents},
		{"QPStates", testQPStates},
		{"AsyncEvents", testAsyncEvents},
		{"BadInput", testBadInput},
		{"UC", testUC},
		{"RC/AtomicWrite", testAtomicWrite},
		{"RC/Flush", testFlush},
		{"MW/Type1", testMWType1},
		{"MW/Type2", testMWType2},
		{"FastReg", testFastReg},
		{"Lifetime/Busy", testBusy},
		{"Lifetime/ChannelDestroyWakes", testChannelDestroyWakes},
		{"Lifetime/Closed", needFresh(testClosed)},
		{"Lifetime/CloseOrder", needFresh(testCloseOrder)},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, &env) })
	}
}

// memSize is the size of each side's registered buffer.
const memSize = 16 << 10

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// side is one end's objects.
type side struct {
	ctx  verbs.Context
	pd   verbs.PD
	ch   verbs.CompChannel
	scq  verbs.CQ
	rcq  verbs.CQ
	mr   verbs.MR
	buf  []byte
	gid  verbs.GID
	gidx int
}

func newSide(t *testing.T, env *Env, ctx verbs.Context, gidx int, withChannel bool) *side {
	t.Helper()
	s := &side{ctx: ctx, gidx: gidx}
	var err error
	if s.gid, err = ctx.QueryGID(env.Port, gidx); err != nil {
		t.Fatalf("QueryGID(%d, %d): %v", env.Port, gidx, err)
	}
	if s.pd, err = ctx.AllocPD(); err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	t.Cleanup(func() { check(t, "Dealloc PD", s.pd.Dealloc()) })
	if withChannel {
		if s.ch, err = ctx.CreateCompChannel(); err != nil {
			t.Fatalf("CreateCompChannel: %v", err)
		}
		t.Cleanup(func() { check(t, "Destroy channel", s.ch.Destroy()) })
	}
	if s.scq, err = ctx.CreateCQ(256, s.ch); err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	t.Cleanup(func() { check(t, "Destroy CQ", s.scq.Destroy()) })
	if s.rcq, err = ctx.CreateCQ(256, s.ch); err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	t.Cleanup(func() { check(t, "Destroy CQ", s.rcq.Destroy()) })
	if s.buf, err = env.Alloc(memSize); err != nil {
		t.Fatalf("Alloc: %v", err)
	}
	if env.Free != nil {
		buf := s.buf
		t.Cleanup(func() { check(t, "Free", env.Free(buf)) })
	}
	if s.mr, err = s.pd.RegMR(s.buf, allAccess); err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	t.Cleanup(func() { check(t, "Dereg", s.mr.Dereg()) })
	return s
}

func check(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// sge is the SGE of n bytes at off in s's MR.
func (s *side) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: s.mr.Addr() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}}
}

func (s *side) createQP(t *testing.T, typ verbs.QPType, srq verbs.SRQ) verbs.QP {
	t.Helper()
	qp, err := s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq, SRQ: srq, QPType: typ,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
	if err != nil {
		t.Fatalf("CreateQP %v: %v", typ, err)
	}
	t.Cleanup(func() { check(t, "Destroy QP", qp.Destroy()) })
	return qp
}

// connectRC brings qp to RTS aimed at the peer QP peerQPN on peer.
func connectRC(t *testing.T, env *Env, qp verbs.QP, me, peer *side, peerQPN uint32) {
	t.Helper()
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: env.Port, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: env.MTU, DestQPN: peerQPN, RQPSN: 0x100, MaxDestRdAtomic: 4, MinRNRTimer: 12,
			AHAttr: verbs.AHAttr{DGID: peer.gid, SGIDIndex: uint8(me.gidx), HopLimit: 64, PortNum: env.Port}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("QP %#x to %v: %v", qp.Num(), s.attr.State, err)
		}
	}
}

// rcPair is two RC QPs at RTS, aimed at each other.
type rcPair struct {
	a, b     *side
	qa, qb   verbs.QP
	srqB     verbs.SRQ
	env      *Env
	waitSide time.Duration
}

func newRCPair(t *testing.T, env *Env, withChannel bool) *rcPair {
	t.Helper()
	p := &rcPair{env: env}
	p.a = newSide(t, env, env.A, env.GIDIndexA, withChannel)
	p.b = newSide(t, env, env.B, env.GIDIndexB, withChannel)
	p.qa = p.a.createQP(t, verbs.QPTRC, nil)
	p.qb = p.b.createQP(t, verbs.QPTRC, nil)
	connectRC(t, env, p.qa, p.a, p.b, p.qb.Num())
	connectRC(t, env, p.qb, p.b, p.a, p.qa.Num())
	return p
}

// sync makes what either side's CPU wrote to registered memory and what
// either device wrote there visible across goroutines, for the race
// detector: a control call (Query) takes the device's lock, which a soft
// device's driver holds while it reads and writes memory for the peer's
// requests. Real RDMA needs nothing of the sort; it costs two calls.
func (p *rcPair) sync() {
	p.qa.Query()
	p.qb.Query()
}

// waitWC polls cq until n completions arrived or env.Wait passed.
func waitWC(t *testing.T, env *Env, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	out := make([]verbs.WC, 0, n)
	buf := make([]verbs.WC, 16)
	deadline := time.Now().Add(env.Wait)
	for len(out) < n {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions after %v: %+v", len(out), n, env.Wait, out)
			}
			runtime.Gosched()
		}
	}
	// Nothing more is due.
	if k := cq.Poll(buf[:1]); k != 0 {
		t.Fatalf("an unexpected completion: %+v", buf[0])
	}
	return out
}

func expect(t *testing.T, wc verbs.WC, wrid uint64, st verbs.WCStatus, op verbs.WCOpcode) {
	t.Helper()
	if wc.WRID != wrid || wc.Status != st || (st == verbs.WCSuccess && wc.Opcode != op) {
		t.Fatalf("completion wr_id %d %v %v (vendor_err %d), want wr_id %d %v %v", wc.WRID, wc.Status, wc.Opcode, wc.VendorErr, wrid, st, op)
	}
}

func post(t *testing.T, qp verbs.QP, wrs ...verbs.SendWR) {
	t.Helper()
	if n, err := qp.PostSend(wrs); n != len(wrs) || err != nil {
		t.Fatalf("PostSend: %d of %d posted: %v", n, len(wrs), err)
	}
}

func postRecv(t *testing.T, qp interface {
	PostRecv([]verbs.RecvWR) (int, error)
}, wrs ...verbs.RecvWR) {
	t.Helper()
	if n, err := qp.PostRecv(wrs); n != len(wrs) || err != nil {
		t.Fatalf("PostRecv: %d of %d posted: %v", n, len(wrs), err)
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func testRCOps(t *testing.T, env *Env) {
	p := newRCPair(t, env, false)
	a, b := p.a, p.b

	// SEND / RECV, and SEND_WITH_IMM.
	postRecv(t, p.qb, verbs.RecvWR{WRID: 100, SGList: b.sge(0, 512)}, verbs.RecvWR{WRID: 101, SGList: b.sge(512, 512)})
	fill(a.buf[:300], 1)
	post(t, p.qa, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 300)},
		verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, SGList: a.sge(0, 40), Imm: 0x12345678})
	wa := waitWC(t, env, a.scq, 2)
	expect(t, wa[0], 1, verbs.WCSuccess, verbs.WCSend)
	expect(t, wa[1], 2, verbs.WCSuccess, verbs.WCSend)
	wb := waitWC(t, env, b.rcq, 2)
	expect(t, wb[0], 100, verbs.WCSuccess, verbs.WCRecv)
	expect(t, wb[1], 101, verbs.WCSuccess, verbs.WCRecv)
	if wb[0].ByteLen != 300 || wb[0].Flags&verbs.WCFlagWithImm != 0 || wb[0].QPNum != p.qb.Num() {
		t.Errorf("SEND received: %+v, want 300 bytes without immediate on QP %#x", wb[0], p.qb.Num())
	}
	if wb[1].ByteLen != 40 || wb[1].Flags&verbs.WCFlagWithImm == 0 || wb[1].Imm != 0x12345678 {
		t.Errorf("SEND_WITH_IMM received: %+v, want 40 bytes with immediate 0x12345678", wb[1])
	}
	if !bytes.Equal(b.buf[:300], a.buf[:300]) || !bytes.Equal(b.buf[512:552], a.buf[:40]) {
		t.Errorf("SEND data differ")
	}

	// RDMA WRITE and WRITE_WITH_IMM (which consumes a receive).
	fill(a.buf[1024:3024], 3)
	postRecv(t, p.qb, verbs.RecvWR{WRID: 102, SGList: b.sge(0, 16)})
	post(t, p.qa, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(1024, 2000),
		RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()},
		verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, SGList: a.sge(1024, 100),
			RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey(), Imm: 0xfeedf00d})
	wa = waitWC(t, env, a.scq, 2)
	p.sync()
	expect(t, wa[0], 3, verbs.WCSuccess, verbs.WCRDMAWrite)
	expect(t, wa[1], 4, verbs.WCSuccess, verbs.WCRDMAWrite)
	wb = waitWC(t, env, b.rcq, 1)
	expect(t, wb[0], 102, verbs.WCSuccess, verbs.WCRecvRDMAWithImm)
	if wb[0].Flags&verbs.WCFlagWithImm == 0 || wb[0].Imm != 0xfeedf00d {
		t.Errorf("WRITE_WITH_IMM received: %+v, want immediate 0xfeedf00d", wb[0])
	}
	if !bytes.Equal(b.buf[4096:6096], a.buf[1024:3024]) || !bytes.Equal(b.buf[8192:8292], a.buf[1024:1124]) {
		t.Errorf("WRITE data differ")
	}

	// RDMA READ.
	fill(b.buf[12288:13788], 5)
	p.sync()
	post(t, p.qa, verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(4096, 1500),
		RemoteAddr: b.mr.Addr() + 12288, RKey: b.mr.RKey()})
	wa = waitWC(t, env, a.scq, 1)
	expect(t, wa[0], 5, verbs.WCSuccess, verbs.WCRDMARead)
	if !bytes.Equal(a.buf[4096:5596], b.buf[12288:13788]) {
		t.Errorf("READ data differ")
	}

	// Atomics: compare-swap then fetch-add on a word of b (host order).
	const word = 15000
	binary.NativeEndian.PutUint64(b.buf[word:], 5)
	p.sync()
	post(t, p.qa, verbs.SendWR{WRID: 6, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGList: a.sge(8000, 8),
		RemoteAddr: b.mr.Addr() + word, RKey: b.mr.RKey(), CompareAdd: 5, Swap: 9},
		verbs.SendWR{WRID: 7, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGList: a.sge(8008, 8),
			RemoteAddr: b.mr.Addr() + word, RKey: b.mr.RKey(), CompareAdd: 5, Swap: 1000},
		verbs.SendWR{WRID: 8, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: a.sge(8016, 8),
			RemoteAddr: b.mr.Addr() + word, RKey: b.mr.RKey(), CompareAdd: 3})
	wa = waitWC(t, env, a.scq, 3)
	p.sync()
	expect(t, wa[0], 6, verbs.WCSuccess, verbs.WCCompSwap)
	expect(t, wa[1], 7, verbs.WCSuccess, verbs.WCCompSwap)
	expect(t, wa[2], 8, verbs.WCSuccess, verbs.WCFetchAdd)
	got := []uint64{binary.NativeEndian.Uint64(a.buf[8000:]), binary.NativeEndian.Uint64(a.buf[8008:]),
		binary.NativeEndian.Uint64(a.buf[8016:]), binary.NativeEndian.Uint64(b.buf[word:])}
	if want := []uint64{5, 9, 9, 12}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("atomics: originals %v and final %d, want %v", got[:3], got[3], want)
	}
}

func testRCBatch(t *testing.T, env *Env) {
	p := newRCPair(t, env, false)
	const n = 32
	fill(p.a.buf[:n*64], 9)
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(1000 + i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: p.a.sge(i*64, 64), RemoteAddr: p.b.mr.Addr() + uint64(i*64), RKey: p.b.mr.RKey()}
	}
	post(t, p.qa, wrs...)
	wa := waitWC(t, env, p.a.scq, n)
	p.sync()
	for i, wc := range wa {
		expect(t, wc, uint64(1000+i), verbs.WCSuccess, verbs.WCRDMAWrite)
	}
	if !bytes.Equal(p.a.buf[:n*64], p.b.buf[:n*64]) {
		t.Errorf("batched WRITE data differ")
	}

	// 32 receives in one post, 32 SENDs in one post.
	rwrs := make([]verbs.RecvWR, n)
	for i := range rwrs {
		rwrs[i] = verbs.RecvWR{WRID: uint64(2000 + i), SGList: p.b.sge(8192+i*64, 64)}
		wrs[i] = verbs.SendWR{WRID: uint64(3000 + i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: p.a.sge(i*64, 64)}
	}
	postRecv(t, p.qb, rwrs...)
	post(t, p.qa, wrs...)
	wa = waitWC(t, env, p.a.scq, n)
	wb := waitWC(t, env, p.b.rcq, n)
	for i := range wa {
		expect(t, wa[i], uint64(3000+i), verbs.WCSuccess, verbs.WCSend)
		expect(t, wb[i], uint64(2000+i), verbs.WCSuccess, verbs.WCRecv)
	}
	if !bytes.Equal(p.a.buf[:n*64], p.b.buf[8192:8192+n*64]) {
		t.Errorf("batched SEND data differ")
	}
}

func testSRQ(t *testing.T, env *Env) {
	a := newSide(t, env, env.A, env.GIDIndexA, false)
	b := newSide(t, env, env.B, env.GIDIndexB, false)
	srq, err := b.pd.CreateSRQ(64, 1)
	if err != nil {
		t.Fatalf("CreateSRQ: %v", err)
	}
	t.Cleanup(func() { check(t, "Destroy SRQ", srq.Destroy()) })
	a1, a2 := a.createQP(t, verbs.QPTRC, nil), a.createQP(t, verbs.QPTRC, nil)
	b1, b2 := b.createQP(t, verbs.QPTRC, srq), b.createQP(t, verbs.QPTRC, srq)
	connectRC(t, env, a1, a, b, b1.Num())
	connectRC(t, env, a2, a, b, b2.Num())
	connectRC(t, env, b1, b, a, a1.Num())
	connectRC(t, env, b2, b, a, a2.Num())
	var rwrs []verbs.RecvWR
	for i := range 4 {
		rwrs = append(rwrs, verbs.RecvWR{WRID: uint64(500 + i), SGList: b.sge(i*256, 256)})
	}
	postRecv(t, srq, rwrs...)
	fill(a.buf[:200], 11)
	post(t, a1, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 100)})
	waitWC(t, env, a.scq, 1)
	post(t, a2, verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, SGList: a.sge(100, 100), Imm: 77})
	waitWC(t, env, a.scq, 1)
	wb := waitWC(t, env, b.rcq, 2)
	expect(t, wb[0], 500, verbs.WCSuccess, verbs.WCRecv)
	expect(t, wb[1], 501, verbs.WCSuccess, verbs.WCRecv)
	if wb[0].QPNum != b1.Num() || wb[1].QPNum != b2.Num() || wb[0].ByteLen != 100 || wb[1].Imm != 77 {
		t.Errorf("SRQ receives %+v, want QPs %#x then %#x", wb, b1.Num(), b2.Num())
	}
	if !bytes.Equal(b.buf[:100], a.buf[:100]) || !bytes.Equal(b.buf[256:356], a.buf[100:200]) {
		t.Errorf("SRQ data differ")
	}
}

func testRemoteAccessError(t *testing.T, env *Env) {
	p := newRCPair(t, env, false)
	postRecv(t, p.qa, verbs.RecvWR{WRID: 40, SGList: p.a.sge(0, 64)})
	post(t, p.qa,
		verbs.SendWR{WRID: 41, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: p.a.sge(0, 64),
			RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey() ^ 0x5a5a00},
		verbs.SendWR{WRID: 42, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: p.a.sge(0, 64),
			RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey()})
	wa := waitWC(t, env, p.a.scq, 2)
	expect(t, wa[0], 41, verbs.WCRemAccessErr, 0)
	expect(t, wa[1], 42, verbs.WCWRFlushErr, 0)
	wr := waitWC(t, env, p.a.rcq, 1)
	expect(t, wr[0], 40, verbs.WCWRFlushErr, 0)
	if at, err := p.qa.Query(); err != nil || at.State != verbs.QPSErr {
		t.Errorf("requester QP after the error: %v, %v; want ERR", at.State, err)
	}
}

func testUD(t *testing.T, env *Env) {
	a := newSide(t, env, env.A, env.GIDIndexA, false)
	b := newSide(t, env, env.B, env.GIDIndexB, false)
	const qkey = 0x11111111
	qa, qb := a.createQP(t, verbs.QPTUD, nil), b.createQP(t, verbs.QPTUD, nil)
	for _, qp := range []verbs.QP{qa, qb} {
		for _, s := range []struct {
			attr verbs.QPAttr
			mask verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPSInit, PortNum: env.Port, QKey: qkey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
			{verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState},
			{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x42}, verbs.AttrState | verbs.AttrSQPSN},
		} {
			if err := qp.Modify(&s.attr, s.mask); err != nil {
				t.Fatalf("UD QP to %v: %v", s.attr.State, err)
			}
		}
	}
	ah, err := a.pd.CreateAH(&verbs.AHAttr{DGID: b.gid, SGIDIndex: uint8(a.gidx), HopLimit: 64, PortNum: env.Port})
	if err != nil {
		t.Fatalf("CreateAH: %v", err)
	}
	t.Cleanup(func() { check(t, "Destroy AH", ah.Destroy()) })
	if ah.Attr().DGID != b.gid {
		t.Errorf("AH attr %+v", ah.Attr())
	}
	postRecv(t, qb, verbs.RecvWR{WRID: 60, SGList: b.sge(0, 40+512)}, verbs.RecvWR{WRID: 61, SGList: b.sge(1024, 40+512)})
	fill(a.buf[:256], 13)
	post(t, qa, verbs.SendWR{WRID: 50, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 256),
		AH: ah, RemoteQPN: qb.Num(), RemoteQKey: qkey},
		verbs.SendWR{WRID: 51, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, SGList: a.sge(0, 32),
			AH: ah, RemoteQPN: qb.Num(), RemoteQKey: qkey, Imm: 0xabcdef01})
	wa := waitWC(t, env, a.scq, 2)
	expect(t, wa[0], 50, verbs.WCSuccess, verbs.WCSend)
	expect(t, wa[1], 51, verbs.WCSuccess, verbs.WCSend)
	wb := waitWC(t, env, b.rcq, 2)
	expect(t, wb[0], 60, verbs.WCSuccess, verbs.WCRecv)
	expect(t, wb[1], 61, verbs.WCSuccess, verbs.WCRecv)
	for i, wc := range wb {
		if wc.SrcQP != qa.Num() || wc.Flags&verbs.WCFlagGRH == 0 || wc.QPNum != qb.Num() {
			t.Errorf("UD receive %d: %+v, want src_qp %#x with GRH on QP %#x", i, wc, qa.Num(), qb.Num())
		}
	}
	if wb[0].ByteLen != 40+256 || wb[1].ByteLen != 40+32 || wb[1].Flags&verbs.WCFlagWithImm == 0 || wb[1].Imm != 0xabcdef01 {
		t.Errorf("UD receives %+v, want 296 bytes, then 72 with immediate 0xabcdef01", wb)
	}
	if !bytes.Equal(b.buf[40:40+256], a.buf[:256]) {
		t.Errorf("UD data differ")
	}
	// The GRH: for an IPv4-mapped source GID, an IPv4 header in the last
	// 20 of its 40 bytes, with the sender's address.
	if src := a.gid.Addr(); src.Is4() {
		ip := b.buf[20:40]
		if ip[0]>>4 != 4 || [4]byte(ip[12:16]) != src.As4() {
			t.Errorf("GRH %x: want an IPv4 header from %v in bytes 20..40", b.buf[:40], src)
		}
	}
}

func testEvents(t *testing.T, env *Env) {
	p := newRCPair(t, env, true)
	// Wait returns when its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.b.rcq.ReqNotify(false); err != nil {
		t.Fatalf("ReqNotify: %v", err)
	}
	if cq, err := p.b.ch.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with nothing armed to happen: %v, %v; want DeadlineExceeded", cq, err)
	}
	// A receive completion raises one event on the armed CQ.
	postRecv(t, p.qb, verbs.RecvWR{WRID: 70, SGList: p.b.sge(0, 64)})
	post(t, p.qa, verbs.SendWR{WRID: 71, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendSolicited, SGList: p.a.sge(0, 64)})
	ctx2, cancel2 := context.WithTimeout(context.Background(), env.Wait)
	defer cancel2()
	cq, err := p.b.ch.Wait(ctx2)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if cq != p.b.rcq {
		t.Fatalf("Wait returned another CQ")
	}
	wb := waitWC(t, env, p.b.rcq, 1)
	expect(t, wb[0], 70, verbs.WCSuccess, verbs.WCRecv)
	waitWC(t, env, p.a.scq, 1)

	// Not armed again: no event for the next completion.
	postRecv(t, p.qb, verbs.RecvWR{WRID: 72, SGList: p.b.sge(0, 64)})
	post(t, p.qa, verbs.SendWR{WRID: 73, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: p.a.sge(0, 64)})
	waitWC(t, env, p.a.scq, 1)
	waitWC(t, env, p.b.rcq, 1)
	ctx3, cancel3 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel3()
	if cq, err := p.b.ch.Wait(ctx3); err == nil {
		t.Fatalf("an event from a CQ that was not armed again: %v", cq)
	}

	// Armed, solicited only: a solicited SEND raises the event.
	if err := p.b.rcq.ReqNotify(true); err != nil {
		t.Fatalf("ReqNotify(solicited): %v", err)
	}
	postRecv(t, p.qb, verbs.RecvWR{WRID: 74, SGList: p.b.sge(0, 64)})
	post(t, p.qa, verbs.SendWR{WRID: 75, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendSolicited, SGList: p.a.sge(0, 64)})
	ctx4, cancel4 := context.WithTimeout(context.Background(), env.Wait)
	defer cancel4()
	if cq, err := p.b.ch.Wait(ctx4); err != nil || cq != p.b.rcq {
		t.Fatalf("Wait for a solicited completion: %v, %v", cq, err)
	}
	waitWC(t, env, p.b.rcq, 1)
	waitWC(t, env, p.a.scq, 1)
}

func testQPStates(t *testing.T, env *Env) {
	p := newRCPair(t, env, false)
	at, err := p.qa.Query()
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if at.State != verbs.QPSRTS || at.DestQPN != p.qb.Num() || at.PathMTU != env.MTU || at.SQPSN != 0x100 ||
		at.RQPSN != 0x100 || at.MaxRdAtomic != 4 || at.MaxDestRdAtomic != 4 || at.RetryCnt != 7 || at.RNRRetry != 7 ||
		at.Timeout != 14 || at.MinRNRTimer != 12 || at.AHAttr.DGID != p.b.gid {
		t.Errorf("Query at RTS: %+v", at)
	}
	// RTS -> SQD -> RTS where the provider has SQD.
	if err := p.qa.Modify(&verbs.QPAttr{State: verbs.QPSSQD}, verbs.AttrState); err == nil {
		if err := p.qa.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState); err != nil {
			t.Errorf("SQD -> RTS: %v", err)
		}
	} else {
		t.Logf("RTS -> SQD: %v", err)
	}
	qp := p.a.createQP(t, verbs.QPTRC, nil)
	if at, err := qp.Query(); err != nil || at.State != verbs.QPSReset {
		t.Errorf("new QP: %v, %v; want RESET", at.State, err)
	}
	// RESET -> RTS is no transition.
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState)
	if err == nil || !(errors.Is(err, verbs.ErrInvalidAttr) || errors.Is(err, verbs.ErrInvalidState)) {
		t.Errorf("RESET -> RTS: %v, want ErrInvalidAttr or ErrInvalidState", err)
	}
	connectRC(t, env, qp, p.a, p.b, p.qb.Num())
	for _, st := range []verbs.QPState{verbs.QPSErr, verbs.QPSReset} {
		if err := qp.Modify(&verbs.QPAttr{State: st}, verbs.AttrState); err != nil {
			t.Fatalf("to %v: %v", st, err)
		}
		if at, err := qp.Query(); err != nil || at.State != st {
			t.Errorf("after modify to %v: %v, %v", st, at.State, err)
		}
	}
	connectRC(t, env, qp, p.a, p.b, p.qb.Num()) // again from RESET
	if at, err := qp.Query(); err != nil || at.State != verbs.QPSRTS {
		t.Errorf("again at RTS: %v, %v", at.State, err)
	}
}

func testBadInput(t *testing.T, env *Env) {
	a := newSide(t, env, env.A, env.GIDIndexA, false)
	if _, err := a.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err == nil {
		t.Errorf("CreateQP without CQs succeeded")
	}
	if _, err := a.ctx.CreateCQ(0, nil); err == nil {
		t.Errorf("CreateCQ(0) succeeded")
	}
	if err := a.scq.ReqNotify(false); err == nil {
		t.Errorf("ReqNotify on a CQ without a channel succeeded")
	}
	if _, err := a.ctx.QueryGID(env.Port, 1<<20); err == nil {
		t.Errorf("QueryGID of index 2^20 succeeded")
	}
	ud := a.createQP(t, verbs.QPTUD, nil)
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: env.Port, QKey: 1}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := ud.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("UD QP to %v: %v", s.attr.State, err)
		}
	}
	// A UD send without an address handle: refused, nothing posted.
	n, err := ud.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SGList: a.sge(0, 8), RemoteQPN: 1, RemoteQKey: 1}})
	if n != 0 || err == nil {
		t.Errorf("UD send without AH: %d posted, %v", n, err)
	}
	// An opcode beyond the enum: refused.
	rc := a.createQP(t, verbs.QPTRC, nil)
	n, err = rc.PostSend([]verbs.SendWR{{WRID: 1, Opcode: 200, SGList: a.sge(0, 8)}})
	if n != 0 || err == nil {
		t.Errorf("opcode 200: %d posted, %v", n, err)
	}
}

func testAsyncEvents(t *testing.T, env *Env) {
	// Waiting is cancelled by the context. (Events of earlier tests may
	// still be queued: they are taken here too.)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		ev, err := env.A.GetAsyncEvent(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatalf("GetAsyncEvent: %v", err)
		}
		t.Logf("an earlier event: %v", ev.Type)
	}

	// A CQ of one entry takes the completions of 64 WRITEs: it overruns,
	// which libibverbs reports as IBV_EVENT_CQ_ERR on that CQ.
	a := newSide(t, env, env.A, env.GIDIndexA, false)
	b := newSide(t, env, env.B, env.GIDIndexB, false)
	small, err := env.A.CreateCQ(1, nil)
	if err != nil {
		t.Fatalf("CreateCQ(1): %v", err)
	}
	t.Cleanup(func() { check(t, "Destroy CQ", small.Destroy()) })
	qa, err := a.pd.CreateQP(&verbs.QPInitAttr{SendCQ: small, RecvCQ: a.rcq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatalf("CreateQP: %v", err)
	}
	t.Cleanup(func() { check(t, "Destroy QP", qa.Destroy()) })
	qb := b.createQP(t, verbs.QPTRC, nil)
	connectRC(t, env, qa, a, b, qb.Num())
	connectRC(t, env, qb, b, a, qa.Num())
	wrs := make([]verbs.SendWR, 64)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(i*8, 8),
			RemoteAddr: b.mr.Addr() + uint64(i*8), RKey: b.mr.RKey()}
	}
	if n, err := qa.PostSend(wrs); n == 0 {
		t.Fatalf("PostSend: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), env.Wait)
	defer cancel()
	for {
		ev, err := env.A.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("no CQ_ERR event for the overrun CQ: %v", err)
		}
		t.Logf("event %v", ev.Type)
		if ev.Type == verbs.EventCQErr && ev.CQ == small {
			return
		}
	}
}
