package engine

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// guarded returns n bytes of memory with an inaccessible page on each side:
// a read or write outside them faults at once.
func guarded(t testing.TB, n int) []byte {
	ps := unix.Getpagesize()
	size := (n + ps - 1) / ps * ps
	m, err := unix.Mmap(-1, 0, size+2*ps, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Skip("mmap:", err)
	}
	if err := unix.Mprotect(m[ps:ps+size], unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Skip("mprotect:", err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	// The region ends exactly at the guard page after it.
	return m[ps+size-n : ps+size : ps+size]
}

// FuzzResponder feeds arbitrary packets to an RC QP and a UD QP whose memory
// regions sit between guard pages. Nothing may panic, and nothing may touch
// memory outside a region (the guard pages turn that into a crash). The
// ICRC is not checked, so that the fuzzer reaches past it.
func FuzzResponder(f *testing.F) {
	// Seeds: valid requests of every kind to the RC QP (0x11) and the UD QP.
	e0, _ := New(Config{Local: netip.MustParseAddr("10.0.0.2")})
	_ = e0
	for _, h := range []wire.Header{
		{Opcode: wire.RCSendOnly, DestQP: firstQPN, PSN: 0, AckReq: true},
		{Opcode: wire.RCSendFirst, DestQP: firstQPN, PSN: 0},
		{Opcode: wire.RCWriteOnly, DestQP: firstQPN, PSN: 0, RETH: wire.RETHFields{VA: 0, RKey: 0x101, DMALen: 16}},
		{Opcode: wire.RCWriteFirst, DestQP: firstQPN, PSN: 0, RETH: wire.RETHFields{VA: 0, RKey: 0x101, DMALen: 2048}},
		{Opcode: wire.RCReadRequest, DestQP: firstQPN, PSN: 0, RETH: wire.RETHFields{VA: 0, RKey: 0x101, DMALen: 4000}},
		{Opcode: wire.RCFetchAdd, DestQP: firstQPN, PSN: 0, AtomicETH: wire.AtomicFields{VA: 0, RKey: 0x101, SwapAdd: 1}},
		{Opcode: wire.RCCompareSwap, DestQP: firstQPN, PSN: 0, AtomicETH: wire.AtomicFields{VA: 8, RKey: 0x101, SwapAdd: 1}},
		{Opcode: wire.UDSendOnlyImm, DestQP: firstQPN + 1, DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 5}},
		{Opcode: wire.RCAcknowledge, DestQP: firstQPN, PSN: 0, AETH: wire.AETHFields{Syndrome: wire.ACKUnlimited}},
		// Fast registration, windows, ATOMIC WRITE, FLUSH and UC (firstQPN+2).
		{Opcode: wire.RCAtomicWrite, DestQP: firstQPN, PSN: 0, RETH: wire.RETHFields{VA: 8, RKey: 0x101, DMALen: 8}},
		{Opcode: wire.RCFlush, DestQP: firstQPN, PSN: 0, FlushType: wire.FlushGlobal, RETH: wire.RETHFields{VA: 0, RKey: 0x101, DMALen: 4000}},
		{Opcode: wire.RCFlush, DestQP: firstQPN, PSN: 0, FlushType: wire.FlushGlobal, FlushLevel: wire.FlushMR, RETH: wire.RETHFields{RKey: 0x80000102}},
		{Opcode: wire.RCSendOnlyInvalidate, DestQP: firstQPN, PSN: 0, IETH: 0x80000102},
		{Opcode: wire.RCWriteOnly, DestQP: firstQPN, PSN: 0, RETH: wire.RETHFields{VA: 0, RKey: 0x80000102, DMALen: 16}},
		{Opcode: wire.UCWriteFirst, DestQP: firstQPN + 2, PSN: 0, RETH: wire.RETHFields{VA: 0, RKey: 0x101, DMALen: 2048}},
		{Opcode: wire.UCSendOnlyImm, DestQP: firstQPN + 2, PSN: 0},
		{Opcode: wire.UCWriteLast, DestQP: firstQPN + 2, PSN: 1},
	} {
		n := 0
		if h.Opcode.Info().Payload {
			n = 16
		}
		if h.Opcode == wire.RCAtomicWrite {
			n = 8
		}
		if h.Opcode == wire.RCWriteFirst || h.Opcode == wire.RCSendFirst || h.Opcode == wire.UCWriteFirst {
			n = 1024
		}
		b, _ := wire.AppendTransport(nil, &h, make([]byte, n))
		f.Add(b, uint8(0))
	}
	f.Fuzz(func(t *testing.T, pkt []byte, vaSel uint8) {
		e, err := New(Config{Local: netip.MustParseAddr("10.0.0.2"), SkipICRC: true, MaxMR: 4})
		if err != nil {
			t.Fatal(err)
		}
		pd := e.AllocPD()
		mem := guarded(t, 5000)
		all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic | verbs.AccessFlushGlobal | verbs.AccessMWBind
		mr, err := e.MRs.Register(mem, all, pd)
		if err != nil {
			t.Fatal(err)
		}
		recv := guarded(t, 3000)
		rmr, _ := e.MRs.Register(recv, verbs.AccessLocalWrite, pd)
		cq := NewCQ(64)
		rc, _ := e.CreateQP(&QPInit{Type: verbs.QPTRC, PD: pd, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		ud, _ := e.CreateQP(&QPInit{Type: verbs.QPTUD, PD: pd, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		uc, _ := e.CreateQP(&QPInit{Type: verbs.QPTUC, PD: pd, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		peer := netip.MustParseAddr("10.0.0.1")
		must(t, rc.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: all}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		must(t, rc.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: 0x22, RQPSN: 0, MaxDestRdAtomic: 4,
			AHAttr: verbs.AHAttr{DGID: verbs.GIDFromAddr(peer)}},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
		must(t, ud.Modify(&verbs.QPAttr{State: verbs.QPSInit, QKey: 0x11111111}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
		must(t, ud.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState))
		must(t, uc.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: verbs.AccessRemoteWrite}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		must(t, uc.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: 0x23, AHAttr: verbs.AHAttr{DGID: verbs.GIDFromAddr(peer)}},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN))
		// A type 2 window over the region's middle, bound through the RC
		// QP (key 0x80000102 after the bind), and a fast-registered region.
		mw, _ := e.MRs.AllocMW(pd, verbs.MWType2)
		must(t, e.MRs.bindMW(rc, &verbs.BindMWWR{MW: mw, RKey: verbs.IncRKey(mw.RKey()), MR: mr, Addr: mr.Addr() + 1000, Length: 3000,
			Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic | verbs.AccessFlushGlobal}))
		if fr, err := e.MRs.AllocFast(pd, 2); err == nil {
			fr.MapSG([]verbs.SGE{{Addr: mr.Addr() + 100, Length: 200, LKey: mr.LKey()}})
			e.MRs.regFast(&verbs.RegMRWR{MR: fr, Key: fr.RKey(), Access: all}, pd)
		}
		for _, q := range []*QP{rc, ud, uc} {
			q.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{{Addr: rmr.Addr(), Length: 3000, LKey: rmr.LKey()}}}})
		}
		// Point RETH/AtomicETH addresses near the region's edges so the
		// fuzzer explores the bounds checks.
		p := append([]byte(nil), pkt...)
		var wp wire.Packet
		if wire.Parse(p, &wp) == nil || wp.Info != nil {
			base := mr.Addr() + uint64(vaSel)*23 - 64
			key := mr.RKey()
			if vaSel&1 != 0 {
				key = mw.RKey() // through the window
			}
			if r := wp.RETH(); r != nil && vaSel != 0 {
				r.Set(base, key, r.DMALen())
			}
			if a := wp.AtomicETH(); a != nil && vaSel != 0 {
				a.Set(base&^7, mr.RKey(), a.SwapAdd(), a.Compare())
			}
		}
		buf := make([]byte, wire.MaxPMTU+128)
		for i := 0; i < 3; i++ { // the same packet again: duplicates
			e.Input(int64(i+1), p, peer, wire.RoCEv2Port)
			for n := 0; n < 8; n++ {
				if _, _, ok := e.Output(int64(i+1), buf); !ok {
					break
				}
			}
		}
		e.Tick(1 << 40)
		var wc [64]verbs.WC
		cq.Poll(wc[:])
	})
}
