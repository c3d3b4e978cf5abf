//go:build linux

package agent_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/probe/agent"
)

// matrixEnv set to "full" runs the whole fault matrix (on three groups and
// on two, about 12 minutes); otherwise a few scenarios run (about 2).
const matrixEnv = "GOROCE_PROBE_MATRIX"

// matrixDumpEnv names a file where the matrix writes, at every look at
// the verdicts, the exporter's fleet view as one JSON line: the scenario,
// the seconds since it began, the verdicts exported and the view's own
// (before the exporter confirms them) with the paths behind them. It is
// the evidence to replay a wrong verdict from (analysis.Diagnose).
const matrixDumpEnv = "GOROCE_PROBE_MATRIX_DUMP"

// fabricFleet is a leaf-spine fabric of namespaces with one goroce probe
// agent process a host.
type fabricFleet struct {
	f      *netns.Fabric
	dir    string
	bin    string
	cfg    string
	names  []string
	groups []string
	procs  []*exec.Cmd
	client *http.Client // dials from the spine's namespace
	window time.Duration
	dump   *os.File // matrixDumpEnv's file, or nil
	// scenario and began are the scenario running and when it began;
	// exporter is the agent that exported at the last look (-1: none).
	scenario string
	began    time.Time
	exporter int
}

// pending returns the verdicts of the exporter's current fleet view (as
// the export would name them), confirmed or not yet: nil when no agent
// exported at the last look or its view could not be read.
func (ff *fabricFleet) pending() []string {
	if ff.exporter < 0 {
		return nil
	}
	resp, err := ff.client.Get(fmt.Sprintf("http://%s:9478%s", ff.f.Addrs[ff.exporter], agent.FleetPath))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var doc agent.FleetDoc
	if json.NewDecoder(resp.Body).Decode(&doc) != nil {
		return nil
	}
	var out []string
	for _, v := range doc.Verdicts {
		var l []string
		for _, s := range v.Suspects {
			l = append(l, s.Label())
		}
		out = append(out, v.Symptom+": "+strings.Join(l, ", "))
	}
	return out
}

// matrixPinglist: every host probes every other 20 times a second; the
// timeout is 2 s (no probe is lost to a stall of this shared machine), the
// RTT threshold far above this machine's noise: the matrix is about loss.
func (ff *fabricFleet) pinglist() string {
	var b strings.Builder
	fmt.Fprintf(&b, "settings:\n  timeout: 2s\n  labels: 16\n  http_port: 9478\n  window: %s\n  sla: {max_loss: 0.01, max_p99_rtt: 1s, min_probes: 20}\n", ff.window)
	b.WriteString("classes:\n  tor_mesh: {rate: 20}\n  inter_tor: {rate: 20, sample: 16, dscp: 10}\nnodes:\n")
	for i, n := range ff.names {
		fmt.Fprintf(&b, "  - {name: %s, addr: %s, group: %s}\n", n, ff.f.Addrs[i], ff.groups[ff.f.Group[i]])
	}
	return b.String()
}

func newFabricFleet(t *testing.T, bin string, groups []int, window time.Duration) *fabricFleet {
	ff := &fabricFleet{f: netns.NewFabric(t, netns.FabricOptions{Groups: groups}), dir: t.TempDir(), bin: bin, window: window, exporter: -1}
	for g := range groups {
		ff.groups = append(ff.groups, fmt.Sprintf("g%d", g))
	}
	for i := range ff.f.Hosts {
		ff.names = append(ff.names, fmt.Sprintf("h%d", i))
	}
	ff.client = nsClient(ff.f.Spine)
	if name := os.Getenv(matrixDumpEnv); name != "" {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		ff.dump = f
	}
	ff.cfg = filepath.Join(ff.dir, "pinglist.yaml")
	if err := os.WriteFile(ff.cfg, []byte(ff.pinglist()), 0o644); err != nil {
		t.Fatal(err)
	}
	ff.procs = make([]*exec.Cmd, len(ff.names))
	for i := range ff.names {
		ff.start(t, i)
	}
	n := len(ff.names)
	waitFor(t, 60*time.Second, "every path to complete probes", func() bool {
		paths := 0
		for i := range n {
			v := ff.metrics(i)
			if v == nil {
				return false
			}
			paths += strings.Count(string(v), "goroce_probe_completed_total{")
		}
		return paths >= n*(n-1)
	})
	return ff
}

// start runs host i's agent (again).
func (ff *fabricFleet) start(t *testing.T, i int) {
	log := filepath.Join(ff.dir, fmt.Sprintf("%s-%d.log", ff.names[i], time.Now().UnixNano()))
	ff.procs[i] = startProcess(t, ff.f.Hosts[i], log, "env", "GOMAXPROCS=1", ff.bin, "probe", "agent", "--config", ff.cfg,
		"--addr", ff.f.Addrs[i].String(), "--path", "udp", "--log-level", "warn")
}

func (ff *fabricFleet) metrics(i int) []byte {
	resp, err := ff.client.Get(fmt.Sprintf("http://%s:9478/metrics", ff.f.Addrs[i]))
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

var faultLine = regexp.MustCompile(`^goroce_probe_fleet_fault\{(.*)\} (\S+)$`)
var labelPair = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// verdicts reads the fleet verdicts the agents export: the candidates of
// each (as its candidates label lists them), and how many agents export.
func (ff *fabricFleet) verdicts(skip map[int]bool) (vs []string, exporters int) {
	exporter := -1
	defer func() {
		ff.exporter = exporter
		ff.dumpView(exporter, vs)
	}()
	for i := range ff.names {
		if skip[i] {
			continue
		}
		b := ff.metrics(i)
		if b == nil {
			continue
		}
		if bytes.Contains(b, []byte("\ngoroce_probe_fleet_exporter 1\n")) {
			exporters++
			exporter = i
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
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
	return vs, exporters
}

// dumpView writes, with matrixDumpEnv, the exporter's fleet view beside
// the verdicts it exports (vs).
func (ff *fabricFleet) dumpView(exporter int, vs []string) {
	if ff.dump == nil {
		return
	}
	line := map[string]any{"scenario": ff.scenario, "t": time.Since(ff.began).Seconds(), "exporter": exporter, "exported": vs}
	if exporter >= 0 {
		resp, err := ff.client.Get(fmt.Sprintf("http://%s:9478%s", ff.f.Addrs[exporter], agent.FleetPath))
		if err == nil {
			var doc agent.FleetDoc
			if json.NewDecoder(resp.Body).Decode(&doc) == nil {
				line["generated"], line["verdicts"], line["paths"] = doc.Generated, doc.Verdicts, doc.Paths
			}
			resp.Body.Close()
		}
	}
	b, _ := json.Marshal(line)
	ff.dump.Write(append(b, '\n'))
}

// scenario is one row of the fault matrix.
type scenario struct {
	name string
	// want are the injected components, as "kind name"; a verdict names
	// one when one of its candidates is it (a host in any direction).
	want []string
	// ambiguous: the verdict must say it cannot tell (the topology's
	// doing), with the component among its candidates.
	ambiguous bool
	inject    func(t *testing.T, ff *fabricFleet) (undo func())
}

// names reports whether a verdict's candidates hold component c. The link
// between A and B ("link A<->B") is named by either of its ways too: a
// packet lost from A to B is a probe of A->B or an answer to B->A, and
// which shows first is chance.
func names(verdict, c string) bool {
	_, list, _ := strings.Cut(verdict, ": ")
	alt := map[string]bool{c: true}
	if a, b, ok := strings.Cut(strings.TrimPrefix(c, "link "), "<->"); ok && strings.HasPrefix(c, "link ") {
		alt["link "+a+"->"+b], alt["link "+b+"->"+a] = true, true
	}
	for _, cand := range strings.Split(list, ", ") {
		if alt[cand] || strings.HasPrefix(cand, c+" (") {
			return true
		}
	}
	return false
}

// fault installs an nftables rule in a router, removed by undo.
func fault(t *testing.T, ff *fabricFleet, ns *netns.NS, name, rule string) func() {
	if err := ff.f.Fault(ns, name, rule); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := ff.f.Fault(ns, name, ""); err != nil {
			t.Error(err)
		}
	}
}

// matrixScenarios are the faults for a fabric: hosts h0.. in groups g0..
// (three groups of 3, 3 and 2 hosts, or two of 4).
func matrixScenarios(ff *fabricFleet) []scenario {
	n := len(ff.names)
	a := func(i int) string { return ff.f.Addrs[i].String() }
	far := ff.f.Group[n-1] // the last host's group
	link := scenario{
		name: "link loss 5%", want: []string{"link h0<->h" + fmt.Sprint(n/2)},
		inject: func(t *testing.T, ff *fabricFleet) func() {
			return fault(t, ff, ff.f.ToROf(0), "link", fmt.Sprintf("ip saddr %s ip daddr %s udp dport 4791 numgen random mod 100 < 5 counter drop", a(0), a(n/2)))
		},
	}
	recvHost := n - 2
	recv := scenario{
		name: "host receive-only loss 10%", want: []string{"host " + ff.names[recvHost]},
		inject: func(t *testing.T, ff *fabricFleet) func() {
			return fault(t, ff, ff.f.ToROf(recvHost), "recv", fmt.Sprintf("oifname %q udp dport 4791 numgen random mod 100 < 10 counter drop", ff.f.HostLinks[recvHost]))
		},
	}
	uplink := scenario{
		name: "ToR uplink loss 2%", want: []string{"uplink g1"}, ambiguous: len(ff.groups) == 2,
		inject: func(t *testing.T, ff *fabricFleet) func() {
			return fault(t, ff, ff.f.ToRs[1], "uplink", `oifname "uplink" udp dport 4791 numgen random mod 100 < 2 counter drop`)
		},
	}
	stall := scenario{
		name: "host stall 6 s (SIGSTOP)", want: []string{"host " + ff.names[n/2+1]},
		inject: func(t *testing.T, ff *fabricFleet) func() {
			p := ff.procs[n/2+1].Process
			p.Signal(syscall.SIGSTOP)
			time.Sleep(6 * time.Second)
			p.Signal(syscall.SIGCONT)
			return func() {}
		},
	}
	gray := scenario{
		name: "gray loss 0.5% per packet in a ToR", want: []string{"group " + ff.groups[far]},
		inject: func(t *testing.T, ff *fabricFleet) func() {
			return fault(t, ff, ff.f.ToRs[far], "gray", "udp dport 4791 numgen random mod 1000 < 5 counter drop")
		},
	}
	two := scenario{
		name: "two at once: link loss and host receive-only loss", want: []string{"link h0<->h" + fmt.Sprint(n/2), "host " + ff.names[recvHost]},
		inject: func(t *testing.T, ff *fabricFleet) func() {
			u1 := link.inject(t, ff)
			u2 := recv.inject(t, ff)
			return func() { u1(); u2() }
		},
	}
	killed := scenario{
		name: "agent killed (the exporter, h0)", want: []string{"host h0"},
		inject: func(t *testing.T, ff *fabricFleet) func() {
			ff.procs[0].Process.Kill()
			return func() { ff.start(t, 0) }
		},
	}
	return []scenario{link, recv, uplink, stall, gray, two, killed}
}

// score counts a matrix's outcome: verdicts that name an injected
// component (true positives) or not (false), and the faults named.
type score struct {
	tp, fp, named, faults int
}

// run injects s, waits up to 30 s for the fleet verdicts to name every
// injected component, removes the fault and waits for the verdicts to
// clear: from the fault's start to its verdicts' end nothing else may be
// named.
func (ff *fabricFleet) run(t *testing.T, s scenario, sc *score) {
	start := time.Now()
	ff.scenario, ff.began = s.name, start
	undo := s.inject(t, ff)
	skip := map[int]bool{}
	if strings.Contains(s.name, "killed") {
		skip[0] = true
	}
	seen := map[string]bool{}
	var named map[string]bool
	var at time.Duration
	for time.Since(start) < 30*time.Second {
		vs, exporters := ff.verdicts(skip)
		if exporters > 1 {
			t.Logf("%v: %d agents export at once (a handover)", time.Since(start).Round(time.Second), exporters)
		}
		named = map[string]bool{}
		for _, v := range vs {
			seen[v] = true
			for _, w := range s.want {
				if names(v, w) && (!s.ambiguous || strings.Contains(v, ", ")) {
					named[w] = true
				}
			}
		}
		if len(named) == len(s.want) {
			at = time.Since(start)
			break
		}
		time.Sleep(time.Second)
	}
	// Keep the fault a few seconds more: what else gets named while it
	// stands counts against precision.
	if at > 0 {
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
			vs, _ := ff.verdicts(skip)
			for _, v := range vs {
				seen[v] = true
			}
		}
	}
	undo()
	if dir := os.Getenv(screenshotEnv); dir != "" && at > 0 {
		ff.screenshot(t, filepath.Join(dir, "probe-fault-"+slug(s.name)+".png"))
	}
	// While the verdicts clear, naming anything else counts too.
	ff.waitClear(t, s, seen)
	sc.faults += len(s.want)
	sc.named += len(named)
	var wrong []string
	for v := range seen {
		ok := false
		for _, w := range s.want {
			ok = ok || names(v, w)
		}
		if ok {
			sc.tp++
		} else {
			sc.fp++
			wrong = append(wrong, v)
		}
	}
	if at == 0 {
		t.Errorf("%s: not named within 30 s (want %v); verdicts seen: %v", s.name, s.want, keys(seen))
	} else {
		t.Logf("%s: named in %v: %v", s.name, at.Round(time.Second), keys(seen))
	}
	if len(wrong) > 0 {
		t.Errorf("%s: verdicts naming something else: %v", s.name, wrong)
	}
}

// waitClear waits for the verdicts to clear after s's fault ended (none
// exported, none waiting in the exporter's view), within a window (plus
// the analysis and fleet intervals, and, for the killed agent, its
// rediscovery's backoff), adding those exported meanwhile to seen.
func (ff *fabricFleet) waitClear(t *testing.T, s scenario, seen map[string]bool) {
	limit := ff.window + 15*time.Second
	if strings.Contains(s.name, "killed") {
		limit += 30 * time.Second
	}
	cleared := time.Now()
	for {
		vs, _ := ff.verdicts(nil)
		for _, v := range vs {
			seen[v] = true
		}
		// Cleared: nothing exported, and nothing in the exporter's view
		// waiting for its confirmation (a verdict late to come is this
		// fault's, not the next one's).
		var p []string
		if len(vs) == 0 {
			if p = ff.pending(); len(p) == 0 {
				t.Logf("%s: cleared %v after the fault ended", s.name, time.Since(cleared).Round(time.Second))
				return
			}
		}
		if time.Since(cleared) > limit {
			t.Errorf("%s: verdicts %v (in the view: %v) still stand %v after the fault ended", s.name, vs, p, limit)
			return
		}
		time.Sleep(time.Second)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestFaultMatrix runs the fault matrix on a leaf-spine fabric of
// namespaces, one real goroce probe agent process a host, faults injected
// in the ToRs (nftables) or on the agents (SIGSTOP, SIGKILL), and judges
// the fleet verdict the agents export (goroce_probe_fleet_fault, from
// whichever agent exports it): each fault named within 30 s, nothing else
// named, cleared within a window after it ends. By default: 8 hosts in 3
// groups, three scenarios, with a real Prometheus running deploy/'s rules
// over the fleet (the first fault is one alert naming it). With
// GOROCE_PROBE_MATRIX=full: every scenario, on 3 groups and on 2 (where an
// uplink fault must be reported ambiguous), with precision and recall.
func TestFaultMatrix(t *testing.T) {
	netns.Require(t)
	netns.RequireTool(t, "nft")
	if testing.Short() {
		t.Skip("builds goroce and runs eight agents for minutes")
	}
	full := os.Getenv(matrixEnv) == "full"
	bin := buildGoroce(t)
	layouts := [][]int{{3, 3, 2}}
	if full {
		layouts = append(layouts, []int{4, 4})
	}
	var total score
	for _, groups := range layouts {
		t.Run(fmt.Sprintf("%d groups", len(groups)), func(t *testing.T) {
			window := 10 * time.Second
			if full {
				window = 20 * time.Second
			}
			ff := newFabricFleet(t, bin, groups, window)
			var prom *promServer
			if len(groups) == 3 {
				prom = startFabricPrometheus(t, ff)
			}
			if len(groups) == 3 {
				ff.checkDSCP(t)
			}
			scs := matrixScenarios(ff)
			if !full {
				scs = scs[:3]
			}
			var sc score
			for k, s := range scs {
				ff.run(t, s, &sc)
				if k == 0 && prom != nil {
					fired := prom.waitFired(t, func(t testing.TB, u string) []byte { return ff.get(t, u) }, "link", strings.TrimPrefix(s.want[0], "link "))
					for _, a := range fired {
						if a["alertname"] != "GoroceProbeFault" || a["kind"] != "link" {
							t.Errorf("another alert fired for one fault: %v", a)
						}
					}
					if len(fired) != 1 {
						t.Errorf("%d alerts fired for one fault, want 1", len(fired))
					}
				}
			}
			t.Logf("%d groups: %d of %d faults named; %d verdicts right, %d wrong: precision %.2f, recall %.2f",
				len(groups), sc.named, sc.faults, sc.tp, sc.fp, ratio(sc.tp, sc.tp+sc.fp), ratio(sc.named, sc.faults))
			total.tp, total.fp, total.named, total.faults = total.tp+sc.tp, total.fp+sc.fp, total.named+sc.named, total.faults+sc.faults
		})
	}
	t.Logf("matrix: precision %.2f, recall %.2f (%d faults)", ratio(total.tp, total.tp+total.fp), ratio(total.named, total.faults), total.faults)
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

func (ff *fabricFleet) get(t testing.TB, url string) []byte {
	t.Helper()
	resp, err := ff.client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: %s %v: %s", url, resp.Status, err, b)
	}
	return b
}

// startFabricPrometheus runs Prometheus in the spine's namespace over the
// fabric's agents, with deploy/'s rules (their minutes shortened to 5 s);
// nil when prometheus is missing.
func startFabricPrometheus(t *testing.T, ff *fabricFleet) *promServer {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		testenv.Skip(t, testenv.Prometheus, promSkip)
		return nil
	}
	rules, err := os.ReadFile("../../deploy/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	rules = regexp.MustCompile(`(?m)^(\s+for:\s*)\d+[mh]\s*$`).ReplaceAll(rules, []byte("${1}5s"))
	dir := filepath.Join(ff.dir, "prometheus")
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o644)
	var targets []string
	for _, a := range ff.f.Addrs {
		targets = append(targets, fmt.Sprintf("'%s:9478'", a))
	}
	conf := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yml]\nscrape_configs:\n  - job_name: goroce-probe\n    static_configs:\n      - targets: [%s]\n",
		strings.Join(targets, ", "))
	os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644)
	startProcess(t, ff.f.Spine, filepath.Join(dir, "prometheus.log"), bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:9090")
	p := &promServer{base: "http://127.0.0.1:9090"}
	waitFor(t, 30*time.Second, "prometheus to be ready", func() bool {
		resp, err := ff.client.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	// source_info carries every agent's name and group, as scraped.
	waitFor(t, 20*time.Second, "source_info of every agent", func() bool {
		q := `count(goroce_probe_source_info{source=~"h[0-9]+",source_group=~"g[0-9]+"})`
		b := ff.get(t, p.base+"/api/v1/query?query="+url.QueryEscape(q))
		return bytes.Contains(b, []byte(fmt.Sprintf(`"%d"]`, len(ff.names))))
	})
	return p
}

// checkDSCP counts, in h0's ToR, h0's probes (BTH opcode UD SEND ONLY,
// msg_type 0) by DSCP for 3 s: those to its own group (tor_mesh, the
// default DSCP 26, with ECT(0)) and those to other groups (inter_tor, DSCP
// 10 in the matrix's pinglist) all carry their class's.
func (ff *fabricFleet) checkDSCP(t *testing.T) {
	own := fmt.Sprintf("10.98.%d.0/24", ff.f.Group[0])
	probe := fmt.Sprintf("ip saddr %s udp dport 4791 @th,64,8 0x64 @th,232,8 0x00", ff.f.Addrs[0])
	rules := strings.Join([]string{
		fmt.Sprintf(`%s ip daddr %s counter comment "intra"`, probe, own),
		fmt.Sprintf(`%s ip daddr %s ip dscp 26 ip ecn ect0 counter comment "intra26"`, probe, own),
		fmt.Sprintf(`%s ip daddr != %s counter comment "cross"`, probe, own),
		fmt.Sprintf(`%s ip daddr != %s ip dscp 10 ip ecn ect0 counter comment "cross10"`, probe, own),
	}, "\n\t\t")
	tor := ff.f.ToROf(0)
	undo := fault(t, ff, tor, "dscp", rules)
	time.Sleep(3 * time.Second)
	c, err := ff.f.FaultCounters(tor, "dscp")
	undo()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("h0's probes on the wire: %d to its group, %d of them DSCP 26 ECT(0); %d to others, %d of them DSCP 10 ECT(0)", c["intra"], c["intra26"], c["cross"], c["cross10"])
	if c["intra"] < 20 || c["cross"] < 20 || c["intra26"] != c["intra"] || c["cross10"] != c["cross"] {
		t.Errorf("probes' DSCP on the wire: %v", c)
	}
}

// screenshotEnv names a directory where the matrix leaves a screenshot of
// the page (headless Chromium, served by h1) during each fault.
const screenshotEnv = "GOROCE_PROBE_SCREENSHOTS"

func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimRight(b.String(), "-")
}

// screenshot renders h1's page in headless Chromium, in the spine's
// namespace, to png.
func (ff *fabricFleet) screenshot(t *testing.T, png string) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Logf("no screenshot: chromium not installed")
		return
	}
	args := []string{"netns", "exec", ff.f.Spine.Name, bin, "--headless", "--no-sandbox", "--disable-gpu",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--force-device-scale-factor=1", "--hide-scrollbars",
		"--user-data-dir=" + filepath.Join(ff.dir, "chromium"), "--window-size=1400,1300", "--virtual-time-budget=5000",
		"--screenshot=" + png, fmt.Sprintf("http://%s:9478/", ff.f.Addrs[1])}
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), "HOME="+ff.dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("chromium: %v: %s", err, out)
	}
}
