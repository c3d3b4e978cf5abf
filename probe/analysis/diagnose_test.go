package analysis

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// fault is a loss ratio on the paths a suspect lies on.
type fault struct {
	s    suspect
	loss float64
}

// sample returns the paths of a full mesh of hosts, n probes each, every
// probe lost with the probability the faults on its path give (and base
// besides), drawn from a seeded generator; hosts in silent report nothing.
func sample(seed uint64, hosts map[string]string, n int, base float64, faults []fault, silent ...string) []PathStat {
	r := rand.New(rand.NewPCG(seed, 1))
	var names []string
	for h := range hosts {
		names = append(names, h)
	}
	slices.Sort(names)
	var out []PathStat
	for _, s := range names {
		if slices.Contains(silent, s) {
			continue
		}
		for _, d := range names {
			if s == d {
				continue
			}
			p := PathStat{Src: s, Dst: d, SrcGroup: hosts[s], DstGroup: hosts[d], Sent: uint64(n)}
			keep := 1 - base
			for _, f := range faults {
				if f.s.covers(&p) {
					keep *= 1 - f.loss
				}
			}
			for i := 0; i < n; i++ {
				if r.Float64() > keep {
					p.Lost++
				}
			}
			p.Completed = p.Sent - p.Lost
			p.Loss = float64(p.Lost) / float64(p.Sent)
			out = append(out, p)
		}
	}
	return out
}

// Two groups of four: every path between them crosses both uplinks and
// the spine.
var fabric2 = map[string]string{
	"a1": "tor-a", "a2": "tor-a", "a3": "tor-a", "a4": "tor-a",
	"b1": "tor-b", "b2": "tor-b", "b3": "tor-b", "b4": "tor-b",
}

func verdicts(v []Verdict) []string {
	var out []string
	for _, x := range v {
		out = append(out, x.String())
	}
	return out
}

// The fault matrix in numbers: each fault is named, or an ambiguity set
// that holds it and says so, and nothing else is, over seeds.
func TestDiagnose(t *testing.T) {
	link := func(n string) suspect { return suspect{KindLink, n, ""} }
	host := func(n, dir string) suspect { return suspect{KindHost, n, dir} }
	uplink := func(n string) suspect { return suspect{KindUplink, n, ""} }
	group := func(n string) suspect { return suspect{KindGroup, n, ""} }
	for _, c := range []struct {
		name   string
		hosts  map[string]string
		faults []fault
		silent []string
		want   []string
	}{
		{"healthy", fabric, nil, nil, nil},
		{"link loss 5%", fabric, []fault{{link("a1->b2"), 0.05}}, nil, []string{"loss: link a1->b2"}},
		{"dead host", fabric, []fault{{host("b1", DirBoth), 1}}, []string{"b1"}, []string{"loss: host b1"}},
		{"stalled host", fabric, []fault{{host("b1", DirBoth), 0.2}}, nil, []string{"loss: host b1"}},
		{"host receive-only loss", fabric, []fault{{host("c2", DirReceive), 0.1}}, nil, []string{"loss: host c2 (receives)"}},
		{"host send-only loss", fabric, []fault{{host("c2", DirSend), 0.1}}, nil, []string{"loss: host c2 (sends)"}},
		{"uplink loss 2%", fabric, []fault{{uplink("tor-b"), 0.02}}, nil, []string{"loss: uplink tor-b"}},
		{"gray loss in a ToR, 1.5%", fabric, []fault{{group("tor-b"), 0.015}}, nil, []string{"loss: group tor-b"}},
		{"link loss both ways", fabric, []fault{{link("a1<->b2"), 0.05}}, nil, []string{"loss: link a1<->b2"}},
		{"two at once", fabric, []fault{{link("a1->c3"), 0.05}, {host("b2", DirBoth), 1}}, nil, []string{"loss: host b2", "loss: link a1->c3"}},
		{"uplink loss, two groups", fabric2, []fault{{uplink("tor-b"), 0.02}}, nil,
			[]string{"loss: ambiguous between spine, uplink tor-a, uplink tor-b"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 20; seed++ {
				paths := sample(seed, c.hosts, 300, 0.0002, c.faults, c.silent...)
				v := Diagnose(c.hosts, paths, DiagnoseOptions{})
				got := verdicts(v)
				slices.Sort(got)
				if !slices.Equal(got, c.want) {
					t.Fatalf("seed %d: %q, want %q", seed, got, c.want)
				}
				for _, x := range v {
					if x.Ambiguous && len(x.Separate) == 0 && x.Note == "" {
						t.Errorf("ambiguous verdict with neither separating probes nor a note: %+v", x)
					}
					if x.Confidence < DefaultConfidence {
						t.Errorf("confidence %v", x.Confidence)
					}
				}
			}
		})
	}
}

// An ambiguity the probes could settle names the pairs to probe: with
// only a1->b1 probed across, uplink tor-a and host pairs cannot be told.
func TestDiagnoseSeparate(t *testing.T) {
	paths := sample(1, fabric, 300, 0, []fault{{suspect{KindUplink, "tor-b", ""}, 0.05}})
	var some []PathStat
	for _, p := range paths {
		if (p.Src == "a1" && p.Dst == "b1") || (p.Src == "b1" && p.Dst == "a1") || p.SrcGroup == p.DstGroup {
			some = append(some, p)
		}
	}
	v := Diagnose(fabric, some, DiagnoseOptions{})
	if len(v) != 1 || !v[0].Ambiguous || len(v[0].Separate) == 0 {
		t.Fatalf("%+v", v)
	}
	t.Logf("%s; probe %s", v[0], strings.Join(v[0].Separate, " "))
}

func TestBinomialTail(t *testing.T) {
	for _, c := range []struct {
		n, k uint64
		p    float64
		want float64
	}{
		{10, 0, 0.5, 1},
		{10, 10, 0.5, 1.0 / 1024},
		{10, 5, 0.5, 638.0 / 1024},
		{600, 9, 0.01, 0.1528},
		{12600, 189, 0.01, 1.1e-7},
		{100, 101, 0.5, 0},
	} {
		got := binomialTail(c.n, c.k, c.p)
		if math.Abs(got-c.want) > 0.01*c.want+1e-9 && math.Abs(got-c.want) > 0.002 {
			t.Errorf("P(X>=%d | %d, %v) = %v, want %v", c.k, c.n, c.p, got, c.want)
		}
	}
}

// A verdict keeps its start while given, ends when no longer given, and
// stays in the history; the history is bounded.
func TestVerdictHistory(t *testing.T) {
	h := NewVerdictHistory(3)
	t0 := time.Unix(1000, 0)
	v := func(name string, conf float64) Verdict {
		return Verdict{Symptom: SymptomLoss, Suspects: []Suspect{{Kind: KindHost, Name: name}}, Confidence: conf}
	}
	h.Update(t0, []Verdict{v("a", 0.99)})
	h.Update(t0.Add(2*time.Second), []Verdict{v("a", 0.999), v("b", 0.99)})
	h.Update(t0.Add(4*time.Second), []Verdict{v("b", 0.99)})
	rs := h.Records()
	if len(rs) != 2 || rs[1].Suspects[0].Name != "a" || rs[1].Active() || !rs[1].End.Equal(t0.Add(4*time.Second)) || rs[1].Peak != 0.999 ||
		!rs[0].Active() || !rs[0].Start.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("%+v", rs)
	}
	for i := 0; i < 5; i++ {
		h.Update(t0.Add(time.Duration(6+i)*time.Second), []Verdict{v("b", 0.99), v(string(rune('c'+i)), 0.99)})
	}
	if rs := h.Records(); len(rs) != 3 || len(h.Active()) != 2 {
		t.Fatalf("bounded history: %d records, %d active", len(rs), len(h.Active()))
	}
}

// Gray loss in a ToR of two hosts, 1.5 % of the probes of every path with
// an end under it: its two inner paths are little evidence against its
// uplink alone, and the verdict names the group, or says it cannot tell
// the group from its uplink, but never names the uplink alone.
func TestDiagnoseGraySmallGroup(t *testing.T) {
	hosts := map[string]string{"h0": "g0", "h1": "g0", "h2": "g0", "h3": "g1", "h4": "g1", "h5": "g1", "h6": "g2", "h7": "g2"}
	named := map[string]int{}
	for seed := uint64(1); seed <= 40; seed++ {
		paths := sample(seed, hosts, 400, 0.0001, []fault{{suspect{KindGroup, "g2", ""}, 0.015}})
		v := Diagnose(hosts, paths, DiagnoseOptions{})
		if len(v) != 1 {
			t.Fatalf("seed %d: %q", seed, verdicts(v))
		}
		named[v[0].String()]++
		if !names(v[0].String(), "group g2") {
			t.Errorf("seed %d: %s", seed, v[0])
		}
	}
	t.Logf("verdicts over 40 seeds: %v", named)
}

// names reports whether a verdict (its String) names component c.
func names(v, c string) bool {
	_, list, _ := strings.Cut(v, ": ")
	list = strings.TrimPrefix(list, "ambiguous between ")
	for _, s := range strings.Split(list, ", ") {
		if s == c || strings.HasPrefix(s, c+" (") {
			return true
		}
	}
	return false
}
