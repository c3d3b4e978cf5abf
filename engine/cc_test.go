package engine

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// ccOutput returns every packet e has to send at now, copied.
func ccOutput(e *Engine, now int64) [][]byte {
	var out [][]byte
	buf := make([]byte, wire.MaxPMTU+128)
	for {
		n, _, ok := e.Output(now, buf)
		if !ok {
			return out
		}
		out = append(out, append([]byte(nil), buf[:n]...))
	}
}

// cnps returns the CNPs among pkts, checking that each parses.
func cnps(t *testing.T, pkts [][]byte) [][]byte {
	t.Helper()
	var got [][]byte
	for _, b := range pkts {
		if wire.Opcode(b[0]) != wire.CNP {
			continue
		}
		var p wire.Packet
		if err := wire.Parse(b, &p); err != nil {
			t.Fatalf("CNP does not parse: %v (% x)", err, b)
		}
		got = append(got, b)
	}
	return got
}

// TestCNPForCE: an RC request that arrives CE-marked is answered with a
// CNP as RoCEv2 Annex A17 lays it out (opcode 0x81, the sender's QP, BECN,
// PSN 0, 16 zero bytes, a valid ICRC), at most one a CNPInterval; the
// sender takes it in, counts it and cuts its window. Without CCECN the
// mark is counted and nothing is sent.
func TestCNPForCE(t *testing.T) {
	l, a, b := rcLink(t)
	post := func(id uint64) {
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: a.sge(0, 100), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		must(t, err)
	}
	// deliver sends a's packets to b (CE-marked if ce) and returns b's.
	deliver := func(ce bool) [][]byte {
		for _, p := range ccOutput(l.a, l.now) {
			l.b.InputPacket(l.now, p, l.a.Local(), wire.RoCEv2Port, &RxInfo{CE: ce})
		}
		return ccOutput(l.b, l.now)
	}
	post(1)
	got := cnps(t, deliver(true))
	if len(got) != 1 {
		t.Fatalf("%d CNPs for a CE-marked packet, want 1", len(got))
	}
	bth := wire.BTH(got[0])
	if bth.DestQP() != wire.QPN(a.qp.Num()) || !bth.BECN() || bth.FECN() || bth.PSN() != 0 || bth.AckReq() || bth.PKey() != wire.DefaultPKey {
		t.Errorf("CNP BTH: dest QP %#x BECN %v FECN %v PSN %d AckReq %v P_Key %#x", bth.DestQP(), bth.BECN(), bth.FECN(), bth.PSN(), bth.AckReq(), bth.PKey())
	}
	if pad := got[0][wire.BTHLen : wire.BTHLen+wire.CNPPadLen]; string(pad) != string(make([]byte, wire.CNPPadLen)) {
		t.Errorf("CNP reserved bytes % x", pad)
	}
	if n := len(got[0]); n != wire.BTHLen+wire.CNPPadLen+wire.ICRCLen {
		t.Errorf("CNP is %d bytes, want %d", n, wire.BTHLen+wire.CNPPadLen+wire.ICRCLen)
	}
	// The sender takes it in (its ICRC checked) and cuts its window.
	before := a.qp.Congestion()
	for _, p := range ccOutput(l.b, l.now) { // nothing left; the CNP went above
		t.Fatalf("unexpected packet % x", p)
	}
	l.a.Input(l.now, got[0], l.b.Local(), wire.RoCEv2Port)
	st := l.a.Stats()
	if st.CNPsReceived != 1 || st.CongestionCuts != 1 || st.ICRCDrops != 0 {
		t.Fatalf("after the CNP: %+v", st)
	}
	if after := a.qp.Congestion(); after.Window >= before.Window || after.Mode != CCECN {
		t.Errorf("window %d before the CNP, %d after", before.Window, after.Window)
	}
	// A second mark within the interval: no CNP; after it: one.
	post(2)
	if got := cnps(t, deliver(true)); len(got) != 0 {
		t.Errorf("%d CNPs within CNPInterval, want 0", len(got))
	}
	l.now += DefaultCNPInterval
	post(3)
	if got := cnps(t, deliver(true)); len(got) != 1 {
		t.Errorf("%d CNPs after CNPInterval, want 1", len(got))
	}
	if s := l.b.Stats(); s.ECNMarked != 3 || s.CNPsSent != 2 {
		t.Errorf("responder: ECNMarked %d CNPsSent %d, want 3 and 2", s.ECNMarked, s.CNPsSent)
	}
	collect(l, t, a.scq, 3)
}

// TestCNPOffModes: under CCLoss and CCOff a CE mark is counted and answered
// with no CNP, and a CNP received is counted and cuts nothing.
func TestCNPOffModes(t *testing.T) {
	for _, m := range []CCMode{CCLoss, CCOff} {
		t.Run(m.String(), func(t *testing.T) {
			l := newLinkCC(t, m)
			a, b := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
			connectRC(t, a, b, verbs.MTU1024)
			_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: a.sge(0, 100), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
			must(t, err)
			for _, p := range ccOutput(l.a, l.now) {
				l.b.InputPacket(l.now, p, l.a.Local(), wire.RoCEv2Port, &RxInfo{CE: true})
			}
			if got := cnps(t, ccOutput(l.b, l.now)); len(got) != 0 {
				t.Fatalf("%d CNPs under %v", len(got), m)
			}
			if s := l.b.Stats(); s.ECNMarked != 1 || s.CNPsSent != 0 {
				t.Errorf("ECNMarked %d CNPsSent %d", s.ECNMarked, s.CNPsSent)
			}
			cnp := buildCNP(t, l.b, l.a.Local(), a.qp.Num())
			l.a.Input(l.now, cnp, l.b.Local(), wire.RoCEv2Port)
			if s := l.a.Stats(); s.CNPsReceived != 1 || s.CongestionCuts != 0 {
				t.Errorf("CNPsReceived %d CongestionCuts %d", s.CNPsReceived, s.CongestionCuts)
			}
		})
	}
}

// newLinkCC is newLink with both engines in congestion mode m.
func newLinkCC(t *testing.T, m CCMode) *link {
	l := newLink(t)
	for i, addr := range []string{"10.0.0.1", "10.0.0.2"} {
		e, err := New(Config{Local: netip.MustParseAddr(addr), SourcePort: wire.RoCEv2Port, Congestion: m})
		must(t, err)
		if i == 0 {
			l.a = e
		} else {
			l.b = e
		}
	}
	return l
}

// buildCNP returns a CNP from the engine from to QP qpn at to.
func buildCNP(t *testing.T, from *Engine, to netip.Addr, qpn uint32) []byte {
	t.Helper()
	h := wire.Header{Opcode: wire.CNP, PKey: wire.DefaultPKey, BECN: true, DestQP: wire.QPN(qpn)}
	b, err := wire.AppendTransport(nil, &h, nil)
	must(t, err)
	fl := wire.Flow{Src: from.Local(), Dst: to, SrcPort: wire.RoCEv2Port}
	must(t, fl.SetDatagramICRC(b))
	return b
}

// TestCNPHostile: a CNP for a QP that is not RC, from a host that is not
// the QP's peer, or for no QP, is dropped and counted, and cuts nothing.
func TestCNPHostile(t *testing.T) {
	l, a, b := rcLink(t)
	stranger := netip.MustParseAddr("10.0.0.9")
	l.a.Input(l.now, buildCNP(t, l.b, l.a.Local(), a.qp.Num()+100), l.b.Local(), wire.RoCEv2Port)
	e2, err := New(Config{Local: stranger, SourcePort: wire.RoCEv2Port})
	must(t, err)
	l.a.Input(l.now, buildCNP(t, e2, l.a.Local(), a.qp.Num()), stranger, wire.RoCEv2Port)
	s := l.a.Stats()
	if s.UnknownQPDrops != 1 || s.WrongPeerDrops != 1 || s.CNPsReceived != 0 || s.CongestionCuts != 0 {
		t.Errorf("%+v", s)
	}
	_ = b
}

// TestGoBackNBounded: one WRITE of 4,000 packets loses one packet early:
// the requester resends from it, never more than a window's packets past
// the loss before the NAK, so the resends stay within a window (the issue
// measured 125 k resends a NAK for one 256 MiB WRITE: nothing bounded a
// multi-packet WQE's packets in flight). Every mode, CCOff included.
func TestGoBackNBounded(t *testing.T) {
	for _, m := range []CCMode{CCOff, CCLoss, CCECN} {
		t.Run(m.String(), func(t *testing.T) {
			l := newLinkCC(t, m)
			const size = 4000 * 1024
			a, b := newSide(t, l.a, verbs.QPTRC, size), newSide(t, l.b, verbs.QPTRC, size)
			connectRC(t, a, b, verbs.MTU1024)
			fill(a.buf, 7)
			l.drop = func(n int) bool { return n == 100 }
			_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: a.sge(0, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
			must(t, err)
			wc := collect(l, t, a.scq, 1)
			if wc[0].Status != verbs.WCSuccess {
				t.Fatalf("%v", wc[0].Status)
			}
			for i := range a.buf {
				if a.buf[i] != b.buf[i] {
					t.Fatalf("byte %d differs", i)
				}
			}
			s := l.a.Stats()
			if s.Retransmits == 0 || s.Retransmits > uint64(l.a.cfg.Window) {
				t.Errorf("%d packets resent for one loss, want 1 to a window (%d)", s.Retransmits, l.a.cfg.Window)
			}
			// One loss on a link with no queue is a random one: no cut.
			if s.CongestionCuts != 0 {
				t.Errorf("%d window cuts for one loss with no queue, want 0", s.CongestionCuts)
			}
		})
	}
}

// TestSharedWindow: 16 QPs to one peer share one congestion window: the
// packets they have in flight together never exceed it (by more than the
// packet a path may always have), where without control each could have a
// whole Window; all complete.
func TestSharedWindow(t *testing.T) {
	l := newLinkCC(t, CCECN)
	const nqp, wrs, size = 16, 8, 64 << 10
	as, bs := make([]*side, nqp), make([]*side, nqp)
	for i := range nqp {
		as[i], bs[i] = newSide(t, l.a, verbs.QPTRC, size), newSide(t, l.b, verbs.QPTRC, size)
		connectRC(t, as[i], bs[i], verbs.MTU1024)
		for w := range wrs {
			_, err := as[i].qp.PostSend([]verbs.SendWR{{WRID: uint64(w), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: as[i].sge(0, size), RemoteAddr: bs[i].mr.Addr(), RKey: bs[i].mr.RKey()}})
			must(t, err)
		}
	}
	// Cut the window by hand (as CNPs would) to well below 16 Windows.
	p := as[0].qp.path
	p.cwnd = 64
	p.ssthresh = 64
	peak := 0
	done := 0
	for i := 0; done < nqp*wrs; i++ {
		if i > 100_000 {
			t.Fatalf("stuck at %d of %d", done, nqp*wrs)
		}
		// All a may send now, then the count, before b hears of them.
		out := ccOutput(l.a, l.now)
		total := 0
		for _, s := range as {
			total += s.qp.Congestion().InFlight
		}
		if c := as[0].qp.Congestion(); c.PathInFlight != total {
			t.Fatalf("path counts %d in flight, its QPs %d", c.PathInFlight, total)
		}
		peak = max(peak, total)
		if lim := int(p.cwnd) + 1; total > lim {
			t.Fatalf("%d packets in flight, window %d", total, int(p.cwnd))
		}
		for _, b := range out {
			l.b.Input(l.now, b, l.a.Local(), wire.RoCEv2Port)
		}
		for _, b := range ccOutput(l.b, l.now) {
			l.a.Input(l.now, b, l.b.Local(), wire.RoCEv2Port)
		}
		if len(out) == 0 {
			l.now = max(l.now+1, min0(l.a.NextDeadline(), l.b.NextDeadline()))
			l.a.Tick(l.now)
			l.b.Tick(l.now)
		}
		for _, s := range as {
			for _, w := range s.poll(s.scq) {
				if w.Status != verbs.WCSuccess {
					t.Fatalf("%v", w.Status)
				}
				done++
			}
		}
	}
	if peak < 64 {
		t.Fatalf("at most %d packets in flight, window 64 and more: the window was never used", peak)
	}
	t.Logf("peak %d packets in flight, window %d", peak, int(p.cwnd))
}

// TestCNPOnRxDrops: after the packet path reports drops (NoteRxDrops), the
// RC packets input within CNPInterval are answered with CNPs as if
// CE-marked (counted in RxCongestion, not ECNMarked); later ones are not.
func TestCNPOnRxDrops(t *testing.T) {
	l, a, b := rcLink(t)
	post := func(id uint64) {
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: a.sge(0, 100), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		must(t, err)
	}
	deliver := func() [][]byte {
		for _, p := range ccOutput(l.a, l.now) {
			l.b.Input(l.now, p, l.a.Local(), wire.RoCEv2Port)
		}
		return ccOutput(l.b, l.now)
	}
	l.b.NoteRxDrops(l.now)
	post(1)
	if got := cnps(t, deliver()); len(got) != 1 {
		t.Fatalf("%d CNPs after drops, want 1", len(got))
	}
	l.now += 2 * DefaultCNPInterval
	post(2)
	if got := cnps(t, deliver()); len(got) != 0 {
		t.Fatalf("%d CNPs long after the drops, want 0", len(got))
	}
	if s := l.b.Stats(); s.RxCongestion != 1 || s.CNPsSent != 1 || s.ECNMarked != 0 {
		t.Errorf("RxCongestion %d CNPsSent %d ECNMarked %d", s.RxCongestion, s.CNPsSent, s.ECNMarked)
	}
}

// TestReNAK: the packet a gap NAK asks for is lost again: the responder
// NAKs the gap a second time when the requests resent behind it arrive,
// and the WRITE completes without the local ACK timer (where rdma_rxe
// NAKs a gap once and the requester would wait for its timeout).
func TestReNAK(t *testing.T) {
	l, a, b := rcLink(t)
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: a.sge(0, 20*1024), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	must(t, err)
	var lost wire.PSN
	drops := 0
	for i := 0; i < 100 && l.a.Stats().Timeouts == 0; i++ {
		for _, p := range ccOutput(l.a, l.now) {
			psn := wire.BTH(p).PSN()
			if drops == 0 && wire.Opcode(p[0]) == wire.RCWriteMiddle {
				lost = psn
			}
			if psn == lost && drops < 2 && wire.Opcode(p[0]) == wire.RCWriteMiddle {
				drops++ // the first copy and the first resend
				continue
			}
			l.b.Input(l.now, p, l.a.Local(), wire.RoCEv2Port)
		}
		for _, p := range ccOutput(l.b, l.now) {
			l.a.Input(l.now, p, l.b.Local(), wire.RoCEv2Port)
		}
		if wc := a.poll(a.scq); len(wc) == 1 {
			if wc[0].Status != verbs.WCSuccess {
				t.Fatal(wc[0].Status)
			}
			if s := l.b.Stats(); drops != 2 || s.NAKsSent != 2 {
				t.Errorf("%d drops, %d NAKs sent, want 2 and 2", drops, s.NAKsSent)
			}
			return
		}
		l.now += 1000
	}
	t.Fatalf("no completion without the timer: a %+v b %+v", l.a.Stats(), l.b.Stats())
}

// TestProbeAfterLostNAK: a packet is lost and the NAK of its gap too; the
// responder drops what follows the gap. Its NAK lost once, the first tail
// loss probe (the last packet again) has the responder NAK the gap again;
// every NAK lost (as from a responder that NAKs a gap once, as rdma_rxe's,
// whose one NAK was lost), the next probe goes back to the oldest packet
// not acknowledged. Either way the WRITE completes before the local ACK
// timer (4.2 ms here) fires.
func TestProbeAfterLostNAK(t *testing.T) {
	for _, c := range []struct {
		name     string
		naksLost int    // NAKs dropped, from the first
		probes   uint64 // the tail probes the recovery takes
		exact    bool   // exactly that many, or at least
	}{{"NAK lost once", 1, 1, true}, {"every NAK lost", 1 << 30, 2, false}} {
		t.Run(c.name, func(t *testing.T) {
			l, a, b := rcLink(t)
			_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: a.sge(0, 8*1024), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
			must(t, err)
			lostData, naksLost := false, 0
			start := l.now
			for l.now-start < 20_000_000 {
				for _, p := range ccOutput(l.a, l.now) {
					if !lostData && wire.Opcode(p[0]) == wire.RCWriteMiddle {
						lostData = true
						continue
					}
					l.b.Input(l.now, p, l.a.Local(), wire.RoCEv2Port)
				}
				for _, p := range ccOutput(l.b, l.now) {
					var pk wire.Packet
					if naksLost < c.naksLost && wire.Parse(p, &pk) == nil && wire.Opcode(p[0]) == wire.RCAcknowledge && pk.AETH().Syndrome().IsNAK() {
						naksLost++
						continue
					}
					l.a.Input(l.now, p, l.b.Local(), wire.RoCEv2Port)
				}
				if wc := a.poll(a.scq); len(wc) == 1 {
					s := l.a.Stats()
					if wc[0].Status != verbs.WCSuccess || s.Timeouts != 0 || s.TailProbes < c.probes || c.exact && s.TailProbes != c.probes || naksLost == 0 {
						t.Errorf("after %v: %v, %d timeouts, %d tail probes, %d NAKs lost; want success, no timeout, %d probes (exactly: %v), a NAK lost",
							time.Duration(l.now-start), wc[0].Status, s.Timeouts, s.TailProbes, naksLost, c.probes, c.exact)
					}
					return
				}
				l.a.Tick(l.now)
				l.now += 100_000
			}
			t.Fatalf("no completion in 20 ms: a %+v b %+v", l.a.Stats(), l.b.Stats())
		})
	}
}

// TestProbesKeepNoTimer: a peer that answers nothing gets tail loss
// probes, and the QP still ends in RETRY_EXC_ERR when its local ACK timer
// (67 ms) has fired retry_cnt + 1 times, for a one-packet message (which
// each probe takes back whole) as for a longer one: probes come at most 16
// ms apart, and when each restarted the timer it never fired.
func TestProbesKeepNoTimer(t *testing.T) {
	for _, size := range []int{64, 8 * 1024} {
		l := newLink(t)
		a, b := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
		connectRCTimeout(t, a, b, verbs.MTU1024, 7, 14)
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: a.sge(0, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		must(t, err)
		start, limit := l.now, int64(2*time.Second)
		for l.now-start < limit {
			ccOutput(l.a, l.now) // the peer hears nothing
			if wc := a.poll(a.scq); len(wc) == 1 {
				s := l.a.Stats()
				if at := time.Duration(l.now - start); wc[0].Status != verbs.WCRetryExcErr || s.Timeouts != 8 || s.TailProbes == 0 || at > 600*time.Millisecond {
					t.Errorf("%d bytes: %v after %v, %d timeouts, %d tail probes; want RETRY_EXC_ERR after 8 timeouts of 67 ms, probes between", size, wc[0].Status, at, s.Timeouts, s.TailProbes)
				}
				break
			}
			l.a.Tick(l.now)
			l.now += 500_000
		}
		if l.now-start >= limit {
			t.Errorf("%d bytes: no completion in %v: %+v", size, time.Duration(limit), l.a.Stats())
		}
	}
}

// ccPost posts n signaled WRITEs of size bytes from a to b.
func ccPost(t *testing.T, a, b *side, n, size int) {
	t.Helper()
	for i := range n {
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: a.sge(0, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		must(t, err)
	}
}

// TestSparseAndHeld: on a path whose window bulk QPs fill, a QP with
// nothing in flight still sends a message of one packet at once (a ping is
// not queued behind bulk turns), a bulk QP that the window holds sends
// nothing, and room goes to the QPs the window held, in the order it held
// them.
func TestSparseAndHeld(t *testing.T) {
	l := newLinkCC(t, CCECN)
	bulk1, peer1 := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	bulk2, peer2 := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	ping, pingPeer := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	for _, p := range [][2]*side{{bulk1, peer1}, {bulk2, peer2}, {ping, pingPeer}} {
		connectRC(t, p[0], p[1], verbs.MTU1024)
	}
	p := bulk1.qp.path
	ccPost(t, bulk1, peer1, 1, 64<<10)
	if out := ccOutput(l.a, l.now); len(out) != initWindow {
		t.Fatalf("bulk QP sent %d packets, want its path's first window %d", len(out), initWindow)
	}
	ccPost(t, bulk2, peer2, 1, 64<<10)
	if out := ccOutput(l.a, l.now); len(out) != 0 || !bulk2.qp.req.ccWaiting {
		t.Fatalf("second bulk QP sent %d packets into a full window (held %v)", len(out), bulk2.qp.req.ccWaiting)
	}
	ccPost(t, ping, pingPeer, 1, 64)
	if out := ccOutput(l.a, l.now); len(out) != 1 {
		t.Fatalf("a one-packet WRITE on an idle QP sent %d packets, want 1 despite the full window", len(out))
	}
	// Room for less than a turn: nothing goes. Room for a turn, twice:
	// bulk1 (held first, at its 33rd packet) takes the first, bulk2 (held
	// after it) the second, though the output visits bulk1 first both
	// times; only a turn's last packet asks for an ACK.
	g := p.turn(bulk1.qp.runQuantum())
	full := p.inflight
	p.inflight = int(p.cwnd) - g + 1
	if out := ccOutput(l.a, l.now); len(out) != 0 {
		t.Fatalf("room for %d packets, less than a turn of %d: %d sent", g-1, g, len(out))
	}
	for i, want := range []*side{bulk1, bulk2} {
		before := want.qp.req.ccOut
		p.inflight = int(p.cwnd) - g
		out := ccOutput(l.a, l.now)
		p.inflight = full
		if len(out) != g || want.qp.req.ccOut != before+g {
			t.Fatalf("room for a turn of %d (%d): %d sent, bulk1 %d in flight, bulk2 %d; want it to the QP held %s", g, i, len(out),
				bulk1.qp.req.ccOut, bulk2.qp.req.ccOut, []string{"first", "second"}[i])
		}
		for k, pkt := range out {
			if ask := wire.BTH(pkt).AckReq(); ask != (k == g-1) {
				t.Errorf("turn %d, packet %d of %d: AckReq %v", i, k, g, ask)
			}
		}
	}
}

// TestHeldIsNoRetry: a QP that its path's window holds, with nothing in the
// network, for longer than its local ACK timeout x retry count, neither
// times out nor fails: waiting for the window is no retry.
func TestHeldIsNoRetry(t *testing.T) {
	l := newLinkCC(t, CCECN)
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	c, d := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	connectRC(t, a, b, verbs.MTU1024)
	connectRC(t, c, d, verbs.MTU1024)
	ccPost(t, c, d, 1, 2048)
	if out := ccOutput(l.a, l.now); len(out) != 2 {
		t.Fatalf("c sent %d packets, want 2", len(out))
	}
	ccPost(t, a, b, 1, 64<<10)
	ccOutput(l.a, l.now) // a fills the window
	// c's packets are lost and c goes back: then only the window holds it.
	c.qp.rewind(c.qp.resumePSN())
	if c.qp.req.ccOut != 0 {
		t.Fatalf("c has %d in flight after going back", c.qp.req.ccOut)
	}
	a.qp.path.inflight += 1 << 20 // and the window stays full (of others' packets)
	for range 20 {
		l.now += c.qp.timeoutNs() + 1
		l.a.Tick(l.now)
		ccOutput(l.a, l.now)
	}
	if s := l.a.Stats(); c.qp.state != verbs.QPSRTS || c.qp.req.retryLeft != int(c.qp.retryCnt) {
		t.Fatalf("held QP: state %v, %d retries left of %d; %d timeouts counted", c.qp.state, c.qp.req.retryLeft, c.qp.retryCnt, s.Timeouts)
	}
}

// stand feeds the path round trips of rtt for long enough (from at) that
// its standing round trip is rtt.
func stand(p *ccPath, at, rtt int64) {
	for i := range int64(3) {
		p.sample(at+i*300_000, rtt)
	}
}

// TestDelayCut: a loss with no queue to show (the standing round trip near
// the least) is taken for a random one: no cut, but the delay response
// arms; a loss with a queue to show cuts by lossBeta and arms
// it; then a smoothed round trip more than TargetDelay above the least
// cuts the window (DelayCuts), at most once a round trip, never at or
// below the target.
func TestDelayCut(t *testing.T) {
	l := newLinkCC(t, CCECN)
	e := l.a
	p := newPath(netip.MustParseAddr("10.0.0.2"), 512)
	const base = 50_000
	p.sample(1, base)
	stand(p, 300_000, base+10*DefaultTargetDelay)
	e.onDelay(p, 500_000)
	if e.stats.DelayCuts != 0 {
		t.Fatal("a delay cut on a path that never lost a packet or had a CNP")
	}
	stand(p, 600_000, base) // the queue gone
	w := p.cwnd
	e.onLoss(p, 1_000_000)
	if !p.queued || p.cwnd != w || e.stats.CongestionCuts != 0 {
		t.Fatalf("a loss with no queue: window %.1f -> %.1f, delay response armed %v; want no cut, armed", w, p.cwnd, p.queued)
	}
	stand(p, 2_000_000, base+10*DefaultTargetDelay) // a standing queue
	w = p.cwnd
	e.onLoss(p, 5_000_000)
	if !p.queued || p.cwnd != w*lossBeta {
		t.Fatalf("a loss with a queue: window %.1f -> %.1f, armed %v; want x%.1f, armed", w, p.cwnd, p.queued, lossBeta)
	}
	w = p.cwnd
	stand(p, 6_000_000, base+DefaultTargetDelay)
	e.onDelay(p, 7_000_000)
	if e.stats.DelayCuts != 0 || p.cwnd != w {
		t.Fatalf("a round trip at the target cut the window %.1f -> %.1f", w, p.cwnd)
	}
	srtt := int64(base + 3*DefaultTargetDelay)
	stand(p, 7_000_000, srtt)
	tgt := p.target(DefaultTargetDelay) // the window's (flow scaling)
	e.onDelay(p, 8_000_000)
	want := max(w*(1-swiftBeta*float64(srtt-base-tgt)/float64(srtt)), w*(1-swiftMaxMDF))
	if e.stats.DelayCuts != 1 || p.cwnd != want {
		t.Fatalf("after a round trip of %d ns: %d delay cuts, window %.2f, want 1 and %.2f", srtt, e.stats.DelayCuts, p.cwnd, want)
	}
	e.onDelay(p, 8_000_000+p.srtt/2)
	if e.stats.DelayCuts != 1 {
		t.Fatal("two delay cuts within a round trip")
	}
}

// TestFlowScaledTarget: the target delay is the configured one for a
// window of fsMax packets or more, 1+fsRange times it at fsMin, and falls
// in between as the window grows (Swift's flow scaling).
func TestFlowScaledTarget(t *testing.T) {
	p := newPath(netip.MustParseAddr("10.0.0.2"), 512)
	const base = DefaultTargetDelay
	prev := int64(math.MaxInt64)
	for _, w := range []float64{1, fsMin, 3, 4, 8, 16, 32, fsMax, 128, 4096} {
		p.cwnd = w
		got := p.target(base)
		switch {
		case w <= fsMin && got != base+int64(fsRange*base):
			t.Errorf("window %v: target %d, want %d", w, got, base+int64(fsRange*base))
		case w >= fsMax && got != base:
			t.Errorf("window %v: target %d, want %d", w, got, base)
		case got > prev:
			t.Errorf("window %v: target %d above the smaller window's %d", w, got, prev)
		}
		prev = got
	}
}

// TestRunLength: the output takes 64 KB in a row from one QP before it
// turns to the next (runLen): 16 packets at a path MTU of 4096, 64 at
// 1024, which then fill a GSO message of the QP's own source port.
func TestRunLength(t *testing.T) {
	for _, c := range []struct {
		mtu  verbs.MTU
		want int
	}{{verbs.MTU4096, 16}, {verbs.MTU1024, 64}, {verbs.MTU256, rrMaxRun}} {
		l := newLinkCC(t, CCOff)
		x, px := newSide(t, l.a, verbs.QPTRC, 1<<20), newSide(t, l.b, verbs.QPTRC, 1<<20)
		y, py := newSide(t, l.a, verbs.QPTRC, 1<<20), newSide(t, l.b, verbs.QPTRC, 1<<20)
		connectRC(t, x, px, c.mtu)
		connectRC(t, y, py, c.mtu)
		size := 3 * c.want * c.mtu.Bytes() // more than a run each
		ccPost(t, x, px, 1, size)
		ccPost(t, y, py, 1, size)
		var runs []int
		last := wire.QPN(0)
		for _, pkt := range ccOutput(l.a, l.now) {
			if q := wire.BTH(pkt).DestQP(); q != last || len(runs) == 0 {
				runs, last = append(runs, 0), q
			}
			runs[len(runs)-1]++
		}
		if len(runs) < 3 || runs[0] != c.want || runs[1] != c.want {
			t.Errorf("path MTU %d: runs of %v packets, want runs of %d", c.mtu.Bytes(), runs, c.want)
		}
	}
}
