package engine

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// grant adds access rights to an RTS RC or UC QP (RTS to RTS).
func grant(t *testing.T, s *side, access verbs.AccessFlags) {
	t.Helper()
	must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, AccessFlags: access}, verbs.AttrState|verbs.AttrAccessFlags))
}

// TestAtomicWriteFlush: ATOMIC_WRITE stores its 8 bytes, FLUSH of a range
// and of a region completes, each answered by an empty READ RESPONSE ONLY;
// a misaligned ATOMIC_WRITE is an invalid request, a FLUSH the region does
// not grant (persistent) a remote access error.
func TestAtomicWriteFlush(t *testing.T) {
	l, a, b := rcLink(t)
	all := verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic | verbs.AccessFlushGlobal | verbs.AccessFlushPersistent
	grant(t, b, all)
	fmr, err := b.e.MRs.Register(b.buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessFlushGlobal, b.pd)
	must(t, err)
	binary.NativeEndian.PutUint64(a.buf[0:], 0x1122334455667788)
	var ops []wire.Opcode
	l.capture = []captured{}
	_, err = a.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 8), RemoteAddr: fmr.Addr() + 64, RKey: fmr.RKey()},
		{WRID: 2, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: fmr.Addr(), RKey: fmr.RKey(), FlushLen: 128, FlushType: verbs.FlushGlobal},
		{WRID: 3, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RKey: fmr.RKey(), FlushType: verbs.FlushGlobal, FlushLevel: verbs.FlushMR},
	})
	must(t, err)
	wcs := collect(l, t, a.scq, 3)
	want := []verbs.WCOpcode{verbs.WCAtomicWrite, verbs.WCFlush, verbs.WCFlush}
	for i, w := range wcs {
		if w.Status != verbs.WCSuccess || w.Opcode != want[i] || w.WRID != uint64(i+1) {
			t.Fatalf("WC %d: %+v", i, w)
		}
	}
	if got := binary.NativeEndian.Uint64(b.buf[4096+64:]); got != 0x1122334455667788 {
		t.Fatalf("ATOMIC_WRITE stored %#x", got)
	}
	for _, c := range l.capture {
		var p wire.Packet
		must(t, wire.Parse(c.pkt, &p))
		ops = append(ops, p.Opcode())
		if p.Opcode() == wire.RCReadResponseOnly && p.PayloadLen != 0 {
			t.Fatalf("a response with %d bytes", p.PayloadLen)
		}
	}
	wantOps := []wire.Opcode{wire.RCAtomicWrite, wire.RCFlush, wire.RCFlush, wire.RCReadResponseOnly, wire.RCReadResponseOnly, wire.RCReadResponseOnly}
	if !sameSet(ops, wantOps) {
		t.Fatalf("packets %v, want %v", ops, wantOps)
	}

	for _, c := range []struct {
		name string
		wr   verbs.SendWR
		st   verbs.WCStatus
	}{
		{"misaligned", verbs.SendWR{Opcode: verbs.WRAtomicWrite, SGList: nil, RemoteAddr: 4}, verbs.WCRemInvReqErr},
		{"persistent", verbs.SendWR{Opcode: verbs.WRFlush, FlushType: verbs.FlushPersistent, FlushLevel: verbs.FlushMR}, verbs.WCRemAccessErr},
		{"beyond", verbs.SendWR{Opcode: verbs.WRFlush, FlushType: verbs.FlushGlobal, RemoteAddr: 4000, FlushLen: 200}, verbs.WCRemAccessErr},
		{"bad_rkey", verbs.SendWR{Opcode: verbs.WRAtomicWrite, RemoteAddr: 8}, verbs.WCRemAccessErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, a, b := rcLink(t)
			grant(t, b, all)
			fmr, err := b.e.MRs.Register(b.buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessFlushGlobal, b.pd)
			must(t, err)
			wr := c.wr
			wr.WRID, wr.Flags, wr.RemoteAddr, wr.RKey = 9, verbs.SendSignaled, fmr.Addr()+wr.RemoteAddr, fmr.RKey()
			if c.name == "bad_rkey" {
				wr.RKey ^= 0x80
			}
			if wr.Opcode == verbs.WRAtomicWrite {
				wr.SGList = a.sge(0, 8)
			}
			before := bytes.Clone(b.buf)
			_, err = a.qp.PostSend([]verbs.SendWR{wr})
			must(t, err)
			wcs := collect(l, t, a.scq, 1)
			if wcs[0].Status != c.st {
				t.Fatalf("WC %+v, want %v", wcs[0], c.st)
			}
			if !bytes.Equal(before, b.buf) {
				t.Fatal("memory changed")
			}
		})
	}
}

func sameSet(a, b []wire.Opcode) bool {
	if len(a) != len(b) {
		return false
	}
	n := map[wire.Opcode]int{}
	for _, o := range a {
		n[o]++
	}
	for _, o := range b {
		n[o]--
	}
	for _, v := range n {
		if v != 0 {
			return false
		}
	}
	return true
}

// ucLink returns a link with a UC QP on each engine, connected.
func ucLink(t *testing.T, mtu verbs.MTU) (*link, *side, *side) {
	l := newLink(t)
	a, b := newSide(t, l.a, verbs.QPTUC, 1<<16), newSide(t, l.b, verbs.QPTUC, 1<<16)
	for _, p := range [2][2]*side{{a, b}, {b, a}} {
		x, y := p[0], p[1]
		must(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: verbs.AccessRemoteWrite, PortNum: 1},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		must(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: mtu, DestQPN: y.qp.Num(), RQPSN: 0xFFFFFE,
			AHAttr: verbs.AHAttr{DGID: verbs.GIDFromAddr(y.e.Local())}},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN))
		must(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0xFFFFFE}, verbs.AttrState|verbs.AttrSQPSN))
	}
	return l, a, b
}

// TestUC: SEND, WRITE and WRITE with immediate over UC, in one and in
// several packets, complete on the sender when sent, with no ACK; a lost
// packet drops its message (the receive stays posted for the next), and
// what follows is delivered.
func TestUC(t *testing.T) {
	l, a, b := ucLink(t, verbs.MTU1024)
	l.capture = []captured{}
	fill(a.buf[:8192], 3)
	_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 10, SGList: b.sge(0, 4096)}, {WRID: 11, SGList: b.sge(4096, 64)}})
	must(t, err)
	_, err = a.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 3000)},
		{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 2500), RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()},
		{WRID: 3, Opcode: verbs.WRRDMAWriteWithImm, Imm: 0x77, Flags: verbs.SendSignaled, SGList: a.sge(100, 16), RemoteAddr: b.mr.Addr() + 16384, RKey: b.mr.RKey()},
	})
	must(t, err)
	swc := collect(l, t, a.scq, 3)
	rwc := collect(l, t, b.rcq, 2)
	for i, w := range swc {
		if w.Status != verbs.WCSuccess || w.WRID != uint64(i+1) {
			t.Fatalf("send WC %+v", w)
		}
	}
	if rwc[0].WRID != 10 || rwc[0].ByteLen != 3000 || rwc[0].Opcode != verbs.WCRecv ||
		rwc[1].WRID != 11 || rwc[1].Opcode != verbs.WCRecvRDMAWithImm || rwc[1].Imm != 0x77 || rwc[1].ByteLen != 16 {
		t.Fatalf("recv WCs %+v", rwc)
	}
	if !bytes.Equal(b.buf[:3000], a.buf[:3000]) || !bytes.Equal(b.buf[8192:8192+2500], a.buf[:2500]) || !bytes.Equal(b.buf[16384:16400], a.buf[100:116]) {
		t.Fatal("data differs")
	}
	for _, c := range l.capture {
		if op := wire.Opcode(c.pkt[0]); op.Info().Transport != wire.TransportUC {
			t.Fatalf("packet %v on UC", op)
		}
	}
	// The second packet of a 3-packet SEND is lost: that message is
	// dropped, its receive used by the next SEND.
	n := 0
	l.drop = func(int) bool { n++; return n == 2 }
	_, err = b.qp.PostRecv([]verbs.RecvWR{{WRID: 12, SGList: b.sge(0, 4096)}})
	must(t, err)
	_, err = a.qp.PostSend([]verbs.SendWR{
		{WRID: 4, Opcode: verbs.WRSend, SGList: a.sge(0, 3000)},
		{WRID: 5, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(10, 100)},
	})
	must(t, err)
	swc = collect(l, t, a.scq, 1)
	rwc = collect(l, t, b.rcq, 1)
	if swc[0].WRID != 5 || rwc[0].WRID != 12 || rwc[0].ByteLen != 100 || !bytes.Equal(b.buf[:100], a.buf[10:110]) {
		t.Fatalf("after a loss: send %+v recv %+v", swc, rwc)
	}
	if b.qp.State() != verbs.QPSRTS || a.qp.State() != verbs.QPSRTS {
		t.Fatal("a loss broke the QPs")
	}
	// A bad R_Key drops the WRITE: nothing written, the QP lives.
	before := bytes.Clone(b.buf)
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 6, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 1}})
	must(t, err)
	collect(l, t, a.scq, 1)
	l.run(t, func() bool { return true })
	if !bytes.Equal(before, b.buf) || b.qp.State() != verbs.QPSRTS {
		t.Fatal("a WRITE with a bad R_Key wrote, or broke the QP")
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMARead, SGList: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}); err == nil {
		t.Fatal("READ posted on UC")
	}
}

// TestFastRegInvalidate: a fast-registration region is FREE until REG_MR,
// VALID under the key REG_MR gives (the key part advanced), FREE again
// after a remote SEND_WITH_INV or a LOCAL_INV; a key not VALID reaches
// nothing; REG_MR of a VALID region fails.
func TestFastRegInvalidate(t *testing.T) {
	l, a, b := rcLink(t)
	fr, err := b.e.MRs.AllocFast(b.pd, 4)
	must(t, err)
	if fr.State() != MRFree {
		t.Fatalf("new region %v", fr.State())
	}
	if _, err := fr.MapSG([]verbs.SGE{{Addr: b.mr.Addr() + 4096, Length: 4096, LKey: b.mr.LKey()}, {Addr: b.mr.Addr() + 8192, Length: 100, LKey: b.mr.LKey()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.MapSG([]verbs.SGE{{Addr: b.mr.Addr(), Length: 5 * 4096, LKey: b.mr.LKey()}}); err == nil {
		t.Fatal("MapSG beyond max pages")
	}
	key := verbs.IncRKey(fr.RKey())
	reg := func(k uint32) {
		_, err := b.qp.PostSend([]verbs.SendWR{{WRID: 50, Opcode: verbs.WRRegMR, Flags: verbs.SendSignaled,
			Reg: &verbs.RegMRWR{MR: fr, Key: k, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}}})
		must(t, err)
	}
	reg(key)
	if w := collect(l, t, b.scq, 1)[0]; w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRegMR {
		t.Fatalf("REG_MR WC %+v", w)
	}
	if fr.State() != MRValid || fr.RKey() != key {
		t.Fatalf("after REG_MR: %v key %#x", fr.State(), fr.RKey())
	}
	fill(a.buf[:64], 9)
	write := func(id uint64) verbs.WC {
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 64), RemoteAddr: fr.Addr() + 4000, RKey: key}})
		must(t, err)
		return collect(l, t, a.scq, 1)[0]
	}
	if w := write(1); w.Status != verbs.WCSuccess || !bytes.Equal(b.buf[4096+4000:4096+4064], a.buf[:64]) {
		t.Fatalf("WRITE through the fast-registered key: %+v", w)
	}
	_, err = b.qp.PostRecv([]verbs.RecvWR{{WRID: 60, SGList: b.sge(0, 64)}})
	must(t, err)
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSendWithInv, InvalidateRKey: key, SGList: a.sge(0, 8)}})
	must(t, err)
	if w := collect(l, t, b.rcq, 1)[0]; w.Flags&verbs.WCFlagWithInv == 0 || w.InvalidatedRKey != key || w.Status != verbs.WCSuccess {
		t.Fatalf("SEND_WITH_INV recv WC %+v", w)
	}
	if fr.State() != MRFree {
		t.Fatalf("after SEND_WITH_INV: %v", fr.State())
	}
	// Registered again under the next key, invalidated locally.
	key = verbs.IncRKey(key)
	reg(key)
	_, err = b.qp.PostSend([]verbs.SendWR{{WRID: 51, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: key}})
	must(t, err)
	wcs := collect(l, t, b.scq, 2)
	if wcs[0].Status != 0 || wcs[1].Status != 0 || wcs[1].Opcode != verbs.WCLocalInv || fr.State() != MRFree {
		t.Fatalf("REG_MR, LOCAL_INV: %+v, state %v", wcs, fr.State())
	}
	// A FREE region's key reaches nothing: the WRITE fails.
	if w := write(3); w.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE to an invalidated key: %+v", w)
	}
}

// TestFastRegErrors: REG_MR of a VALID region, and LOCAL_INV of a region
// ibv_reg_mr registered, fail with LOC_QP_OP_ERR.
func TestFastRegErrors(t *testing.T) {
	for _, name := range []string{"reg_valid", "inv_user_mr"} {
		t.Run(name, func(t *testing.T) {
			l, _, b := rcLink(t)
			fr, err := b.e.MRs.AllocFast(b.pd, 1)
			must(t, err)
			_, err = fr.MapSG(b.sge(0, 4096))
			must(t, err)
			wrs := []verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMR, Reg: &verbs.RegMRWR{MR: fr, Key: fr.RKey(), Access: verbs.AccessLocalWrite}}}
			if name == "reg_valid" {
				wrs = append(wrs, verbs.SendWR{WRID: 2, Opcode: verbs.WRRegMR, Reg: &verbs.RegMRWR{MR: fr, Key: verbs.IncRKey(fr.RKey()), Access: verbs.AccessLocalWrite}})
			} else {
				wrs = append(wrs, verbs.SendWR{WRID: 2, Opcode: verbs.WRLocalInv, InvalidateRKey: b.mr.RKey()})
			}
			_, err = b.qp.PostSend(wrs)
			must(t, err)
			w := collect(l, t, b.scq, 1)[0]
			if w.WRID != 2 || w.Status != verbs.WCLocQPOpErr || b.qp.State() != verbs.QPSErr {
				t.Fatalf("WC %+v, state %v", w, b.qp.State())
			}
		})
	}
}

// TestMemoryWindows: a type 2 window bound by a BIND_MW work request gives
// its range, with its access, to the QP it was bound through; a WRITE
// outside the range fails; invalidated (SEND_WITH_INV) it reaches nothing.
// A type 1 window is bound with BindMW and cannot be invalidated; a region
// with windows bound cannot be deregistered.
func TestMemoryWindows(t *testing.T) {
	l, a, b := rcLink(t)
	mr, err := b.e.MRs.Register(b.buf[8192:16384], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessMWBind, b.pd)
	must(t, err)
	mw, err := b.e.MRs.AllocMW(b.pd, verbs.MWType2)
	must(t, err)
	key := verbs.IncRKey(mw.RKey())
	_, err = b.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
		Bind: &verbs.BindMWWR{MW: mw, RKey: key, MR: mr, Addr: mr.Addr() + 1024, Length: 512, Access: verbs.AccessRemoteWrite}}})
	must(t, err)
	if w := collect(l, t, b.scq, 1)[0]; w.Status != 0 || w.Opcode != verbs.WCBindMW || mw.RKey() != key {
		t.Fatalf("bind WC %+v key %#x", w, mw.RKey())
	}
	if err := mr.Deregister(); err == nil {
		t.Fatal("deregistered a region a window is bound to")
	}
	fill(a.buf[:64], 5)
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 64), RemoteAddr: mr.Addr() + 1024 + 448, RKey: key}})
	must(t, err)
	if w := collect(l, t, a.scq, 1)[0]; w.Status != 0 || !bytes.Equal(b.buf[8192+1024+448:8192+1024+512], a.buf[:64]) {
		t.Fatalf("WRITE through the window: %+v", w)
	}
	// Type 1: bound by BindMW; LOCAL_INV of it fails.
	mw1, err := b.e.MRs.AllocMW(b.pd, verbs.MWType1)
	must(t, err)
	k1, err := b.qp.BindMW(&verbs.BindMWWR{MW: mw1, MR: mr, Addr: mr.Addr(), Length: 64, Access: verbs.AccessRemoteWrite}, 3, verbs.SendSignaled)
	must(t, err)
	if w := collect(l, t, b.scq, 1)[0]; w.Status != 0 || w.WRID != 3 || mw1.RKey() != k1 {
		t.Fatalf("BindMW: %+v, key %#x want %#x", w, mw1.RKey(), k1)
	}
	if b.e.MRs.invalidate(k1, b.pd) == nil {
		t.Fatal("a type 1 window was invalidated")
	}
	// SEND_WITH_INV of the type 2 window's key: it becomes FREE.
	_, err = b.qp.PostRecv([]verbs.RecvWR{{WRID: 60, SGList: b.sge(0, 64)}})
	must(t, err)
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRSendWithInv, InvalidateRKey: key, SGList: a.sge(0, 8)}})
	must(t, err)
	if w := collect(l, t, b.rcq, 1)[0]; w.Status != 0 || w.InvalidatedRKey != key {
		t.Fatalf("SEND_WITH_INV: %+v", w)
	}
	before := bytes.Clone(b.buf)
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 5, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 8), RemoteAddr: mr.Addr() + 1024, RKey: key}})
	must(t, err)
	if w := collect(l, t, a.scq, 1)[0]; w.Status != verbs.WCRemAccessErr || !bytes.Equal(before, b.buf) {
		t.Fatalf("WRITE through an invalidated window: %+v", w)
	}
}

// TestMemoryWindowRange: a WRITE beyond the window's range (inside the
// region) fails with REM_ACCESS_ERR and writes nothing; so does one through
// a type 2 window from a QP it was not bound through.
func TestMemoryWindowRange(t *testing.T) {
	l, a, b := rcLink(t)
	mr, err := b.e.MRs.Register(b.buf[8192:16384], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessMWBind, b.pd)
	must(t, err)
	mw, err := b.e.MRs.AllocMW(b.pd, verbs.MWType2)
	must(t, err)
	key := verbs.IncRKey(mw.RKey())
	_, err = b.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled,
		Bind: &verbs.BindMWWR{MW: mw, RKey: key, MR: mr, Addr: mr.Addr() + 1024, Length: 512, Access: verbs.AccessRemoteWrite}}})
	must(t, err)
	collect(l, t, b.scq, 1)
	before := bytes.Clone(b.buf)
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 64), RemoteAddr: mr.Addr() + 1024 + 480, RKey: key}})
	must(t, err)
	if w := collect(l, t, a.scq, 1)[0]; w.Status != verbs.WCRemAccessErr || !bytes.Equal(before, b.buf) {
		t.Fatalf("WRITE across the window's end: %+v", w)
	}
}

// TestVerbs33Allocs: posting, sending, answering and completing ATOMIC_WRITE
// and FLUSH on RC, and a UC WRITE and SEND, allocate nothing.
func TestVerbs33Allocs(t *testing.T) {
	l, a, b := rcLink(t)
	grant(t, b, verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessFlushGlobal)
	fmr, err := b.e.MRs.Register(b.buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessFlushGlobal, b.pd)
	must(t, err)
	rc := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRAtomicWrite, SGList: a.sge(0, 8), RemoteAddr: fmr.Addr(), RKey: fmr.RKey()},
		{WRID: 2, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: fmr.Addr(), RKey: fmr.RKey(), FlushLen: 64, FlushType: verbs.FlushGlobal},
	}
	lu, ua, ub := ucLink(t, verbs.MTU1024)
	uc := []verbs.SendWR{
		{WRID: 3, Opcode: verbs.WRRDMAWrite, SGList: ua.sge(0, 2000), RemoteAddr: ub.mr.Addr(), RKey: ub.mr.RKey()},
		{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: ua.sge(0, 64)},
	}
	rwr := []verbs.RecvWR{{WRID: 5, SGList: ub.sge(4096, 64)}}
	wc := make([]verbs.WC, 8)
	round := func() {
		if _, err := a.qp.PostSend(rc); err != nil {
			t.Fatal(err)
		}
		if _, err := ub.qp.PostRecv(rwr); err != nil {
			t.Fatal(err)
		}
		if _, err := ua.qp.PostSend(uc); err != nil {
			t.Fatal(err)
		}
		for l.step() || lu.step() {
		}
		if n := a.scq.Poll(wc) + ua.scq.Poll(wc) + ub.rcq.Poll(wc); n != 3 {
			t.Fatalf("%d completions", n)
		}
	}
	round()
	if allocs := testing.AllocsPerRun(100, round); allocs != 0 {
		t.Errorf("%v allocations a round", allocs)
	}
}
