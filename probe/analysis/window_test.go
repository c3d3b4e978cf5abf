package analysis

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/probe"
)

var t0 = time.Unix(1_700_000_000, 0)

func peer(name, group string) probe.Peer {
	return probe.Peer{Name: name, Group: group, Addr: netip.MustParseAddr("10.0.0.1")}
}

func ok(p probe.Peer, at time.Time, rtt time.Duration, label uint32) probe.Result {
	return probe.Result{Peer: p, Class: "tor_mesh", Sent: at, Outcome: probe.OutcomeOK, NetworkRTT: rtt, FlowLabel: label}
}

func lost(p probe.Peer, at time.Time, label uint32) probe.Result {
	return probe.Result{Peer: p, Class: "tor_mesh", Sent: at, Outcome: probe.OutcomeLost, FlowLabel: label}
}

func TestWindowJudges(t *testing.T) {
	const us = time.Microsecond
	for _, c := range []struct {
		name                 string
		n, lostEvery         int // n probes at 10/s, every lostEvery-th lost (0: none)
		rtt                  time.Duration
		wantDegraded, wantIn bool
		wantLoss             float64
	}{
		{"healthy", 200, 0, 20 * us, false, false, 0},
		{"lossy", 200, 10, 20 * us, true, false, 0.1},
		{"loss at threshold", 200, 100, 20 * us, false, false, 0.01},
		{"slow", 200, 0, 8 * time.Millisecond, true, false, 0},
		{"too few", 10, 2, 20 * us, false, true, 0.5},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := NewWindow(Options{Source: "a", SourceGroup: "ga", Window: 30 * time.Second})
			p := peer("b", "gb")
			for i := 0; i < c.n; i++ {
				at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
				if c.lostEvery > 0 && i%c.lostEvery == c.lostEvery-1 {
					w.Add(lost(p, at, uint32(i%8)+1))
				} else {
					w.Add(ok(p, at, c.rtt, uint32(i%8)+1))
				}
			}
			st := w.Stats(t0.Add(time.Duration(c.n) * 100 * time.Millisecond))
			if len(st) != 1 {
				t.Fatalf("%d paths", len(st))
			}
			s := st[0]
			if s.Src != "a" || s.SrcGroup != "ga" || s.Dst != "b" || s.DstGroup != "gb" || s.Class != "tor_mesh" {
				t.Errorf("path %+v", s)
			}
			if s.Sent != uint64(c.n) || s.Completed+s.Lost != s.Sent {
				t.Errorf("sent %d completed %d lost %d", s.Sent, s.Completed, s.Lost)
			}
			if math.Abs(s.Loss-c.wantLoss) > 1e-9 || s.Degraded != c.wantDegraded || s.Insufficient != c.wantIn {
				t.Errorf("loss %v degraded %v insufficient %v; want %v %v %v", s.Loss, s.Degraded, s.Insufficient, c.wantLoss, c.wantDegraded, c.wantIn)
			}
			if s.Healthy() != (!c.wantDegraded && !c.wantIn) {
				t.Errorf("Healthy = %v", s.Healthy())
			}
			if lo, hi := c.rtt, c.rtt*110/100; s.P99 < lo || s.P99 > hi {
				t.Errorf("p99 %v, want in [%v, %v]", s.P99, lo, hi)
			}
		})
	}
}

func TestWindowQuantiles(t *testing.T) {
	w := NewWindow(Options{Source: "a"})
	p := peer("b", "")
	rng := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	for i := 0; i < 3000; i++ {
		// Log-uniform between 5 µs and 5 ms.
		d := time.Duration(5e3 * math.Pow(1000, rng.Float64()))
		all = append(all, d)
		w.Add(ok(p, t0.Add(time.Duration(i)*5*time.Millisecond), d, 1))
	}
	slices.Sort(all)
	s := w.Stats(t0.Add(15 * time.Second))[0]
	for _, q := range []struct {
		got time.Duration
		p   float64
	}{{s.P50, 0.50}, {s.P99, 0.99}} {
		exact := all[int(math.Ceil(q.p*float64(len(all))))-1]
		if r := float64(q.got) / float64(exact); r < 1 || r > 1.1 {
			t.Errorf("p%v = %v, exact %v (ratio %.3f, want within [1, 1.1])", q.p*100, q.got, exact, r)
		}
	}
	if s.Labels != 1 {
		t.Errorf("Labels = %d", s.Labels)
	}
}

func TestWindowSlides(t *testing.T) {
	w := NewWindow(Options{Source: "a", Window: 10 * time.Second, Buckets: 10, MinProbes: 1})
	p := peer("b", "")
	// 10 s of losses, then 10 s of good probes.
	for i := 0; i < 100; i++ {
		w.Add(lost(p, t0.Add(time.Duration(i)*100*time.Millisecond), 1))
	}
	for i := 100; i < 200; i++ {
		w.Add(ok(p, t0.Add(time.Duration(i)*100*time.Millisecond), 10*time.Microsecond, 1))
	}
	s := w.Stats(t0.Add(20*time.Second - time.Millisecond))[0]
	if s.Lost != 0 || s.Completed != 100 || s.Degraded {
		t.Errorf("after the window slid past the losses: %+v", s)
	}
	// A result older than the window is ignored.
	w.Add(lost(p, t0, 1))
	if s := w.Stats(t0.Add(20*time.Second - time.Millisecond))[0]; s.Lost != 0 {
		t.Errorf("an old result was counted: %+v", s)
	}
	// Long after, the path is forgotten.
	if st := w.Stats(t0.Add(time.Minute)); len(st) != 0 {
		t.Errorf("paths after a minute of silence: %+v", st)
	}
}

// TestWindowLossyLabels: a path with 16 ECMP members, one of which drops
// everything, shows loss on the labels that hash to it only.
func TestWindowLossyLabels(t *testing.T) {
	w := NewWindow(Options{Source: "a", MinProbes: 1})
	p := peer("b", "")
	const labels, members, bad = 115, 16, 5
	member := func(l uint32) int { return int((l * 2654435761) >> 7 % members) }
	var wantLossy []uint32
	for l := uint32(1); l <= labels; l++ {
		if member(l) == bad {
			wantLossy = append(wantLossy, l)
		}
	}
	for i := 0; i < 300; i++ {
		l := uint32(i%labels) + 1
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		if member(l) == bad {
			w.Add(lost(p, at, l))
		} else {
			w.Add(ok(p, at, 10*time.Microsecond, l))
		}
	}
	s := w.Stats(t0.Add(30 * time.Second))[0]
	if !slices.Equal(s.LossyLabels, wantLossy) {
		t.Errorf("lossy labels %v, want %v", s.LossyLabels, wantLossy)
	}
	if s.Labels != labels || !s.Degraded {
		t.Errorf("labels %d degraded %v", s.Labels, s.Degraded)
	}
	t.Logf("%d of %d labels lossy, path loss %.3f", len(s.LossyLabels), s.Labels, s.Loss)
}

func TestWindowOutcomesAndBounds(t *testing.T) {
	now := t0
	w := NewWindow(Options{Source: "a", MaxPaths: 2, Now: func() time.Time { return now }})
	w.Add(probe.Result{Peer: peer("b", ""), Outcome: probe.OutcomeLate, Sent: t0})
	w.Add(probe.Result{Peer: peer("b", ""), Outcome: probe.OutcomeError, Reason: "post"}) // no Sent: the clock
	w.Add(probe.Result{Peer: probe.Peer{Addr: netip.MustParseAddr("10.1.1.1")}, Outcome: probe.OutcomeLost, Sent: t0})
	w.Add(ok(peer("c", ""), t0, time.Microsecond, 1)) // a third path: dropped
	st := w.Stats(t0.Add(time.Second))
	if len(st) != 2 || w.Dropped() != 1 {
		t.Fatalf("paths %+v dropped %d", st, w.Dropped())
	}
	if st[0].Dst != "10.1.1.1" || st[0].Lost != 1 {
		t.Errorf("unnamed peer: %+v", st[0])
	}
	if b := st[1]; b.Dst != "b" || b.Late != 1 || b.Errors != 1 || b.Sent != 0 || !b.Insufficient {
		t.Errorf("late and error: %+v", b)
	}
}

func TestWindowAddAllocs(t *testing.T) {
	w := NewWindow(Options{Source: "a"})
	r := ok(peer("b", "g"), t0, 10*time.Microsecond, 7)
	w.Add(r)
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		i++
		r.Sent = t0.Add(time.Duration(i) * time.Millisecond)
		w.Add(r)
	}); n != 0 {
		t.Errorf("Add allocates %v times on a known path and label", n)
	}
}

// TestWindowMemory measures the memory of a window with 1000 paths of 115
// labels each.
func TestWindowMemory(t *testing.T) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	w := NewWindow(Options{Source: "a"})
	names := make([]string, 1000)
	for i := range names {
		names[i] = "host-" + string(rune('a'+i%26)) + time.Duration(i).String()
	}
	for k := 0; k < 115; k++ {
		for i, n := range names {
			w.Add(ok(peer(n, "g"), t0.Add(time.Duration(k*1000+i)*10*time.Microsecond), 10*time.Microsecond, uint32(k+1)))
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	per := (int64(m1.HeapAlloc) - int64(m0.HeapAlloc)) / 1000
	t.Logf("%d bytes per path with 115 labels", per)
	if per > 64<<10 {
		t.Errorf("%d bytes per path", per)
	}
	runtime.KeepAlive(w)
}

func BenchmarkWindowAdd(b *testing.B) {
	w := NewWindow(Options{Source: "a"})
	ps := make([]probe.Peer, 64)
	for i := range ps {
		ps[i] = peer(string(rune('A'+i)), "g")
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w.Add(ok(ps[i%64], t0.Add(time.Duration(i)*time.Millisecond), 10*time.Microsecond, uint32(i%115)))
		i++
	}
}

// The host delays of the completed probes: their mean and largest, per
// path, beside the network RTT.
func TestWindowDelays(t *testing.T) {
	w := NewWindow(Options{Source: "a", MinProbes: 1})
	p := peer("b", "")
	for i := 0; i < 10; i++ {
		r := ok(p, t0.Add(time.Duration(i)*100*time.Millisecond), 10*time.Microsecond, 1)
		r.ProberDelay = time.Duration(i+1) * time.Microsecond
		r.ResponderDelay = 2 * time.Duration(i+1) * time.Microsecond
		w.Add(r)
	}
	w.Add(lost(p, t0.Add(time.Second), 1))
	s := w.Stats(t0.Add(2 * time.Second))[0]
	if s.ProberDelay != 5500*time.Nanosecond || s.ProberDelayMax != 10*time.Microsecond ||
		s.ResponderDelay != 11*time.Microsecond || s.ResponderDelayMax != 20*time.Microsecond {
		t.Errorf("delays: prober %v (max %v), responder %v (max %v)", s.ProberDelay, s.ProberDelayMax, s.ResponderDelay, s.ResponderDelayMax)
	}
}
