package analysis

import (
	"fmt"
	"strings"
	"testing"
)

// railFabric: hosts h0..h5, each with two rails, rail0 under ToR r0-<pod>
// and rail1 under r1-<pod> (two pods of three hosts): a rail-optimised
// fabric. railPaths keeps the paths a same-rail pinglist probes.
func railFabric() map[string]string {
	m := map[string]string{}
	for h := 0; h < 6; h++ {
		for r := 0; r < 2; r++ {
			m[fmt.Sprintf("h%d/rail%d", h, r)] = fmt.Sprintf("r%d-p%d", r, h/3)
		}
	}
	return m
}

func railPaths(p []PathStat) []PathStat {
	var out []PathStat
	for _, x := range p {
		rs, rd := x.Src[strings.Index(x.Src, "/"):], x.Dst[strings.Index(x.Dst, "/"):]
		if rs == rd && HostOf(x.Src) != HostOf(x.Dst) {
			out = append(out, x)
		}
	}
	return out
}

func TestDiagnoseRails(t *testing.T) {
	hosts := railFabric()
	cases := []struct {
		name   string
		faults []fault
		want   string
	}{
		{"one rail's link", []fault{{suspect{KindRail, "h1/rail0", DirBoth}, 0.05}}, "loss: rail h1/rail0"},
		{"one rail receives badly", []fault{{suspect{KindRail, "h4/rail1", DirReceive}, 0.08}}, "loss: rail h4/rail1 (receives)"},
		{"the whole host", []fault{{suspect{KindHost, "h2", DirBoth}, 0.05}}, "loss: host h2"},
		{"a rail's ToR, gray", []fault{{suspect{KindGroup, "r1-p0", ""}, 0.015}}, "loss: group r1-p0"},
	}
	for i, c := range cases {
		paths := railPaths(sample(uint64(40+i), hosts, 600, 0.0005, c.faults))
		v := Diagnose(hosts, paths, DiagnoseOptions{MaxLoss: 0.01})
		got := verdicts(v)
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: verdicts %q, want [%q]", c.name, got, c.want)
		}
	}
	// A rail's fault leaves the host's other rail out of the verdict.
	paths := railPaths(sample(7, hosts, 600, 0.0005, []fault{{suspect{KindRail, "h1/rail0", DirBoth}, 0.05}}))
	for _, v := range Diagnose(hosts, paths, DiagnoseOptions{MaxLoss: 0.01}) {
		for _, s := range v.Suspects {
			if s.Name == "h1" || s.Name == "h1/rail1" {
				t.Errorf("a fault on h1/rail0 named %s", s.Label())
			}
		}
	}
}

func TestHostOf(t *testing.T) {
	for in, want := range map[string]string{"h1/rail0": "h1", "h1": "h1", "": "", "a/b/c": "a"} {
		if got := HostOf(in); got != want {
			t.Errorf("HostOf(%q) = %q, want %q", in, got, want)
		}
	}
}
