package probe_test

import (
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/verbs"
)

// pair is a prober on device A and a responder on device B, over UDP on
// loopback.
type pair struct {
	ca, cb verbs.Context
	p      *probe.Prober
	r      *probe.Responder
	col    *collector
}

func newPair(t *testing.T, po probe.ProberOptions, ro probe.ResponderOptions) *pair {
	t.Helper()
	x := &pair{col: newCollector()}
	_, x.ca = softContext(t, addrA)
	_, x.cb = softContext(t, addrB)
	var err error
	if x.r, err = probe.NewResponder(x.cb, ro); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.r.Close() })
	if po.OnResult == nil {
		po.OnResult = x.col.add
	}
	if x.p, err = probe.NewProber(x.ca, po); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.p.Close() })
	return x
}

// run sends n probes gap apart over labels and waits for n results.
func (x *pair) run(t *testing.T, n int, gap time.Duration, qpn int) []probe.Result {
	t.Helper()
	labels := probe.FlowLabels(3, 16)
	for i := 0; i < n; i++ {
		if err := x.p.Probe(peerOf(x.r, qpn), labels[i%len(labels)], "t"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(gap)
	}
	rs := x.col.wait(t, 10*time.Second, count(n))
	if len(rs) != n {
		t.Fatalf("%d results of %d probes", len(rs), n)
	}
	return rs
}

func median(rs []probe.Result, f func(probe.Result) time.Duration) time.Duration {
	v := make([]time.Duration, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v[len(v)/2]
}

func checkOK(t *testing.T, rs []probe.Result) {
	t.Helper()
	seqs := map[uint64]bool{}
	for _, r := range rs {
		if r.Outcome != probe.OutcomeOK {
			t.Fatalf("outcome %v (%s): %+v", r.Outcome, r.Reason, r)
		}
		if seqs[r.Seq] {
			t.Fatalf("seq %#x reported twice", r.Seq)
		}
		seqs[r.Seq] = true
		if r.T1 == 0 || r.T2 < r.T1 || r.T5 < r.T2 || r.T6 < r.T5 || r.T4 < r.T3 {
			t.Fatalf("timestamps out of order: %+v", r)
		}
		if r.NetworkRTT <= 0 || r.ResponderDelay < 0 || r.ProberDelay < 0 {
			t.Fatalf("delays: %+v", r)
		}
		if r.NetworkRTT != time.Duration((r.T5-r.T2)-(r.T4-r.T3)) || r.ResponderDelay != time.Duration(r.T4-r.T3) ||
			r.ProberDelay != time.Duration((r.T6-r.T1)-(r.T5-r.T2)) {
			t.Fatalf("formulas: %+v", r)
		}
		if r.SrcPort != probe.SourcePort(r.FlowLabel) || r.Timestamps != probe.TimestampsSoftware || r.Class != "t" {
			t.Fatalf("fields: %+v", r)
		}
	}
}

// TestProbeLoopback: 200 probes over 16 labels to each of 4 responder QPs,
// all complete with sane delays; the counters agree.
func TestProbeLoopback(t *testing.T) {
	x := newPair(t, probe.ProberOptions{}, probe.ResponderOptions{QPs: 4})
	if q := x.r.QPNs(); len(q) != 4 {
		t.Fatalf("QPNs %v", q)
	}
	var rs []probe.Result
	for q := 0; q < 4; q++ {
		rs = append(rs, x.run(t, 50, 200*time.Microsecond, q)...)
		x.col.reset()
	}
	checkOK(t, rs)
	ps := x.p.Stats()
	// The second ACK reaches the prober before the responder has polled its
	// send completion, so the responder's Completed catches up afterwards.
	rsst := x.r.Stats()
	for deadline := time.Now().Add(5 * time.Second); rsst.Completed < 200 && time.Now().Before(deadline); rsst = x.r.Stats() {
		time.Sleep(time.Millisecond)
	}
	if ps.Sent != 200 || ps.Completed != 200 || ps.Lost+ps.Errors+ps.Invalid+ps.Mismatched+ps.Unmatched+ps.Duplicates != 0 || ps.InFlight != 0 {
		t.Fatalf("prober stats %+v", ps)
	}
	if rsst.Received != 200 || rsst.Answered != 200 || rsst.Completed != 200 || rsst.Invalid+rsst.Dropped != 0 || rsst.AHs != 4 { // one per responder QP: the ACKs' label follows the QP pair
		t.Fatalf("responder stats %+v", rsst)
	}
	if ps.AHs != 16 {
		t.Fatalf("%d AHs cached for 16 labels", ps.AHs)
	}
	t.Logf("median network RTT %v, prober delay %v, responder delay %v", median(rs, func(r probe.Result) time.Duration { return r.NetworkRTT }),
		median(rs, func(r probe.Result) time.Duration { return r.ProberDelay }), median(rs, func(r probe.Result) time.Duration { return r.ResponderDelay }))
}

// TestResponderStall: a responder stalled 100 ms before each first ACK
// shows in ResponderDelay (every probe's), not in NetworkRTT (the median's:
// one probe's round trip on a loaded machine may take tens of ms).
func TestResponderStall(t *testing.T) {
	const stall = 100 * time.Millisecond
	x := newPair(t, probe.ProberOptions{}, probe.ResponderOptions{BeforeACK1: func() { time.Sleep(stall) }})
	rs := x.run(t, 8, stall+10*time.Millisecond, 0)
	checkOK(t, rs)
	for _, r := range rs {
		if r.ResponderDelay < stall {
			t.Errorf("responder delay %v (stall %v), network RTT %v", r.ResponderDelay, stall, r.NetworkRTT)
		}
	}
	if rtt := median(rs, func(r probe.Result) time.Duration { return r.NetworkRTT }); rtt >= stall/2 {
		t.Errorf("median network RTT %v with the responder stalled %v before each first ACK", rtt, stall)
	}
}

// TestProberStall: a prober stalled 100 ms before each poll shows in
// ProberDelay, not in NetworkRTT. This needs completions stamped when they
// are produced, not when polled.
func TestProberStall(t *testing.T) {
	const stall = 100 * time.Millisecond
	var stalling atomicBool
	x := newPair(t, probe.ProberOptions{BeforePoll: func() {
		if stalling.Load() {
			time.Sleep(stall)
		}
	}}, probe.ResponderOptions{})
	if da, _ := x.ca.QueryDevice(); da.CompletionTimestamps == verbs.TimestampNone {
		t.Skip("the device does not stamp completions: times read at poll put the stall into the network RTT")
	}
	stalling.Store(true)
	rs := x.run(t, 8, stall+10*time.Millisecond, 0)
	checkOK(t, rs)
	pd := median(rs, func(r probe.Result) time.Duration { return r.ProberDelay })
	rtt := median(rs, func(r probe.Result) time.Duration { return r.NetworkRTT })
	if pd < stall/2 || rtt >= stall/4 {
		t.Errorf("median prober delay %v, network RTT %v with the prober stalled %v before each poll", pd, rtt, stall)
	}
	for _, r := range rs {
		if r.NetworkRTT >= stall/2 {
			t.Errorf("network RTT %v with the prober stalled %v (prober delay %v)", r.NetworkRTT, stall, r.ProberDelay)
		}
	}
}

// TestLost: probes to a closed responder are lost after the timeout, each
// reported once.
func TestLost(t *testing.T) {
	const timeout = 100 * time.Millisecond
	x := newPair(t, probe.ProberOptions{Timeout: timeout}, probe.ResponderOptions{})
	peer := peerOf(x.r, 0)
	x.r.Close()
	start := time.Now()
	for i := 0; i < 5; i++ {
		if err := x.p.Probe(peer, 1, "t"); err != nil {
			t.Fatal(err)
		}
	}
	rs := x.col.wait(t, 5*time.Second, count(5))
	time.Sleep(2 * timeout)
	rs = x.col.wait(t, 0, count(0))
	if len(rs) != 5 {
		t.Fatalf("%d results for 5 probes", len(rs))
	}
	for _, r := range rs {
		if r.Outcome != probe.OutcomeLost || r.T1 == 0 || r.T5 != 0 {
			t.Fatalf("%+v", r)
		}
	}
	if el := time.Since(start); el < timeout {
		t.Fatalf("lost after %v, before the timeout %v", el, timeout)
	}
	if s := x.p.Stats(); s.Lost != 5 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestLate: a responder stalled longer than the timeout: the probe is lost,
// then late, once, although both ACKs arrive.
func TestLate(t *testing.T) {
	const timeout = 100 * time.Millisecond
	x := newPair(t, probe.ProberOptions{Timeout: timeout}, probe.ResponderOptions{BeforeACK1: func() { time.Sleep(3 * timeout) }})
	if err := x.p.Probe(peerOf(x.r, 0), 7, "t"); err != nil {
		t.Fatal(err)
	}
	rs := x.col.wait(t, 5*time.Second, count(2))
	time.Sleep(timeout) // the second ACK too
	rs = x.col.wait(t, 0, count(0))
	if len(rs) != 2 || rs[0].Outcome != probe.OutcomeLost || rs[1].Outcome != probe.OutcomeLate || rs[0].Seq != rs[1].Seq {
		t.Fatalf("results %+v", rs)
	}
	if s := x.p.Stats(); s.Lost != 1 || s.Late != 1 || s.Unmatched != 1 {
		t.Fatalf("stats %+v (the second ACK is unmatched)", s)
	}
}

// TestForgedACK: a fake responder answers a probe first from another QP of
// its device and from a QP of the same number on another device (another
// GID), then from the QP probed: the forgeries are ignored and counted, the
// probe completes.
func TestForgedACK(t *testing.T) {
	_, ca := softContext(t, addrA)
	_, cc := softContext(t, addrC)
	_, cd := softContext(t, addrB)
	fake := newRawUD(t, cc)  // the responder probed
	other := newRawUD(t, cc) // another QPN, same GID
	evil := newRawUD(t, cd)  // same QPN, another GID
	if evil.qp.Num() != fake.qp.Num() {
		t.Skipf("QPNs %d and %d differ: cannot forge the GID alone", evil.qp.Num(), fake.qp.Num())
	}
	col := newCollector()
	p, err := probe.NewProber(ca, probe.ProberOptions{OnResult: col.add})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	gidC := verbs.GIDFromAddr(addrC)
	if err := p.Probe(probe.Peer{GID: gidC, QPN: fake.qp.Num()}, 9, "t"); err != nil {
		t.Fatal(err)
	}
	b, src, ok := fake.recv(5 * time.Second)
	if !ok {
		t.Fatal("no probe")
	}
	m, err := probe.ParseMessage(b)
	if err != nil || m.Type != probe.TypeProbe || src != p.QPN() {
		t.Fatalf("probe %+v, %v from QPN %d", m, err, src)
	}
	ack := func(u *rawUD, typ uint8, t1 uint64) {
		a := probe.Message{Version: 1, Type: probe.TypeAck, AckType: typ, Seq: m.Seq, T1: t1, T3: uint64(verbs.Now())}
		if typ == probe.AckSecond {
			a.T4 = a.T3 + 1000
			a.T3 -= 1000
		}
		u.send(a.Append(nil), p.GID(), p.QPN())
	}
	ack(other, probe.AckFirst, m.T1)
	ack(evil, probe.AckFirst, m.T1)
	ack(fake, probe.AckFirst, m.T1+1) // the wrong T1
	proberStats(p, func(s probe.ProberStats) bool { return s.Mismatched >= 3 })
	if s := p.Stats(); s.Mismatched != 3 || s.InFlight != 1 || len(col.wait(t, 0, count(0))) != 0 {
		t.Fatalf("stats %+v after three forged ACKs", s)
	}
	ack(fake, probe.AckFirst, m.T1)
	ack(fake, probe.AckSecond, m.T1)
	rs := col.wait(t, 5*time.Second, count(1))
	if len(rs) != 1 || rs[0].Outcome != probe.OutcomeOK {
		t.Fatalf("results %+v", rs)
	}
	// An ACK for no probe is counted as unmatched.
	ack(fake, probe.AckFirst, m.T1)
	proberStats(p, func(s probe.ProberStats) bool { return s.Unmatched >= 1 })
	if s := p.Stats(); s.Unmatched != 1 || s.Completed != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// proberStats waits, up to 5 s, until p's counters satisfy cond: packets
// sent to it are taken in by its own goroutine, some time after they leave.
func proberStats(p *probe.Prober, cond func(probe.ProberStats) bool) {
	for deadline := time.Now().Add(5 * time.Second); !cond(p.Stats()) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// TestResponderGarbage: payloads that are no probe are dropped and counted;
// the responder keeps answering.
func TestResponderGarbage(t *testing.T) {
	x := newPair(t, probe.ProberOptions{}, probe.ResponderOptions{})
	_, cc := softContext(t, addrC)
	u := newRawUD(t, cc)
	good := probe.Message{Version: 1, Type: probe.TypeProbe, Seq: 1, T1: 2}
	v2 := good
	v2.Version = 2
	ackMsg := probe.Message{Version: 1, Type: probe.TypeAck, AckType: probe.AckFirst, Seq: 1}
	garbage := [][]byte{
		{},
		[]byte("short"),
		good.Append(nil)[:39],
		v2.Append(nil),
		ackMsg.Append(nil),
		make([]byte, 40),
		make([]byte, 1000),
	}
	for _, g := range garbage {
		u.send(g, x.r.GID(), x.r.QPNs()[0])
	}
	// Wait (bounded) until the responder has taken in every payload.
	for deadline := time.Now().Add(5 * time.Second); x.r.Stats().Invalid < uint64(len(garbage)) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if _, _, ok := u.recv(10 * time.Millisecond); ok {
		t.Fatal("the responder answered garbage")
	}
	if s := x.r.Stats(); s.Invalid != uint64(len(garbage)) || s.Answered != 0 {
		t.Fatalf("stats %+v after %d garbage payloads", s, len(garbage))
	}
	// A well-formed probe from the raw QP is answered with both ACKs.
	u.send(good.Append(nil), x.r.GID(), x.r.QPNs()[0])
	for _, want := range []uint8{probe.AckFirst, probe.AckSecond} {
		b, src, ok := u.recv(5 * time.Second)
		if !ok {
			t.Fatal("no ACK")
		}
		m, err := probe.ParseMessage(b)
		if err != nil || m.AckType != want || m.Seq != 1 || m.T1 != 2 || m.T3 == 0 || src != x.r.QPNs()[0] ||
			(want == probe.AckSecond) != (m.T4 != 0) {
			t.Fatalf("ACK %+v, %v from %d", m, err, src)
		}
	}
	checkOK(t, x.run(t, 10, 0, 0))
}

// TestProberLimits: the in-flight bound, bad peers, Close reporting the
// probes in flight, Probe after Close; and the address handle cache
// bounded while probing more labels than it holds.
func TestProberLimits(t *testing.T) {
	release := make(chan struct{})
	x := newPair(t, probe.ProberOptions{MaxInFlight: 4, Timeout: 10 * time.Second},
		probe.ResponderOptions{BeforeACK1: func() { <-release }})
	peer := peerOf(x.r, 0)
	if err := x.p.Probe(probe.Peer{GID: peer.GID}, 1, ""); !errors.Is(err, probe.ErrBadPeer) {
		t.Fatalf("peer without QPN: %v", err)
	}
	if err := x.p.Probe(probe.Peer{QPN: peer.QPN}, 1, ""); !errors.Is(err, probe.ErrBadPeer) {
		t.Fatalf("peer without GID: %v", err)
	}
	for i := 0; i < 4; i++ {
		if err := x.p.Probe(peer, 1, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.p.Probe(peer, 1, ""); !errors.Is(err, probe.ErrTooManyInFlight) {
		t.Fatalf("fifth probe with MaxInFlight 4: %v", err)
	}
	if s := x.p.Stats(); s.InFlight != 4 || s.Sent != 4 {
		t.Fatalf("stats %+v", s)
	}
	x.p.Close()
	close(release)
	rs := x.col.wait(t, time.Second, count(4))
	if len(rs) != 4 {
		t.Fatalf("%d results after Close, want 4", len(rs))
	}
	for _, r := range rs {
		if r.Outcome != probe.OutcomeError || r.Reason != probe.ReasonClosed {
			t.Fatalf("%+v", r)
		}
	}
	if err := x.p.Probe(peer, 1, ""); !errors.Is(err, probe.ErrClosed) {
		t.Fatalf("Probe after Close: %v", err)
	}
	if err := x.p.Close(); !errors.Is(err, probe.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

// TestAHCacheBound: 3000 labels, more than the 1024 address handles a
// prober keeps: the cache stays bounded, handles are evicted (and destroyed
// once their sends completed) and every probe completes.
func TestAHCacheBound(t *testing.T) {
	// At most 256 in flight: the responder's 256 ACK slots answer them all.
	x := newPair(t, probe.ProberOptions{MaxInFlight: 256}, probe.ResponderOptions{})
	labels := probe.FlowLabels(5, 3000)
	peer := peerOf(x.r, 0)
	sent := 0
	for i, l := range labels {
		for {
			err := x.p.Probe(peer, l, "t")
			if err == nil {
				break
			}
			if !errors.Is(err, probe.ErrBusy) && !errors.Is(err, probe.ErrTooManyInFlight) {
				t.Fatalf("probe %d: %v", i, err)
			}
			time.Sleep(100 * time.Microsecond)
		}
		sent++
		if s := x.p.Stats(); s.AHs > 1024 {
			t.Fatalf("%d AHs cached", s.AHs)
		}
	}
	rs := x.col.wait(t, 20*time.Second, count(sent))
	if len(rs) != sent {
		t.Fatalf("%d results of %d", len(rs), sent)
	}
	for _, r := range rs {
		if r.Outcome != probe.OutcomeOK {
			t.Fatalf("%+v; prober %+v, responder %+v", r, x.p.Stats(), x.r.Stats())
		}
	}
	if s := x.p.Stats(); s.AHs != 1024 {
		t.Fatalf("%d AHs cached after 3000 labels", s.AHs)
	}
}

// TestValidity: a fake responder answers with timestamps rpingmesh would
// refuse; each probe ends OutcomeError with the reason.
func TestValidity(t *testing.T) {
	_, ca := softContext(t, addrA)
	_, cc := softContext(t, addrC)
	fake := newRawUD(t, cc)
	col := newCollector()
	p, err := probe.NewProber(ca, probe.ProberOptions{OnResult: col.add})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	peer := probe.Peer{GID: verbs.GIDFromAddr(addrC), QPN: fake.qp.Num()}
	for i, tc := range []struct {
		name   string
		t3, t4 func(now uint64) uint64
		reason string
	}{
		{"good", func(n uint64) uint64 { return n }, func(n uint64) uint64 { return n + 1000 }, ""},
		{"zero T3", func(uint64) uint64 { return 0 }, func(n uint64) uint64 { return n }, probe.ReasonZeroTimestamp},
		{"zero T4", func(n uint64) uint64 { return n }, func(uint64) uint64 { return 0 }, probe.ReasonZeroTimestamp},
		{"T4 before T3", func(n uint64) uint64 { return n }, func(n uint64) uint64 { return n - 1000 }, probe.ReasonInvalidDelay},
		{"responder delay 2 s", func(n uint64) uint64 { return n - 2e9 }, func(n uint64) uint64 { return n }, probe.ReasonInvalidRTT},
		{"responder delay longer than the round trip", func(n uint64) uint64 { return n - 5e8 }, func(n uint64) uint64 { return n }, probe.ReasonInvalidRTT},
	} {
		if err := p.Probe(peer, uint32(i+1), "t"); err != nil {
			t.Fatal(err)
		}
		b, _, ok := fake.recv(5 * time.Second)
		if !ok {
			t.Fatal("no probe")
		}
		m, err := probe.ParseMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		now := uint64(verbs.Now())
		t3, t4 := tc.t3(now), tc.t4(now)
		a1 := probe.Message{Version: 1, Type: probe.TypeAck, AckType: probe.AckFirst, Seq: m.Seq, T1: m.T1, T3: t3}
		a2 := a1
		a2.AckType, a2.T4 = probe.AckSecond, t4
		fake.send(a1.Append(nil), p.GID(), p.QPN())
		fake.send(a2.Append(nil), p.GID(), p.QPN())
		rs := col.wait(t, 5*time.Second, count(i+1))
		if len(rs) != i+1 {
			t.Fatalf("%s: no result", tc.name)
		}
		r := rs[i]
		want := probe.OutcomeError
		if tc.reason == "" {
			want = probe.OutcomeOK
		}
		if r.Outcome != want || r.Reason != tc.reason {
			t.Errorf("%s: outcome %v reason %q, want %v %q (%+v)", tc.name, r.Outcome, r.Reason, want, tc.reason, r)
		}
	}
	if s := p.Stats(); s.Completed != 1 || s.Errors != 5 {
		t.Fatalf("stats %+v", s)
	}
}

// TestNoTimestamps: on devices without completion timestamps (libibverbs'
// providers, rdma_rxe), T2 and T4 are read before the posts and T3 and T5
// at poll: probes complete with a positive network RTT, T2 is T1, and a
// responder stall still lands in the responder's delay.
func TestNoTimestamps(t *testing.T) {
	const stall = 30 * time.Millisecond
	var stalling atomicBool
	x := &pair{col: newCollector()}
	_, ca := softContext(t, addrA)
	_, cb := softContext(t, addrB)
	x.ca, x.cb = noStamps{ca}, noStamps{cb}
	var err error
	if x.r, err = probe.NewResponder(x.cb, probe.ResponderOptions{BeforeACK1: func() {
		if stalling.Load() {
			time.Sleep(stall)
		}
	}}); err != nil {
		t.Fatal(err)
	}
	defer x.r.Close()
	if x.p, err = probe.NewProber(x.ca, probe.ProberOptions{OnResult: x.col.add}); err != nil {
		t.Fatal(err)
	}
	defer x.p.Close()
	rs := x.run(t, 50, 500*time.Microsecond, 0)
	checkOK(t, rs)
	for _, r := range rs {
		if r.T2 != r.T1 {
			t.Fatalf("T2 %d, T1 %d: want T1 without completion timestamps", r.T2, r.T1)
		}
	}
	x.col.reset()
	stalling.Store(true)
	rs = x.run(t, 5, stall+5*time.Millisecond, 0)
	checkOK(t, rs)
	for _, r := range rs {
		if r.ResponderDelay < stall || r.NetworkRTT >= stall/2 {
			t.Errorf("responder delay %v (stall %v), network RTT %v", r.ResponderDelay, stall, r.NetworkRTT)
		}
	}
}
