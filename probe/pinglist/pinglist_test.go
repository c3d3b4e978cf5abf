package pinglist

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseExample(t *testing.T) {
	l, err := Load(filepath.Join("..", "..", "deploy", "pinglist.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := l.Settings
	want := Settings{
		Timeout: time.Second, Paths: 16, Probability: 0.99, Labels: 115, HTTPPort: 9478,
		Window: 30 * time.Second, MaxLoss: 0.01, MaxP99RTT: 5 * time.Millisecond, MinProbes: 20,
		MaxPairs: 256, ResponderQPs: 1, RailPairs: RailPairsSame,
	}
	if s != want {
		t.Errorf("settings\n got %+v\nwant %+v", s, want)
	}
	// The example states every default: an empty file must give the same.
	empty, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if empty.Settings != want {
		t.Errorf("defaults\n got %+v\nwant %+v", empty.Settings, want)
	}
	for name, c := range l.Classes {
		if c != empty.Classes[name] {
			t.Errorf("class %s: example %+v, defaults %+v", name, c, empty.Classes[name])
		}
	}
	if len(l.Nodes) != 4 || len(l.Static) != 1 {
		t.Fatalf("%d nodes, %d static", len(l.Nodes), len(l.Static))
	}
	self, ok := l.Self(netip.MustParseAddr("10.0.1.1"))
	if !ok || self.Name != "host-a1" || self.Group != "tor-a" {
		t.Fatalf("Self = %+v, %v", self, ok)
	}
	if _, ok := l.Self(netip.MustParseAddr("::ffff:10.0.2.2")); !ok {
		t.Error("Self does not find a node by its IPv4-mapped address")
	}
	if _, ok := l.Self(netip.MustParseAddr("10.0.9.9")); ok {
		t.Error("Self found an address not in the list")
	}
	got := l.Targets(self)
	var desc []string
	for _, x := range got {
		desc = append(desc, fmt.Sprintf("%s/%s/%g", x.Node.Name, x.Class, x.Rate))
	}
	wantT := []string{"host-a2/tor_mesh/10", "host-b1/inter_tor/10", "host-b2/inter_tor/10", "storage-1/static/2"}
	if !slices.Equal(desc, wantT) {
		t.Errorf("Targets(host-a1) = %v, want %v", desc, wantT)
	}
	if g := l.Groups(); !slices.Equal(g, []string{"tor-a", "tor-b"}) {
		t.Errorf("Groups = %v", g)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"duplicate name", "nodes: [{name: a, addr: 10.0.0.1}, {name: a, addr: 10.0.0.2}]", `node "a": duplicate name`},
		{"duplicate addr", "nodes: [{name: a, addr: 10.0.0.1}, {name: b, addr: 10.0.0.1}]", `node "b": duplicate address 10.0.0.1 (also node "a")`},
		{"duplicate mapped addr", "nodes: [{name: a, addr: 10.0.0.1}, {name: b, addr: '::ffff:10.0.0.1'}]", `duplicate address`},
		{"static duplicates node", "nodes: [{name: a, addr: 10.0.0.1}]\nstatic: [{addr: 10.0.0.1}]", `static target "10.0.0.1": duplicate address`},
		{"static duplicate name", "nodes: [{name: a, addr: 10.0.0.1}]\nstatic: [{addr: 10.0.0.2, name: a}]", `static target "a": duplicate name`},
		{"unknown class", "classes: {tor_mash: {rate: 1}}", `unknown class "tor_mash"`},
		{"unknown field", "settings: {timeuot: 1s}", `field timeuot not found`},
		{"bad addr", "nodes: [{name: a, addr: 10.0.0.300}]", `node "a": bad addr "10.0.0.300"`},
		{"no addr", "nodes: [{name: a}]", `node "a": no addr`},
		{"no name", "nodes: [{addr: 10.0.0.1}]", `nodes[0]: no name`},
		{"multicast addr", "nodes: [{name: a, addr: 224.0.0.1}]", `not a unicast address`},
		{"zero rate", "classes: {tor_mesh: {rate: 0}}", `classes.tor_mesh.rate 0 is not a positive rate`},
		{"negative rate", "classes: {inter_tor: {rate: -1}}", `classes.inter_tor.rate -1`},
		{"infinite rate", "classes: {static: {rate: .inf}}", `classes.static.rate +Inf`},
		{"static rate", "static: [{addr: 10.0.0.1, rate: 0}]", `static target "10.0.0.1": rate 0`},
		{"sample on tor_mesh", "classes: {tor_mesh: {sample: 3}}", `only inter_tor takes a sample`},
		{"negative sample", "classes: {inter_tor: {sample: -3}}", `sample -3 is negative`},
		{"dscp", "classes: {tor_mesh: {dscp: 64}}", `classes.tor_mesh.dscp 64 is not a DSCP`},
		{"negative dscp", "classes: {static: {dscp: -1}}", `classes.static.dscp -1`},
		{"probability", "settings: {probability: 1}", `settings.probability 1 is not in (0, 1)`},
		{"paths", "settings: {paths: -2}", `settings.paths -2`},
		{"port", "settings: {http_port: 70000}", `settings.http_port 70000`},
		{"window", "settings: {window: 10ms}", `settings.window 10ms is shorter than 1s`},
		{"bad duration", "settings: {timeout: soon}", `soon`},
		{"max loss", "settings: {sla: {max_loss: 2}}", `settings.sla.max_loss 2`},
		{"labels", "settings: {labels: 5000}", `settings.labels 5000`},
		{"not yaml", "nodes: [", `yaml`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			if err == nil {
				t.Fatalf("no error for %q", c.yaml)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v is not ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "none.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte("classes: {nope: {}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("bad file: error %v does not name the file", err)
	}
}

// fleet builds a pinglist of groups × perGroup nodes named g%03d-h%03d.
func fleet(groups, perGroup int, extra string) []byte {
	var b strings.Builder
	b.WriteString(extra)
	b.WriteString("nodes:\n")
	for g := 0; g < groups; g++ {
		for h := 0; h < perGroup; h++ {
			fmt.Fprintf(&b, "  - {name: g%03d-h%03d, addr: 10.%d.%d.%d, group: tor-%03d}\n", g, h, g/256, g%256, h+1, g)
		}
	}
	return []byte(b.String())
}

func TestTargetsDeterministicAndCovering(t *testing.T) {
	for _, c := range []struct {
		name             string
		groups, perGroup int
		sample           int
		wantInter        int // inter_tor targets per node
		wantFullCoverage bool
	}{
		{"2x2 sample 16", 2, 2, 16, 2, true},
		{"8x4 sample 2", 8, 4, 2, 2, true},    // 4 members x 2 slots >= 7 other groups
		{"20x3 sample 3", 20, 3, 3, 3, false}, // 3 x 3 = 9 < 19 other groups
		{"5x1 sample 1", 5, 1, 1, 1, false},
		{"4x10 sample 40", 4, 10, 40, 30, true}, // capped at the 30 other nodes
	} {
		t.Run(c.name, func(t *testing.T) {
			src := fleet(c.groups, c.perGroup, fmt.Sprintf("classes: {inter_tor: {sample: %d, seed: 7}}\n", c.sample))
			l1, err := Parse(src)
			if err != nil {
				t.Fatal(err)
			}
			l2, err := Parse(src)
			if err != nil {
				t.Fatal(err)
			}
			covered := map[[2]string]bool{}
			for _, n := range l1.Nodes {
				got := l1.Targets(n)
				if again := l2.Targets(n); !slices.Equal(got, again) {
					t.Fatalf("%s: two parses disagree", n.Name)
				}
				inter, mesh := 0, 0
				seen := map[string]bool{}
				for i, x := range got {
					if x.Node.Name == n.Name {
						t.Fatalf("%s targets itself", n.Name)
					}
					if seen[x.Node.Name] {
						t.Fatalf("%s targets %s twice", n.Name, x.Node.Name)
					}
					seen[x.Node.Name] = true
					if i > 0 && got[i-1].Class == x.Class && got[i-1].Node.Name >= x.Node.Name {
						t.Fatalf("%s: targets not sorted: %v", n.Name, got)
					}
					switch x.Class {
					case ClassToRMesh:
						mesh++
						if x.Node.Group != n.Group {
							t.Fatalf("tor_mesh target %s of %s is in another group", x.Node.Name, n.Name)
						}
					case ClassInterToR:
						inter++
						if x.Node.Group == n.Group {
							t.Fatalf("inter_tor target %s of %s is in its group", x.Node.Name, n.Name)
						}
						covered[[2]string{n.Group, x.Node.Group}] = true
					}
				}
				if mesh != c.perGroup-1 || inter != c.wantInter {
					t.Fatalf("%s: %d tor_mesh, %d inter_tor targets; want %d, %d", n.Name, mesh, inter, c.perGroup-1, c.wantInter)
				}
			}
			pairs := c.groups * (c.groups - 1)
			t.Logf("%d of %d ordered group pairs covered", len(covered), pairs)
			if c.wantFullCoverage && len(covered) != pairs {
				t.Errorf("%d of %d ordered group pairs covered", len(covered), pairs)
			}
			if !c.wantFullCoverage {
				// Each group covers min(others, members x sample) groups.
				want := c.groups * min(c.groups-1, c.perGroup*c.sample)
				if len(covered) != want {
					t.Errorf("%d ordered group pairs covered, want %d", len(covered), want)
				}
			}
		})
	}
}

func TestTargetsSeedChangesSample(t *testing.T) {
	a, _ := Parse(fleet(10, 10, "classes: {inter_tor: {sample: 4, seed: 1}}\n"))
	b, _ := Parse(fleet(10, 10, "classes: {inter_tor: {sample: 4, seed: 2}}\n"))
	if slices.Equal(a.Targets(a.Nodes[0]), b.Targets(b.Nodes[0])) {
		t.Error("the seed does not change the inter_tor sample")
	}
}

func TestTargetsClassesAndCap(t *testing.T) {
	l, err := Parse(fleet(3, 5, `classes:
  tor_mesh: {rate: 100, max_rate: 200}
  inter_tor: {enabled: false}
static:
  - {addr: 192.0.2.1}
  - {addr: 192.0.2.2, name: box, rate: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := l.Targets(l.Nodes[0])
	var sum float64
	for _, x := range got {
		switch x.Class {
		case ClassToRMesh:
			sum += x.Rate
		case ClassInterToR:
			t.Fatalf("disabled class gave target %v", x)
		}
	}
	if math.Abs(sum-200) > 1e-9 {
		t.Errorf("tor_mesh rates add up to %v, want the cap 200", sum)
	}
	n := len(got)
	if got[n-2].Node.Name != "192.0.2.1" || got[n-2].Rate != 1 || got[n-1].Node.Name != "box" || got[n-1].Rate != 3 {
		t.Errorf("static targets %v", got[n-2:])
	}
	// An agent outside the list probes only the static targets.
	out := l.Targets(Node{Name: "stranger", Addr: netip.MustParseAddr("192.0.2.99"), Group: "tor-000"})
	if len(out) != 2 || out[0].Class != ClassStatic {
		t.Errorf("outsider's targets %v", out)
	}
}

// TestLargeList measures a 10,000-node pinglist (250 groups of 40): the
// memory of the List and of one node's targets, and how long computing
// them takes.
func TestLargeList(t *testing.T) {
	src := fleet(250, 40, "")
	var m0, m1, m2 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	l, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	start := time.Now()
	tg := l.Targets(l.Nodes[5000])
	took := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&m2)
	listBytes := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	tgBytes := int64(m2.HeapAlloc) - int64(m1.HeapAlloc)
	t.Logf("10,000 nodes: List %d KiB, one node's %d targets %d KiB (%d B each), computed in %v",
		listBytes/1024, len(tg), tgBytes/1024, tgBytes/int64(max(1, len(tg))), took)
	if len(tg) != 39+DefaultSample {
		t.Errorf("%d targets, want %d", len(tg), 39+DefaultSample)
	}
	// A bound, not a speed: far more than a list needs would mean a
	// quadratic structure.
	if listBytes > 32<<20 {
		t.Errorf("a 10,000-node List takes %d bytes", listBytes)
	}
	runtime.KeepAlive(l)
	runtime.KeepAlive(tg)
}

func BenchmarkTargets10k(b *testing.B) {
	l, err := Parse(fleet(250, 40, ""))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		_ = l.Targets(l.Nodes[i%len(l.Nodes)])
	}
}

func BenchmarkParse10k(b *testing.B) {
	src := fleet(250, 40, "")
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(src); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzParse(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "pinglist.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("nodes: [{name: a, addr: 10.0.0.1}]"))
	f.Add([]byte(railList))
	f.Add([]byte("settings: {rail_pairs: all}\n" + railList))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := Parse(b)
		if err != nil {
			return
		}
		for _, n := range l.Nodes {
			_ = l.Targets(n)
		}
	})
}
