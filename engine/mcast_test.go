package engine

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// mcastUD brings a side's UD QP to RTS with the Q_Key.
func mcastUD(t testing.TB, s *side, qkey uint32) {
	t.Helper()
	must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, QKey: qkey, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
	must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState))
	must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState|verbs.AttrSQPSN))
}

// TestMcastAttach checks the attach and detach rules, rdma_rxe's: UD QPs
// only, multicast GIDs of the engine's family only, twice is no error,
// detach of what is not attached is, 56 QPs a group; and what the packet
// path is told (the group's first attach, its last detach).
func TestMcastAttach(t *testing.T) {
	e, err := New(Config{Local: netip.MustParseAddr("10.0.0.2")})
	must(t, err)
	g := netip.MustParseAddr("239.1.2.3")
	ud, rc := newSide(t, e, verbs.QPTUD, 64), newSide(t, e, verbs.QPTRC, 64)
	for _, c := range []struct {
		what  string
		qp    *QP
		group netip.Addr
	}{{"an RC QP", rc.qp, g}, {"a unicast address", ud.qp, netip.MustParseAddr("10.0.0.9")},
		{"an IPv6 group on IPv4", ud.qp, netip.MustParseAddr("ff0e::1")}, {"no address", ud.qp, netip.Addr{}}} {
		if _, err := e.AttachMcast(c.qp, c.group); !errors.Is(err, verbs.ErrInvalidAttr) {
			t.Errorf("attach %s: %v, want ErrInvalidAttr", c.what, err)
		}
	}
	if _, err := e.DetachMcast(ud.qp, g); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("detach not attached: %v", err)
	}
	if _, err := e.DetachMcast(nil, g); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("detach nil: %v", err)
	}
	if first, err := e.AttachMcast(ud.qp, netip.AddrFrom16(g.As16())); !first || err != nil {
		t.Fatalf("first attach (IPv4-mapped): %v %v", first, err)
	}
	if first, err := e.AttachMcast(ud.qp, g); first || err != nil {
		t.Fatalf("attach twice: %v %v", first, err)
	}
	var more []*side
	for i := 1; i < MaxMcastQPAttach; i++ {
		s := newSide(t, e, verbs.QPTUD, 64)
		if first, err := e.AttachMcast(s.qp, g); first || err != nil {
			t.Fatalf("attach QP %d: %v %v", i, first, err)
		}
		more = append(more, s)
	}
	if _, err := e.AttachMcast(newSide(t, e, verbs.QPTUD, 64).qp, g); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("attach QP %d: %v, want ErrInvalidAttr", MaxMcastQPAttach+1, err)
	}
	for _, s := range more {
		if last, err := e.DetachMcast(s.qp, g); last || err != nil {
			t.Fatalf("detach: %v %v", last, err)
		}
	}
	if last, err := e.DetachMcast(ud.qp, g); !last || err != nil {
		t.Fatalf("last detach: %v %v", last, err)
	}
	ud.qp.Destroy()
	if _, err := e.AttachMcast(ud.qp, g); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("attach a destroyed QP: %v", err)
	}
}

// TestMcastInput sends a UD SEND from engine a to a group and QPN 0xFFFFFF
// and inputs it to engine b with the group as destination: each of b's
// two attached QPs receives it (GRH to the group), the third does not; the
// ICRC is checked with the group's address (the same packet told to come
// to b's own address fails it); a packet to the group for another QPN, a
// group nobody joined, a wrong Q_Key, an RC opcode are dropped.
func TestMcastInput(t *testing.T) {
	a, err := New(Config{Local: netip.MustParseAddr("10.0.0.1"), SourcePort: wire.RoCEv2Port})
	must(t, err)
	b, err := New(Config{Local: netip.MustParseAddr("10.0.0.2"), SourcePort: wire.RoCEv2Port})
	must(t, err)
	g := netip.MustParseAddr("239.1.2.3")
	sa := newSide(t, a, verbs.QPTUD, 4096)
	mcastUD(t, sa, 0x42)
	var sb [3]*side
	for i := range sb {
		sb[i] = newSide(t, b, verbs.QPTUD, 4096)
		mcastUD(t, sb[i], 0x42)
		_, err := sb[i].qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: sb[i].sge(0, 40+100)}})
		must(t, err)
	}
	for _, s := range sb[:2] {
		if _, err := b.AttachMcast(s.qp, g); err != nil {
			t.Fatal(err)
		}
	}
	fill(sa.buf[:100], 3)
	ah := testAH{verbs.AHAttr{DGID: verbs.GIDFromAddr(g)}}
	_, err = sa.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SGList: sa.sge(0, 100), AH: ah, RemoteQPN: uint32(McastQPN), RemoteQKey: 0x42}})
	must(t, err)
	buf := make([]byte, wire.MaxPMTU+128)
	n, to, ok := a.Output(1, buf)
	if !ok || to != g {
		t.Fatalf("output: %v to %v", ok, to)
	}
	pkt := buf[:n]
	in := func(p []byte, dst netip.Addr) {
		b.InputPacket(2, append([]byte(nil), p...), a.Local(), wire.RoCEv2Port, &RxInfo{Dst: dst})
	}
	before := b.Stats()
	in(pkt, b.Local()) // its ICRC is for the group's address
	if st := b.Stats(); st.ICRCDrops != before.ICRCDrops+1 {
		t.Errorf("the group's packet taken as sent to the device's own address: ICRC drops %d -> %d", before.ICRCDrops, st.ICRCDrops)
	}
	in(pkt, g)
	for i, s := range sb {
		w := s.poll(s.rcq)
		if i == 2 {
			if len(w) != 0 {
				t.Errorf("the QP not attached received %+v", w)
			}
			continue
		}
		if len(w) != 1 || w[0].WRID != uint64(i) || w[0].ByteLen != 140 || w[0].SrcQP != sa.qp.Num() || w[0].Status != verbs.WCSuccess {
			t.Fatalf("attached QP %d: %+v", i, w)
		}
		if ip := wire.IPv4(s.buf[20:40]); ip.Src() != a.Local() || ip.Dst() != g || !bytes.Equal(s.buf[40:140], sa.buf[:100]) {
			t.Errorf("attached QP %d: GRH %v -> %v, or the payload differs", i, ip.Src(), ip.Dst())
		}
	}
	// Stray group packets, each dropped and counted as what it is.
	drops := func(what string, f func(Stats) uint64, p []byte, dst netip.Addr, want uint64) {
		t.Helper()
		before := f(b.Stats())
		in(p, dst)
		if got := f(b.Stats()) - before; got != want {
			t.Errorf("%s: %d drops counted, want %d", what, got, want)
		}
	}
	icrc := func(s Stats) uint64 { return s.ICRCDrops }
	unknown := func(s Stats) uint64 { return s.UnknownQPDrops }
	drops("a group nobody joined (its ICRC is for another)", icrc, pkt, netip.MustParseAddr("239.9.9.9"), 1)
	reseal := func(p []byte, dst netip.Addr) []byte {
		p = append([]byte(nil), p...)
		must(t, wire.SetICRC(mcastIPUDP(a.Local(), dst, len(p)), p))
		return p
	}
	drops("a group nobody joined", unknown, reseal(pkt, netip.MustParseAddr("239.9.9.9")), netip.MustParseAddr("239.9.9.9"), 1)
	var p wire.Packet
	one := append([]byte(nil), pkt...)
	must(t, wire.Parse(one, &p))
	p.BTH().SetDestQP(sb[0].qp.num) // a group's packet for one QP
	drops("a group's packet to one QP", unknown, reseal(one, g), g, 1)
	rc, _ := wire.AppendTransport(nil, &wire.Header{Opcode: wire.RCSendOnly, DestQP: McastQPN, PKey: wire.DefaultPKey}, make([]byte, 16))
	drops("an RC SEND to the group", unknown, reseal(rc, g), g, 1)
	_, err = sa.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, SGList: sa.sge(0, 100), AH: ah, RemoteQPN: uint32(McastQPN), RemoteQKey: 0x43}})
	must(t, err)
	n, _, _ = a.Output(3, buf)
	drops("another Q_Key", func(s Stats) uint64 { return s.QKeyDrops }, buf[:n], g, 2)
	for i, s := range sb {
		if w := s.poll(s.rcq); len(w) != 0 {
			t.Errorf("QP %d received a stray packet: %+v", i, w)
		}
	}
}

// mcastIPUDP is the IPv4 and UDP header of an n-byte transport packet from
// src to the group, as the ICRC covers it (DF set, Identification 0).
func mcastIPUDP(src, g netip.Addr, n int) []byte {
	h := make([]byte, wire.IPv4UDPLen)
	h[0] = 0x45
	h[2], h[3] = byte((wire.IPv4UDPLen+n)>>8), byte(wire.IPv4UDPLen+n)
	h[6], h[8], h[9] = 0x40, 64, wire.IPProtocolUDP
	s, d := src.As4(), g.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	h[20], h[21], h[22], h[23] = byte(wire.RoCEv2Port>>8), byte(wire.RoCEv2Port&0xff), byte(wire.RoCEv2Port>>8), byte(wire.RoCEv2Port&0xff)
	h[24], h[25] = byte((8+n)>>8), byte(8+n)
	return h
}

// FuzzMcastInput feeds arbitrary packets, told to come to a group two UD
// QPs are attached to, to another group, to the engine's own address or
// to an IPv6 group, to an engine whose receive buffers end at guard pages:
// nothing panics, nothing is written outside a posted receive.
func FuzzMcastInput(f *testing.F) {
	for _, h := range []wire.Header{
		{Opcode: wire.UDSendOnly, DestQP: McastQPN, DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 5}},
		{Opcode: wire.UDSendOnlyImm, DestQP: McastQPN, DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 5}, Imm: 7},
		{Opcode: wire.UDSendOnly, DestQP: firstQPN, DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 5}},
		{Opcode: wire.RCWriteOnly, DestQP: McastQPN, RETH: wire.RETHFields{RKey: 0x101, DMALen: 16}},
	} {
		for _, n := range []int{0, 100, 3000} {
			b, _ := wire.AppendTransport(nil, &h, make([]byte, n))
			f.Add(b, uint8(0))
		}
	}
	groups := []netip.Addr{netip.MustParseAddr("239.1.2.3"), netip.MustParseAddr("239.1.2.4"), netip.MustParseAddr("10.0.0.2"),
		netip.MustParseAddr("ff0e::1"), netip.AddrFrom16(netip.MustParseAddr("239.1.2.3").As16()), {}}
	f.Fuzz(func(t *testing.T, pkt []byte, sel uint8) {
		e, err := New(Config{Local: netip.MustParseAddr("10.0.0.2"), SkipICRC: true})
		if err != nil {
			t.Fatal(err)
		}
		pd := e.AllocPD()
		cq := NewCQ(64)
		for i := 0; i < 2; i++ {
			mem := guarded(t, 300)
			mr, err := e.MRs.Register(mem, verbs.AccessLocalWrite, pd)
			if err != nil {
				t.Fatal(err)
			}
			qp, err := e.CreateQP(&QPInit{Type: verbs.QPTUD, PD: pd, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
			if err != nil {
				t.Fatal(err)
			}
			must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, QKey: 0x11111111}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
			must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState))
			_, err = qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{{Addr: mr.Addr(), Length: 300, LKey: mr.LKey()}}}})
			must(t, err)
			if _, err := e.AttachMcast(qp, groups[0]); err != nil {
				t.Fatal(err)
			}
		}
		dst := groups[int(sel)%len(groups)]
		for i := 0; i < 2; i++ {
			e.InputPacket(int64(i+1), append([]byte(nil), pkt...), netip.MustParseAddr("10.0.0.1"), wire.RoCEv2Port, &RxInfo{Dst: dst})
		}
		var wc [8]verbs.WC
		cq.Poll(wc[:])
	})
}
