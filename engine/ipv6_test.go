package engine

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// newLink6 is newLink between two IPv6 engines.
func newLink6(t testing.TB) *link {
	l := newLink(t)
	var err error
	for _, p := range []struct {
		e    **Engine
		addr string
	}{{&l.a, "fd00:6::1"}, {&l.b, "fd00:6::2"}} {
		if *p.e, err = New(Config{Local: netip.MustParseAddr(p.addr), SourcePort: wire.RoCEv2Port}); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// RC and UD between two IPv6 engines: every packet's ICRC is computed over
// the IPv6 pseudo-header (the receiver checks it: a wrong one is dropped and
// the operations would not complete), a UD receive's GRH is the sender's
// IPv6 header, and each packet's IP header fields (OutputIP) are its QP's
// address vector's (RC) or its address handle's (UD).
func TestIPv6RCAndUD(t *testing.T) {
	l := newLink6(t)
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<17), newSide(t, l.b, verbs.QPTRC, 1<<17)
	connectAV(t, a, b, verbs.AHAttr{DGID: verbs.GIDFromAddr(l.b.Local()), TrafficClass: 0xB8, HopLimit: 7, FlowLabel: 0x12345},
		verbs.AHAttr{DGID: verbs.GIDFromAddr(l.a.Local()), HopLimit: 3})
	size := 5000
	fill(a.buf[:size], 3)
	_, err := a.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(1<<16, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	})
	must(t, err)
	// The first packet out is the WRITE's: a's address vector's fields.
	n, to, _, ok := l.a.OutputFrom(l.now, l.buf)
	if !ok || to != l.b.Local() {
		t.Fatalf("first packet: ok %v to %v", ok, to)
	}
	if got, want := l.a.OutputIP(), (IPHeader{TrafficClass: 0xB8, HopLimit: 7, FlowLabel: 0x12345}); got != want {
		t.Errorf("OutputIP = %+v, want %+v", got, want)
	}
	fl := wire.Flow{Src: l.a.Local(), Dst: l.b.Local(), SrcPort: wire.RoCEv2Port}
	if _, _, err := fl.CheckDatagramICRC(l.buf[:n]); err != nil {
		t.Errorf("the first packet's ICRC over IPv6: %v", err)
	}
	l.b.Input(l.now, l.buf[:n], l.a.Local(), wire.RoCEv2Port)
	wcs := collect(l, t, a.scq, 2)
	if wcs[0].Status != verbs.WCSuccess || wcs[1].Status != verbs.WCSuccess || wcs[1].ByteLen != uint32(size) {
		t.Fatalf("WCs %+v", wcs)
	}
	if !bytes.Equal(b.buf[:size], a.buf[:size]) || !bytes.Equal(a.buf[1<<16:1<<16+size], a.buf[:size]) {
		t.Fatal("WRITE/READ data differs")
	}
	if s := l.b.Stats(); s.ICRCDrops != 0 || s.MalformedDrops != 0 {
		t.Errorf("b dropped packets: %+v", s)
	}
	// b's responses carry b's address vector's fields.
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	must(t, err)
	n, _, _, ok = l.a.OutputFrom(l.now, l.buf)
	must(t, errors.Join(boolErr(ok, "no READ request")))
	l.b.Input(l.now, l.buf[:n], l.a.Local(), wire.RoCEv2Port)
	if _, _, _, ok = l.b.OutputFrom(l.now, l.buf); !ok || l.b.OutputIP() != (IPHeader{HopLimit: 3}) {
		t.Errorf("READ response: ok %v, OutputIP %+v, want hop limit 3", ok, l.b.OutputIP())
	}

	// UD: the AH's fields, and the GRH.
	u, v := newSide(t, l.a, verbs.QPTUD, 8192), newSide(t, l.b, verbs.QPTUD, 8192)
	for _, s := range []*side{u, v} {
		must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, QKey: 0x11111111, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
		must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState))
		must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState|verbs.AttrSQPSN))
	}
	_, err = v.qp.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: v.sge(0, 40+256)}})
	must(t, err)
	fill(u.buf[:256], 4)
	ah := testAH{verbs.AHAttr{DGID: verbs.GIDFromAddr(l.b.Local()), TrafficClass: 0x60, HopLimit: 200, FlowLabel: 0xABCDE}}
	_, err = u.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: u.sge(0, 256), AH: ah, RemoteQPN: v.qp.Num(), RemoteQKey: 0x11111111}})
	must(t, err)
	for {
		n, to, sport, ok := l.a.OutputFrom(l.now, l.buf)
		if !ok {
			t.Fatal("no UD packet")
		}
		if wire.BTH(l.buf).Opcode() != wire.UDSendOnly {
			continue // the RC QP's
		}
		if got, want := l.a.OutputIP(), (IPHeader{TrafficClass: 0x60, HopLimit: 200, FlowLabel: 0xABCDE}); got != want {
			t.Errorf("UD OutputIP = %+v, want %+v", got, want)
		}
		l.b.Input(l.now, l.buf[:n], l.a.Local(), sport)
		_ = to
		break
	}
	wcs = collect(l, t, v.rcq, 1)
	if wcs[0].Status != verbs.WCSuccess || wcs[0].ByteLen != 40+256 {
		t.Fatalf("UD recv WC %+v", wcs[0])
	}
	ip := wire.IPv6(v.buf[:40])
	if ip.Version() != 6 || ip.Src() != l.a.Local() || ip.Dst() != l.b.Local() || ip.NextHeader() != wire.IPProtocolUDP || ip.PayloadLen() != wire.UDPLen+wire.BTHLen+wire.DETHLen+256+wire.ICRCLen {
		t.Errorf("GRH %x: want the IPv6 header from %v to %v", v.buf[:40], l.a.Local(), l.b.Local())
	}
	if !bytes.Equal(v.buf[40:40+256], u.buf[:256]) {
		t.Error("UD payload differs")
	}
}

// connectAV connects two RC QPs as connectRC does, with the address
// vectors given (a's to b, b's to a).
func connectAV(t testing.TB, a, b *side, avA, avB verbs.AHAttr) {
	for _, x := range []struct {
		s, peer *side
		av      verbs.AHAttr
	}{{a, b, avA}, {b, a, avB}} {
		must(t, x.s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic, PortNum: 1},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		must(t, x.s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: x.peer.qp.Num(), MaxDestRdAtomic: 16, MinRNRTimer: 1, AHAttr: x.av},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
		must(t, x.s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 10, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	}
}

func boolErr(ok bool, msg string) error {
	if ok {
		return nil
	}
	return errors.New(msg)
}

// An engine sends to its own address family only: an IPv6 engine refuses
// an IPv4-mapped destination and an IPv4 engine an IPv6 one, as a QP
// attribute (an error) and as a UD send (an error completion).
func TestIPv6FamilyChecked(t *testing.T) {
	for _, c := range []struct{ local, peer string }{{"fd00:6::1", "10.0.0.2"}, {"10.0.0.1", "fd00:6::2"}} {
		e, err := New(Config{Local: netip.MustParseAddr(c.local)})
		must(t, err)
		s := newSide(t, e, verbs.QPTRC, 4096)
		must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		err = s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: 0x12, MaxDestRdAtomic: 1, MinRNRTimer: 1,
			AHAttr: verbs.AHAttr{DGID: verbs.GIDFromAddr(netip.MustParseAddr(c.peer))}},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
		if !errors.Is(err, verbs.ErrInvalidAttr) {
			t.Errorf("%s engine, RC to %s: %v, want ErrInvalidAttr", c.local, c.peer, err)
		}
		u := newSide(t, e, verbs.QPTUD, 4096)
		must(t, u.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, QKey: 1, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
		must(t, u.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState))
		must(t, u.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState|verbs.AttrSQPSN))
		ah := testAH{verbs.AHAttr{DGID: verbs.GIDFromAddr(netip.MustParseAddr(c.peer))}}
		_, err = u.qp.PostSend([]verbs.SendWR{{WRID: 5, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: u.sge(0, 16), AH: ah, RemoteQPN: 2, RemoteQKey: 1}})
		must(t, err)
		buf := make([]byte, 2048)
		if _, _, _, ok := e.OutputFrom(1, buf); ok {
			t.Errorf("%s engine sent a UD packet to %s", c.local, c.peer)
		}
		if w := u.poll(u.scq); len(w) != 1 || w[0].Status != verbs.WCLocQPOpErr {
			t.Errorf("%s engine, UD to %s: WCs %+v, want one LOC_QP_OP_ERR", c.local, c.peer, w)
		}
	}
}
