//go:build linux

package agent_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

// railFleet is a rail-optimised fabric of namespaces: hosts h0..h2, each
// with two rails, rail0 under ToR 0 and rail1 under ToR 1 (one ToR a
// rail), one goroce probe agent process a host running a prober and a
// responder on each rail.
type railFleet struct {
	f      *netns.Fabric
	rails  []netip.Addr // h0/rail0, h1/rail0, h2/rail0, h0/rail1, ...
	names  []string
	client *http.Client
}

// newRailFleet builds the fabric: NewFabric's two groups of three hosts,
// host i+3's link (rail 1) moved into host i's namespace and routed by
// source address (a table of its own), so that each of h0..h2 has two
// links, two addresses and two ToRs.
func newRailFleet(t *testing.T) *railFleet {
	rf := &railFleet{f: netns.NewFabric(t, netns.FabricOptions{Groups: []int{3, 3}})}
	f := rf.f
	for i := 0; i < 3; i++ {
		host, donor := f.Hosts[i], f.Hosts[i+3]
		a, gw := f.Addrs[i+3], netip.AddrFrom4([4]byte{10, 98, 1, 1})
		torMAC := linkMAC(t, f.ToRs[1], f.HostLinks[i+3])
		for _, c := range [][]string{
			{"-n", donor.Name, "link", "set", netns.LinkName, "down"},
			{"-n", donor.Name, "link", "set", netns.LinkName, "name", "rail1"},
			{"-n", donor.Name, "link", "set", "rail1", "netns", host.Name},
			{"-n", host.Name, "addr", "add", a.String() + "/32", "dev", "rail1"},
			{"-n", host.Name, "link", "set", "rail1", "up"},
			{"-n", host.Name, "neigh", "replace", gw.String(), "lladdr", torMAC, "dev", "rail1", "nud", "permanent"},
			{"-n", host.Name, "route", "add", gw.String() + "/32", "dev", "rail1", "scope", "link", "table", "101"},
			{"-n", host.Name, "route", "add", "default", "via", gw.String(), "dev", "rail1", "table", "101"},
			{"-n", host.Name, "rule", "add", "from", a.String(), "table", "101"},
		} {
			if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v: %s", c, err, out)
			}
		}
	}
	rf.rails = f.Addrs
	for r := 0; r < 2; r++ {
		for h := 0; h < 3; h++ {
			rf.names = append(rf.names, fmt.Sprintf("h%d/rail%d", h, r))
		}
	}
	rf.client = nsClient(f.Spine)
	return rf
}

func linkMAC(t *testing.T, ns *netns.NS, link string) string {
	out, err := exec.Command("ip", "-n", ns.Name, "-j", "link", "show", "dev", link).Output()
	if err != nil {
		t.Fatalf("ip link show %s: %v", link, err)
	}
	var l []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal(out, &l); err != nil || len(l) != 1 {
		t.Fatalf("ip link show %s: %v: %s", link, err, out)
	}
	return l[0].Address
}

func (rf *railFleet) pinglist() string {
	var b strings.Builder
	b.WriteString("settings:\n  timeout: 2s\n  labels: 16\n  http_port: 9478\n  window: 10s\n  sla: {max_loss: 0.01, max_p99_rtt: 1s, min_probes: 20}\n")
	b.WriteString("classes:\n  tor_mesh: {rate: 20}\n  inter_tor: {rate: 20}\nnodes:\n")
	for h := 0; h < 3; h++ {
		fmt.Fprintf(&b, "  - name: h%d\n    rails:\n      - {addr: %s, group: tor-r0}\n      - {addr: %s, group: tor-r1}\n", h, rf.rails[h], rf.rails[h+3])
	}
	return b.String()
}

func (rf *railFleet) metrics(k int) []byte {
	resp, err := rf.client.Get(fmt.Sprintf("http://%s:9478/metrics", rf.rails[k]))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		return nil
	}
	return b
}

// verdicts are the fleet verdicts the rails' agents export.
func (rf *railFleet) verdicts() []string {
	var vs []string
	for k := range rf.rails {
		sc := bufio.NewScanner(bytes.NewReader(rf.metrics(k)))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			m := faultLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			l := map[string]string{}
			for _, p := range labelPair.FindAllStringSubmatch(m[1], -1) {
				l[p[1]] = p[2]
			}
			vs = append(vs, l["symptom"]+": "+l["candidates"])
		}
	}
	sort.Strings(vs)
	return vs
}

// TestMultiRail: three hosts of two rails each, one agent process a host.
// Every rail probes the other hosts' same rail (and nothing across rails);
// every series carries its rail; 5 % loss on h1's rail-0 link (in its
// ToR, both ways) is named "rail h1/rail0" within 30 s, and nothing names
// h1 itself or its rail 1, whose paths stay clean. With
// GOROCE_PROBE_MATRIX=full, h1's agent is then stalled 6 s (SIGSTOP): both
// its rails go silent, and the verdict is "host h1".
func TestMultiRail(t *testing.T) {
	netns.Require(t)
	netns.RequireTool(t, "nft")
	if testing.Short() {
		t.Skip("builds goroce and runs three two-rail agents")
	}
	bin := buildGoroce(t)
	rf := newRailFleet(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pinglist.yaml")
	if err := os.WriteFile(cfg, []byte(rf.pinglist()), 0o644); err != nil {
		t.Fatal(err)
	}
	procs := make([]*exec.Cmd, 3)
	for h := 0; h < 3; h++ {
		procs[h] = startProcess(t, rf.f.Hosts[h], filepath.Join(dir, fmt.Sprintf("h%d.log", h)), "env", "GOMAXPROCS=1", bin, "probe", "agent",
			"--config", cfg, "--addr", rf.rails[h].String(), "--path", "udp", "--log-level", "warn")
	}
	waitFor(t, 60*time.Second, "every rail to complete probes to the other hosts' same rail", func() bool {
		for k := range rf.rails {
			if strings.Count(string(rf.metrics(k)), "goroce_probe_completed_total{") < 2 {
				return false
			}
		}
		return true
	})
	for k, name := range rf.names {
		m := string(rf.metrics(k))
		rail := name[strings.Index(name, "/")+1:]
		for _, other := range rf.names {
			same := other[strings.Index(other, "/"):] == name[strings.Index(name, "/"):]
			probed := strings.Contains(m, `target="`+other+`"`)
			if probed != (same && other[:2] != name[:2]) {
				t.Errorf("%s probes %s: %v", name, other, probed)
			}
		}
		if !strings.Contains(m, `goroce_probe_source_info{rail="`+rail+`",source="`+name+`"`) {
			t.Errorf("%s: no source_info with its rail label", name)
		}
	}
	// Let the window fill with clean probes, then break h1's rail-0 link.
	time.Sleep(5 * time.Second)
	if vs := rf.verdicts(); len(vs) > 0 {
		t.Fatalf("verdicts before any fault: %v", vs)
	}
	rule := fmt.Sprintf(`iifname %q udp dport 4791 numgen random mod 100 < 5 counter drop
		oifname %q udp dport 4791 numgen random mod 100 < 5 counter drop`, rf.f.HostLinks[1], rf.f.HostLinks[1])
	if err := rf.f.Fault(rf.f.ToRs[0], "rail", rule); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	seen := map[string]bool{}
	var at time.Duration
	for time.Since(start) < 30*time.Second && at == 0 {
		for _, v := range rf.verdicts() {
			seen[v] = true
			if v == "loss: rail h1/rail0" {
				at = time.Since(start)
			}
		}
		time.Sleep(time.Second)
	}
	for end := time.Now().Add(5 * time.Second); at > 0 && time.Now().Before(end); time.Sleep(time.Second) {
		for _, v := range rf.verdicts() {
			seen[v] = true
		}
	}
	if at == 0 {
		t.Fatalf("rail h1/rail0 not named within 30 s; verdicts: %v", keys(seen))
	}
	if d := os.Getenv(screenshotEnv); d != "" {
		(&fabricFleet{f: rf.f, dir: dir}).screenshot(t, filepath.Join(d, "probe-fault-rail-link-loss-5.png"))
	}
	// The fleet document (the page's) gives every rail its host and rail.
	var fleet struct {
		Nodes []struct{ Name, Host, Rail string }
	}
	if err := json.Unmarshal(getBody(t, rf.client, fmt.Sprintf("http://%s:9478/probe/v1/fleet", rf.rails[0])), &fleet); err != nil {
		t.Fatal(err)
	}
	for _, n := range fleet.Nodes {
		if n.Name != n.Host+"/"+n.Rail {
			t.Errorf("fleet node %+v: want host and rail", n)
		}
	}
	if len(fleet.Nodes) != 6 {
		t.Errorf("fleet of %d nodes, want 6 rails", len(fleet.Nodes))
	}
	t.Logf("named in %v: %v", at.Round(time.Second), keys(seen))
	for v := range seen {
		if v != "loss: rail h1/rail0" && !strings.HasPrefix(v, "loss: rail h1/rail0 (") {
			t.Errorf("a verdict names something else: %q", v)
		}
	}
	// h1's rail 1 stayed healthy: its paths lost nothing over the window.
	var doc struct {
		Paths []struct {
			Dst  string
			Sent uint64
			Lost uint64
		}
	}
	if err := json.Unmarshal(getBody(t, rf.client, fmt.Sprintf("http://%s:9478/probe/v1/paths", rf.rails[4])), &doc); err != nil {
		t.Fatal(err)
	}
	paths := doc.Paths
	if len(paths) != 2 {
		t.Fatalf("h1/rail1 has %d paths, want 2: %+v", len(paths), paths)
	}
	for _, p := range paths {
		if p.Sent < 20 || p.Lost*100 > p.Sent {
			t.Errorf("h1/rail1 -> %s: %d of %d lost", p.Dst, p.Lost, p.Sent)
		}
	}
	if os.Getenv(matrixEnv) != "full" {
		return
	}
	// The whole host: its agent stalled 6 s (SIGSTOP), both rails go
	// silent; the verdict is the host, not its rails.
	if err := rf.f.Fault(rf.f.ToRs[0], "rail", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 40*time.Second, "the rail's verdict to clear", func() bool { return len(rf.verdicts()) == 0 })
	procs[1].Process.Signal(syscall.SIGSTOP)
	time.Sleep(6 * time.Second)
	procs[1].Process.Signal(syscall.SIGCONT)
	seen = map[string]bool{}
	named := false
	for start := time.Now(); time.Since(start) < 30*time.Second && !named; time.Sleep(time.Second) {
		for _, v := range rf.verdicts() {
			seen[v] = true
			named = named || v == "loss: host h1" || strings.HasPrefix(v, "loss: host h1 (")
		}
	}
	t.Logf("h1 stalled 6 s: %v", keys(seen))
	if !named {
		t.Errorf("the stalled two-rail host h1 not named: %v", keys(seen))
	}
	for v := range seen {
		if !strings.HasPrefix(v, "loss: host h1") {
			t.Errorf("a verdict names something else than host h1: %q", v)
		}
	}
}

func getBody(t *testing.T, c *http.Client, url string) []byte {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: %s %v", url, resp.Status, err)
	}
	return b
}
