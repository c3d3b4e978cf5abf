package analysis

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// mesh returns the paths of a full mesh of hosts (name -> group): every
// host probes every other. bad says whether a path is degraded; a host in
// silent reports nothing (its agent is down).
func mesh(hosts map[string]string, bad func(src, dst string) bool, silent ...string) []PathStat {
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
			p := PathStat{Src: s, Dst: d, SrcGroup: hosts[s], DstGroup: hosts[d], Sent: 300, Completed: 300, P50: 10 * time.Microsecond, P99: 20 * time.Microsecond}
			if bad(s, d) {
				p.Completed, p.Lost, p.Loss, p.Degraded = 0, 300, 1, true
			}
			out = append(out, p)
		}
	}
	return out
}

// The test fabric: three ToRs of three hosts.
var fabric = map[string]string{
	"a1": "tor-a", "a2": "tor-a", "a3": "tor-a",
	"b1": "tor-b", "b2": "tor-b", "b3": "tor-b",
	"c1": "tor-c", "c2": "tor-c", "c3": "tor-c",
}

func none(string, string) bool { return false }

func TestLocalize(t *testing.T) {
	for _, c := range []struct {
		name  string
		paths []PathStat
		want  []string
	}{
		{"no fault", mesh(fabric, none), nil},
		{"one bad path", mesh(fabric, func(s, d string) bool { return s == "a1" && d == "b2" }), []string{"link a1->b2"}},
		{"both directions of one pair", mesh(fabric, func(s, d string) bool {
			return s == "a1" && d == "b2" || s == "b2" && d == "a1"
		}), []string{"link a1->b2", "link b2->a1"}},
		{"two independent bad paths", mesh(fabric, func(s, d string) bool {
			return s == "a1" && d == "b2" || s == "c3" && d == "a2"
		}), []string{"link a1->b2", "link c3->a2"}},
		{"dead host, its agent silent", mesh(fabric, func(s, d string) bool { return d == "b2" }, "b2"), []string{"host b2"}},
		{"dead host, its agent reporting loss", mesh(fabric, func(s, d string) bool { return s == "b2" || d == "b2" }), []string{"host b2"}},
		{"ToR black hole", mesh(fabric, func(s, d string) bool {
			return (fabric[s] == "tor-a") != (fabric[d] == "tor-a")
		}), []string{"group tor-a"}},
		{"dead ToR, hosts unreachable even inside", mesh(fabric, func(s, d string) bool {
			return fabric[s] == "tor-a" || fabric[d] == "tor-a"
		}), []string{"group tor-a"}},
		{"dead host and a bad link elsewhere", mesh(fabric, func(s, d string) bool {
			return d == "c1" || s == "a2" && d == "b3"
		}, "c1"), []string{"host c1", "link a2->b3"}},
		{"one lossy path seen by one prober only", mesh(map[string]string{"x": "g1", "y": "g2"}, func(s, d string) bool { return s == "x" }), []string{"link x->y"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Localize(c.paths)
			var names []string
			for _, g := range got {
				names = append(names, g.String())
			}
			if !slices.Equal(names, c.want) {
				t.Errorf("Localize = %v, want %v", names, c.want)
			}
			// Every degraded path is explained.
			for _, p := range c.paths {
				if !p.Degraded {
					continue
				}
				explained := false
				for _, g := range got {
					switch g.Kind {
					case KindLink:
						explained = explained || g.Name == LinkName(p.Src, p.Dst)
					case KindHost:
						explained = explained || g.Name == p.Src || g.Name == p.Dst
					case KindGroup:
						explained = explained || g.Name == p.SrcGroup || g.Name == p.DstGroup
					}
				}
				if !explained {
					t.Errorf("degraded path %s->%s not explained by %v", p.Src, p.Dst, names)
				}
			}
		})
	}
}

func TestLocalizeIgnoresUnjudged(t *testing.T) {
	paths := mesh(fabric, func(s, d string) bool { return d == "b2" }, "b2")
	// The healthy paths from a1 are too young to judge; b2 is still the
	// host, a1 does not become one.
	for i := range paths {
		if paths[i].Src == "a1" && !paths[i].Degraded {
			paths[i].Insufficient = true
		}
	}
	got := Localize(paths)
	if len(got) != 1 || got[0].String() != "host b2" || got[0].Paths != 8 {
		t.Errorf("Localize = %+v", got)
	}
}

func TestReportRoundTrip(t *testing.T) {
	paths := mesh(fabric, func(s, d string) bool { return d == "b2" })
	var mine []PathStat
	for _, p := range paths {
		if p.Src == "a1" {
			p.LossyLabels = []uint32{3, 9}
			p.Labels = 115
			mine = append(mine, p)
		}
	}
	b, err := json.Marshal(Report{Source: "a1", Group: "tor-a", Paths: mine})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"p99_ns":20000`) || !strings.Contains(string(b), `"lossy_labels":[3,9]`) {
		t.Errorf("JSON %s", b)
	}
	r, err := DecodeReport(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Source != "a1" || r.Group != "tor-a" || len(r.Paths) != len(mine) {
		t.Fatalf("decoded %+v", r)
	}
	for i := range mine {
		if fmt.Sprint(r.Paths[i]) != fmt.Sprint(mine[i]) {
			t.Errorf("path %d: %+v, want %+v", i, r.Paths[i], mine[i])
		}
	}
}

func TestDecodeReportErrors(t *testing.T) {
	for _, c := range []struct{ name, json, want string }{
		{"not json", `{"source":`, "bad report"},
		{"foreign path", `{"source":"a1","paths":[{"src":"b1","dst":"c1"}]}`, `a path from "b1"`},
		{"no destination", `{"source":"a1","paths":[{"src":"a1"}]}`, "no destination"},
		{"wrong type", `{"source":"a1","paths":[{"src":"a1","dst":"b","sent":-1}]}`, "bad report"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeReport([]byte(c.json))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}

// TestFleetMerge: each agent reports its own paths; merged, they localise
// a dead host that no single agent could name (each sees one bad path).
func TestFleetMerge(t *testing.T) {
	all := mesh(fabric, func(s, d string) bool { return d == "c2" }, "c2")
	bySrc := map[string][]PathStat{}
	for _, p := range all {
		bySrc[p.Src] = append(bySrc[p.Src], p)
	}
	var reports [][]PathStat
	for src, ps := range bySrc {
		b, err := json.Marshal(Report{Source: src, Paths: ps})
		if err != nil {
			t.Fatal(err)
		}
		r, err := DecodeReport(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := Localize(r.Paths); len(got) != 1 || got[0].Kind != KindLink {
			t.Errorf("agent %s alone names %v, want its one link", src, got)
		}
		reports = append(reports, r.Paths)
	}
	// The same report twice, and an older one with fewer probes, merge to
	// one path each.
	stale := slices.Clone(bySrc["a1"])
	for i := range stale {
		stale[i].Sent, stale[i].Degraded = 1, false
	}
	reports = append(reports, bySrc["a1"], stale)
	merged := Merge(reports...)
	if len(merged) != len(all) {
		t.Fatalf("merged %d paths, want %d", len(merged), len(all))
	}
	got := Localize(merged)
	if len(got) != 1 || got[0].String() != "host c2" {
		t.Errorf("fleet-wide Localize = %v, want host c2", got)
	}
}

// BenchmarkLocalize1k: a fleet of 1000 hosts (25 groups of 40), each
// probing its 39 neighbours and 16 hosts elsewhere, with one dead host.
func BenchmarkLocalize1k(b *testing.B) {
	var paths []PathStat
	host := func(g, h int) string { return fmt.Sprintf("g%02d-h%02d", g, h) }
	for g := 0; g < 25; g++ {
		for h := 0; h < 40; h++ {
			src := host(g, h)
			if src == "g03-h07" {
				continue // dead: reports nothing
			}
			var dsts []string
			for k := 0; k < 40; k++ {
				if k != h {
					dsts = append(dsts, host(g, k))
				}
			}
			for k := 0; k < 16; k++ {
				dsts = append(dsts, host((g+1+k)%25, (h+k)%40))
			}
			for _, d := range dsts {
				p := PathStat{Src: src, Dst: d, SrcGroup: src[:3], DstGroup: d[:3], Sent: 300, Completed: 300}
				if d == "g03-h07" {
					p.Completed, p.Lost, p.Loss, p.Degraded = 0, 300, 1, true
				}
				paths = append(paths, p)
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		got := Localize(paths)
		if len(got) != 1 || got[0].String() != "host g03-h07" {
			b.Fatalf("Localize = %v", got)
		}
	}
	b.ReportMetric(float64(len(paths)), "paths")
}
