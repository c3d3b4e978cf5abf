package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/goroce/goroce/verbs/rdmatest"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/agent"
	"github.com/goroce/goroce/verbs"
)

// Loopback addresses of this package's soft devices and agents (other
// test packages use other 127.0.x.y).
func addr(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 45, byte(10 + i)}) }

// softContext opens a soft device on a UDP socket bound to a (port 4791),
// closed at the end of the test.
func softContext(t testing.TB, a netip.Addr) verbs.Context {
	t.Helper()
	_, ctx := rdmatest.Context(t, "agent"+a.String(), a)
	return ctx
}

// freePort finds a TCP port free on the test's loopback addresses.
func freePort(t testing.TB, n int) int {
	t.Helper()
	for try := 0; try < 20; try++ {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(addr(0), 0).String())
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ok := true
		for i := 0; i < n && ok; i++ {
			l, err := net.Listen("tcp", netip.AddrPortFrom(addr(i), uint16(port)).String())
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// pinglist writes a pinglist of the given nodes (name, index, group).
func pinglist(port int, nodes ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "settings:\n  timeout: 500ms\n  labels: 8\n  http_port: %d\n  window: 10s\n  sla: {max_loss: 0.01, max_p99_rtt: 1s, min_probes: 5}\n", port)
	b.WriteString("classes:\n  tor_mesh: {rate: 20}\n  inter_tor: {rate: 20}\nnodes:\n")
	for _, n := range nodes {
		var name, group string
		var i int
		fmt.Sscanf(strings.ReplaceAll(n, "/", " "), "%s %d %s", &name, &i, &group)
		fmt.Fprintf(&b, "  - {name: %s, addr: %s, group: %s}\n", name, addr(i), group)
	}
	return b.String()
}

func write(t testing.TB, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// running is an agent started by start.
type running struct {
	a     *agent.Agent
	reg   *prometheus.Registry
	base  string
	jsonl *bytes.Buffer
	mu    *sync.Mutex
	stop  func()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// start runs the agent of node i of the pinglist at path until the test
// ends (or stop is called).
func start(t testing.TB, path string, i, port int) *running {
	t.Helper()
	return startWith(t, path, i, port, nil)
}

// startWith is start with the options changed by opt (when not nil).
func startWith(t testing.TB, path string, i, port int, opt func(*agent.Options)) *running {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr(i), uint16(port)).String())
	if err != nil {
		t.Fatal(err)
	}
	r := &running{reg: prometheus.NewRegistry(), base: "http://" + ln.Addr().String(), jsonl: &bytes.Buffer{}, mu: &sync.Mutex{}}
	o := agent.Options{
		Device: softContext(t, addr(i)), Provider: "soft", Pinglist: path, Self: addr(i),
		Listener: ln, Registry: r.reg, JSONL: lockedWriter{r.mu, r.jsonl},
		RetryMin: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		WatchInterval: 50 * time.Millisecond, AnalysisInterval: 100 * time.Millisecond, FleetTTL: time.Nanosecond,
		HistorySlot: 200 * time.Millisecond,
	}
	if opt != nil {
		opt(&o)
	}
	r.a, err = agent.New(o)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.a.Run(ctx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}

func getJSON(t testing.TB, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s: %s", url, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v: %s", url, err, b)
	}
}

// waitFor polls cond every 50 ms for up to d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func counter(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// Three agents on loopback, two groups: every agent finds the others by
// HTTP, probes each with every flow label, loses nothing, and serves its
// paths, the fleet view, histories, metrics, the page and a probe log.
func TestLoopbackFleet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pinglist.yaml")
	port := freePort(t, 3)
	write(t, path, pinglist(port, "a/0/g1", "b/1/g1", "c/2/g2"))
	rs := []*running{start(t, path, 0, port), start(t, path, 1, port), start(t, path, 2, port)}

	var self probe.Self
	getJSON(t, rs[1].base+probe.SelfPath, &self)
	if self.Name != "b" || self.Addr != addr(1).String() || len(self.QPNs) != 1 || self.Provider != "soft" || self.Timestamps == "" {
		t.Errorf("self = %+v", self)
	}

	// Every path completes at least 40 probes (8 labels, 5 times over).
	waitFor(t, 20*time.Second, "40 probes on every path", func() bool {
		var doc agent.FleetDoc
		getJSON(t, rs[0].base+agent.FleetPath, &doc)
		if len(doc.Paths) != 6 {
			return false
		}
		for _, p := range doc.Paths {
			if p.Completed < 40 {
				return false
			}
		}
		return true
	})
	var doc agent.FleetDoc
	getJSON(t, rs[2].base+agent.FleetPath, &doc)
	if doc.Served != "c" || len(doc.Nodes) != 3 || len(doc.Groups) != 2 || len(doc.Faulty) != 0 {
		t.Errorf("fleet: served by %q, nodes %+v, groups %v, faulty %v", doc.Served, doc.Nodes, doc.Groups, doc.Faulty)
	}
	for _, p := range doc.Paths {
		if p.Lost != 0 || p.Degraded || p.P50 <= 0 || p.Labels != 8 {
			t.Errorf("path %+v", p)
		}
	}
	for _, n := range doc.Nodes {
		if !n.OK {
			t.Errorf("node %+v", n)
		}
	}

	var hist []agent.Point
	waitFor(t, 5*time.Second, "a history", func() bool {
		getJSON(t, rs[2].base+agent.FleetHistoryPath+"?src=a&dst=c", &hist)
		return len(hist) >= 2
	})
	for _, p := range hist {
		if p.Sent == 0 || p.Lost != 0 || p.OK != p.Sent || p.P50 <= 0 || p.Max < p.P50 {
			t.Errorf("history point %+v", p)
		}
	}

	if got := counter(t, rs[0].reg, "goroce_probe_agent_targets", nil); got != 2 {
		t.Errorf("targets gauge = %v", got)
	}
	if got := counter(t, rs[0].reg, "goroce_probe_agent_targets_unresolved", nil); got != 0 {
		t.Errorf("unresolved gauge = %v", got)
	}
	resp, err := http.Get(rs[0].base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"goroce_probe_sent_total{", "goroce_probe_network_rtt_seconds_bucket{", `goroce_probe_agent_discoveries_total{result="ok"}`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	resp, err = http.Get(rs[0].base + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte("probe/v1/fleet")) || bytes.Contains(b, []byte("https://")) {
		t.Errorf("page: %s, %d bytes", resp.Status, len(b))
	}

	// The probe log: every line parses, sport follows the label, and all
	// 8 labels were used towards each target.
	for _, r := range rs {
		r.stop()
	}
	r := rs[0]
	labels := map[string]map[uint32]bool{}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(r.jsonl.Bytes()))
	for sc.Scan() {
		var l struct {
			Src, Dst, Outcome string
			Label             uint32
			Sport             uint16
			T1, T2, T3, T4    int64
			T5, T6            int64
			RTT               int64 `json:"rtt_ns"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %d: %v: %s", n, err, sc.Bytes())
		}
		n++
		if l.Src != "a" || l.Sport != probe.SourcePort(l.Label) {
			t.Fatalf("line %s", sc.Bytes())
		}
		if l.Outcome != "ok" {
			continue
		}
		if l.T1 == 0 || l.T6 < l.T1 || l.T5 < l.T2 || l.T4 < l.T3 || l.RTT <= 0 {
			t.Fatalf("line %s", sc.Bytes())
		}
		if labels[l.Dst] == nil {
			labels[l.Dst] = map[uint32]bool{}
		}
		labels[l.Dst][l.Label] = true
	}
	if len(labels) != 2 || len(labels["b"]) != 8 || len(labels["c"]) != 8 {
		t.Errorf("labels used: %v (%d lines)", labels, n)
	}
}

// A target that is not up yet is retried and counted, and probed once it
// comes; the pinglist reloads when the file changes (targets added and
// removed without a restart) and on Reload; a bad file keeps the old list.
func TestDiscoveryAndReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pinglist.yaml")
	port := freePort(t, 3)
	write(t, path, pinglist(port, "a/0/g1", "b/1/g1"))
	a := start(t, path, 0, port)
	waitFor(t, 10*time.Second, "discovery errors for b", func() bool {
		return counter(t, a.reg, "goroce_probe_agent_discoveries_total", map[string]string{"result": "error"}) >= 3 &&
			counter(t, a.reg, "goroce_probe_agent_targets_unresolved", nil) == 1
	})
	start(t, path, 1, port)
	completed := func(dst string) uint64 {
		for _, p := range a.a.Paths() {
			if p.Dst == dst {
				return p.Completed
			}
		}
		return 0
	}
	waitFor(t, 10*time.Second, "probes to b", func() bool { return completed("b") >= 10 })
	if got := counter(t, a.reg, "goroce_probe_agent_targets_unresolved", nil); got != 0 {
		t.Errorf("unresolved = %v after b came", got)
	}

	// Add c: picked up from the file alone.
	write(t, path+".c", pinglist(port, "a/0/g1", "b/1/g1", "c/2/g2"))
	start(t, path+".c", 2, port) // c has its own list, naming a, b and c
	write(t, path, pinglist(port, "a/0/g1", "b/1/g1", "c/2/g2"))
	waitFor(t, 10*time.Second, "probes to c after the file changed", func() bool { return completed("c") >= 10 })
	if n := len(a.a.Targets()); n != 2 {
		t.Errorf("%d targets", n)
	}
	okBefore := counter(t, a.reg, "goroce_probe_agent_reloads_total", map[string]string{"result": "ok"})

	// A bad file: counted once, the old targets stay.
	write(t, path, "settings: {timeout: -1s}\nnodes: [")
	waitFor(t, 5*time.Second, "a reload error", func() bool {
		return counter(t, a.reg, "goroce_probe_agent_reloads_total", map[string]string{"result": "error"}) == 1
	})
	time.Sleep(300 * time.Millisecond)
	if got := counter(t, a.reg, "goroce_probe_agent_reloads_total", map[string]string{"result": "error"}); got != 1 {
		t.Errorf("reload errors = %v, want 1 (once per bad content)", got)
	}
	if err := a.a.Reload(); err == nil {
		t.Error("Reload of a bad file succeeded")
	}
	if n := len(a.a.Targets()); n != 2 {
		t.Errorf("%d targets after a bad file", n)
	}
	// A list without this node: the agent stays as a responder only,
	// probing nothing, gauged unlisted, named by its address.
	write(t, path, pinglist(port, "b/1/g1", "c/2/g2"))
	waitFor(t, 5*time.Second, "the node unlisted", func() bool {
		return !a.a.Listed() && counter(t, a.reg, "goroce_probe_agent_listed", nil) == 0
	})
	if n := len(a.a.Targets()); n != 0 || a.a.Node().Name != addr(0).String() {
		t.Errorf("unlisted: %d targets, named %q", n, a.a.Node().Name)
	}
	if got := counter(t, a.reg, "goroce_probe_source_info", map[string]string{"source": addr(0).String(), "source_group": ""}); got != 1 {
		t.Errorf("unlisted: source_info{source=%q} = %v", addr(0), got)
	}
	okBefore = counter(t, a.reg, "goroce_probe_agent_reloads_total", map[string]string{"result": "ok"})

	// Remove b, with Reload (as on SIGHUP), racing the watcher.
	os.WriteFile(path, []byte(pinglist(port, "a/0/g1", "c/2/g2")), 0o644)
	if err := a.a.Reload(); err != nil {
		t.Fatal(err)
	}
	if ts := a.a.Targets(); len(ts) != 1 || ts[0].Node.Name != "c" {
		t.Fatalf("targets after removing b: %+v", ts)
	}
	// Listed again: it joins, under its name and group.
	if !a.a.Listed() || counter(t, a.reg, "goroce_probe_agent_listed", nil) != 1 ||
		counter(t, a.reg, "goroce_probe_source_info", map[string]string{"source": "a", "source_group": "g1"}) != 1 {
		t.Errorf("not joined on reload: listed %v", a.a.Listed())
	}
	// Reload counts one; the watcher may have seen the file first and
	// counted another.
	if got := counter(t, a.reg, "goroce_probe_agent_reloads_total", map[string]string{"result": "ok"}); got != okBefore+1 && got != okBefore+2 {
		t.Errorf("reloads ok = %v, want %v or %v", got, okBefore+1, okBefore+2)
	}
	// No more probes go to b: its count stops growing (the window still
	// holds the old ones), c's keeps growing.
	time.Sleep(700 * time.Millisecond) // the timeout of probes in flight
	b0, c0 := completed("b"), completed("c")
	time.Sleep(500 * time.Millisecond)
	if b1, c1 := completed("b"), completed("c"); b1 != b0 || c1 <= c0 {
		t.Errorf("after removing b: b %d -> %d, c %d -> %d", b0, b1, c0, c1)
	}
}

// Bad options and a listener that cannot be had are errors, not panics,
// and Run returns.
func TestErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pinglist.yaml")
	port := freePort(t, 2)
	write(t, path, pinglist(port, "a/0/g1", "b/1/g1"))
	dev := softContext(t, addr(0))
	for _, tt := range []struct {
		name string
		o    agent.Options
	}{
		{"no device", agent.Options{Pinglist: path, Self: addr(0)}},
		{"no pinglist", agent.Options{Device: dev, Self: addr(0)}},
		{"no self", agent.Options{Device: dev, Pinglist: path}},
		{"missing file", agent.Options{Device: dev, Pinglist: path + ".none", Self: addr(0)}},
	} {
		if _, err := agent.New(tt.o); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
	reg := prometheus.NewRegistry()
	a, err := agent.New(agent.Options{Device: dev, Pinglist: path, Self: addr(0), Registry: reg, Listen: "256.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); err == nil {
		t.Error("Run listened on 256.0.0.1")
	}
	if _, err := agent.New(agent.Options{Device: dev, Pinglist: path, Self: addr(0), Registry: reg}); err == nil {
		t.Error("a second agent registered the same metrics")
	}
}
