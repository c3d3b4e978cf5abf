//go:build linux

package agent_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/probe/analysis"
	pl "github.com/goroce/goroce/probe/pinglist"
)

// separatingList is a pinglist of three groups (g0: h0; g1: h1..h3; g2:
// h4) where every inter_tor probe touches g1: h0 and h4 sample one target
// each, in g1 (a seed is searched for that), so that g0 and g2 never probe
// each other. A loss on g1's uplink is then, to the pinglist's probes, as
// well the spine's: "ambiguous between spine, uplink g1", until h0 and h4
// probe each other.
func separatingList(t *testing.T, f *netns.Fabric) string {
	for seed := 0; seed < 1000; seed++ {
		var b strings.Builder
		fmt.Fprintf(&b, "settings:\n  timeout: 2s\n  labels: 16\n  http_port: 9478\n  window: 10s\n  sla: {max_loss: 0.01, max_p99_rtt: 1s, min_probes: 20}\n")
		fmt.Fprintf(&b, "classes:\n  tor_mesh: {rate: 20}\n  inter_tor: {rate: 20, sample: 1, seed: %d}\nnodes:\n", seed)
		for i, a := range f.Addrs {
			fmt.Fprintf(&b, "  - {name: h%d, addr: %s, group: g%d}\n", i, a, f.Group[i])
		}
		l, err := pl.Parse([]byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		for _, h := range []int{0, 4} {
			n, _ := l.Self(f.Addrs[h])
			for _, x := range l.Targets(n) {
				ok = ok && x.Node.Group == "g1"
			}
		}
		if ok {
			return b.String()
		}
	}
	t.Fatal("no seed gives h0 and h4 targets in g1 only")
	return ""
}

// TestSeparatingProbes: the fleet first says "ambiguous between spine,
// uplink g1" for a loss on g1's uplink, names h0->h4 and h4->h0 as the
// probes that would tell them apart, the agents of h0 and h4 probe each
// other (class separate), and the verdict settles on uplink g1 alone.
func TestSeparatingProbes(t *testing.T) {
	netns.Require(t)
	netns.RequireTool(t, "nft")
	if testing.Short() {
		t.Skip("builds goroce and runs five agents")
	}
	bin := buildGoroce(t)
	f := netns.NewFabric(t, netns.FabricOptions{Groups: []int{1, 3, 1}})
	ff := &fabricFleet{f: f, dir: t.TempDir(), bin: bin, client: nsClient(f.Spine), window: 10 * time.Second}
	for i := range f.Hosts {
		ff.names = append(ff.names, fmt.Sprintf("h%d", i))
	}
	ff.cfg = filepath.Join(ff.dir, "pinglist.yaml")
	if err := os.WriteFile(ff.cfg, []byte(separatingList(t, f)), 0o644); err != nil {
		t.Fatal(err)
	}
	ff.procs = make([]*exec.Cmd, len(ff.names))
	for i := range ff.names {
		ff.start(t, i)
	}
	waitFor(t, 60*time.Second, "every agent to complete probes", func() bool {
		for i := range ff.names {
			if !strings.Contains(string(ff.metrics(i)), "goroce_probe_completed_total{") {
				return false
			}
		}
		return true
	})
	time.Sleep(5 * time.Second)
	if vs, _ := ff.verdicts(nil); len(vs) > 0 {
		t.Fatalf("verdicts before any fault: %v", vs)
	}
	undo := fault(t, ff, f.ToRs[1], "uplink", `oifname "uplink" udp dport 4791 numgen random mod 100 < 5 counter drop`)
	defer undo()
	start := time.Now()
	var ambiguous, settled time.Duration
	var sep []string
	for time.Since(start) < 60*time.Second && settled == 0 {
		for _, r := range ff.fleetHistory(t) {
			switch {
			case r.Ambiguous && ambiguous == 0 && has(r.Suspects, "uplink g1") && has(r.Suspects, "spine"):
				ambiguous, sep = time.Since(start), r.Separate
			case !r.Ambiguous && r.Active() && ambiguous > 0 && r.String() == "loss: uplink g1":
				settled = time.Since(start)
			}
		}
		time.Sleep(time.Second)
	}
	if ambiguous == 0 {
		t.Fatalf("no ambiguous verdict between spine and uplink g1 within 60 s: %v", ff.fleetHistory(t))
	}
	t.Logf("ambiguous after %v, separating probes %v; settled after %v", ambiguous.Round(time.Second), sep, settled.Round(time.Second))
	if strings.Join(sep, " ") != "h0->h4 h4->h0" {
		t.Errorf("separating probes %v, want h0->h4 and h4->h0", sep)
	}
	if settled == 0 {
		t.Fatalf("not settled on uplink g1 within 60 s: %v", ff.fleetHistory(t))
	}
	for _, c := range []struct{ src, dst int }{{0, 4}, {4, 0}} {
		m := string(ff.metrics(c.src))
		if !strings.Contains(m, fmt.Sprintf(`goroce_probe_completed_total{class="separate",target="h%d"`, c.dst)) {
			t.Errorf("h%d did not probe h%d as separate", c.src, c.dst)
		}
	}
	// What the exporter exports now: the uplink alone.
	waitFor(t, 15*time.Second, "the exported verdict to be uplink g1 alone", func() bool {
		vs, _ := ff.verdicts(nil)
		return len(vs) == 1 && vs[0] == "loss: uplink g1"
	})
}

func has(s []analysis.Suspect, label string) bool {
	for _, x := range s {
		if x.Label() == label {
			return true
		}
	}
	return false
}

// fleetHistory is the verdict history of h0's fleet view.
func (ff *fabricFleet) fleetHistory(t *testing.T) []analysis.Record {
	var doc struct {
		History []analysis.Record `json:"history"`
	}
	if err := json.Unmarshal(ff.get(t, fmt.Sprintf("http://%s:9478/probe/v1/fleet", ff.f.Addrs[0])), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.History
}
