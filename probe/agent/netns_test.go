//go:build linux

package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/goroce/goroce/internal/testenv"
	"image"
	"image/png"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/probe/agent"
)

// The fleet test's pinglist: two groups of two hosts, every host probing
// the three others (tor_mesh and inter_tor) 20 times a second with 16 flow
// labels. The timeout is 2 s rather than the default 1 s, so that no probe
// is lost to a stall of this shared machine (the lossy path's count must
// equal the router's counter exactly). The SLA's RTT threshold is set far above anything a shared
// 2-core machine shows (scheduling noise reaches milliseconds), so that
// only loss judges a path: the test is about finding the lossy path.
const fleetPinglist = `settings:
  timeout: 2s
  labels: 16
  http_port: 9478
  window: 30s
  sla: {max_loss: 0.01, max_p99_rtt: 1s, min_probes: 20}
classes:
  tor_mesh: {rate: 20}
  inter_tor: {rate: 20}
nodes:
  - {name: h0, addr: %s, group: g1}
  - {name: h1, addr: %s, group: g1}
  - {name: h2, addr: %s, group: g2}
  - {name: h3, addr: %s, group: g2}
`

// fleet is the running topology of TestFleetNetns.
type fleet struct {
	r      *netns.Router
	dir    string
	names  []string
	router *http.Client // dials from the router's namespace
}

// nsClient is an HTTP client whose connections are opened inside ns.
func nsClient(ns *netns.NS) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ns.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
}

func (f *fleet) get(t testing.TB, url string) []byte {
	t.Helper()
	resp, err := f.router.Get(url)
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

func (f *fleet) agentURL(i int, path string) string {
	return "http://" + netip.AddrPortFrom(f.r.HostAddrs[i], 9478).String() + path
}

func (f *fleet) fleetDoc(t testing.TB, i int) agent.FleetDoc {
	t.Helper()
	var d agent.FleetDoc
	if err := json.Unmarshal(f.get(t, f.agentURL(i, agent.FleetPath)), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// metricSum sums the samples of metric name whose labels include want,
// grouped by the value of label by, from agent i's /metrics.
func (f *fleet) metricSum(t testing.TB, i int, name, by string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(f.get(t, f.agentURL(i, "/metrics"))))
	sc.Buffer(nil, 1<<20)
	re := regexp.MustCompile(by + `="([^"]*)"`)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		key := ""
		if m := re.FindStringSubmatch(line); m != nil {
			key = m[1]
		}
		out[key] += v
	}
	return out
}

// startProcess runs args inside ns (ip netns exec, which execs the
// command: the PID is the command's), its output to log, and stops it by
// its PID (SIGTERM, then SIGKILL after 10 s) at the end of the test.
func startProcess(t *testing.T, ns *netns.NS, log string, args ...string) *exec.Cmd {
	t.Helper()
	lf, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, args...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(log))
	if err := cmd.Start(); err != nil {
		lf.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); lf.Close(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(log)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s:\n%s", filepath.Base(log), b)
		}
	})
	return cmd
}

// Four agents in four namespaces routed through a fifth, each the real
// goroce probe agent over the soft provider's udp path. With no fault every
// ordered pair completes its probes with no loss, at a median network RTT
// within rttFactor of a plain UDP ping-pong's between the same namespaces; with
// nftables in the router dropping 20 % of the probes of one ordered path,
// that path's lost count equals the rule's counter, no other path loses
// anything, the fleet analysis names that link alone, a real Prometheus
// with the deploy/ rules fires the loss alert for that pair alone, and the
// page, rendered by headless Chromium, paints that cell red.
//
// The agents run as processes rather than in the test's process: each has
// its own runtime and its sockets (RoCE, HTTP server, HTTP clients for
// discovery and the fleet view) all open in its namespace, as in a real
// fleet, and the test covers the command itself.
func TestFleetNetns(t *testing.T) {
	netns.Require(t)
	netns.RequireTool(t, "nft")
	if testing.Short() {
		t.Skip("builds goroce and runs four agents for about a minute")
	}
	f := &fleet{r: netns.NewRouter(t, netns.RouterOptions{Hosts: 4}), dir: t.TempDir(), names: []string{"h0", "h1", "h2", "h3"}}
	f.router = nsClient(f.r.Router)
	bin := buildGoroce(t)
	cfg := filepath.Join(f.dir, "pinglist.yaml")
	a := f.r.HostAddrs
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(fleetPinglist, a[0], a[1], a[2], a[3])), 0o644); err != nil {
		t.Fatal(err)
	}
	// GOMAXPROCS=1: four agents, four echo processes and the test share
	// two cores. With the default (2 here) one agent of the four at times
	// showed a median network RTT three times its ping-pong's on every
	// path it probed, for the whole run (its receive path woken across
	// threads), while with 1 every pair stayed within 1.5 times; an agent
	// uses little CPU, and one P per agent is what a host running four of
	// them would give each. It is not the agent's doing: goroce probe once
	// against goroce probe responder between two of these namespaces
	// measured a median network RTT of 510 µs with GOMAXPROCS=2 and 380 µs
	// with 1.
	for i, h := range f.r.Hosts {
		startProcess(t, h, filepath.Join(f.dir, f.names[i]+".log"), "env", "GOMAXPROCS=1", bin, "probe", "agent", "--config", cfg,
			"--addr", a[i].String(), "--path", "udp", "--jsonl", filepath.Join(f.dir, f.names[i]+".jsonl"))
	}

	// Every agent finds its three targets and every path completes probes.
	waitFor(t, 30*time.Second, "every path to complete 20 probes", func() bool {
		resp, err := f.router.Get(f.agentURL(0, agent.FleetPath))
		if err != nil {
			return false
		}
		var d agent.FleetDoc
		err = json.NewDecoder(resp.Body).Decode(&d)
		resp.Body.Close()
		if err != nil || len(d.Paths) != 12 {
			return false
		}
		for _, p := range d.Paths {
			if p.Completed < 20 {
				return false
			}
		}
		return true
	})

	prom := startPrometheus(t, f)

	t.Run("clean", func(t *testing.T) { f.clean(t) })
	if t.Failed() {
		return
	}
	counted := f.lossy(t)
	if t.Failed() {
		return
	}
	// The page first: its data is the agents' 30 s window, which the
	// lossy probes leave 30 s after the rule went; Prometheus's loss rule
	// looks back a minute.
	t.Run("page", func(t *testing.T) { f.page(t, counted) })
	t.Run("prometheus", func(t *testing.T) {
		if prom == nil {
			testenv.Skip(t, testenv.Prometheus, promSkip)
		}
		prom.checkAlerts(t, f)
	})
}

// echoEnv names the address TestUDPEchoHelper serves when the test binary
// runs as the echo process of the ping-pong baseline.
const echoEnv = "GOROCE_TEST_UDP_ECHO"

// TestUDPEchoHelper is not a test: run by TestFleetNetns as a process of
// its own inside a host's namespace (the test binary, with echoEnv set), it
// echoes UDP datagrams at that address until killed. The baseline's echo
// runs in a process of its own, as the probes' responder does: in the
// test's process a ping-pong would never wait for another process to wake
// up (the client's thread finds the server's datagram ready in its own
// netpoller), and would not measure what a probe goes through.
func TestUDPEchoHelper(t *testing.T) {
	a := os.Getenv(echoEnv)
	if a == "" {
		t.Skip("the ping-pong baseline's echo process (run by TestFleetNetns)")
	}
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(a)))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	buf := make([]byte, 2048)
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatal(err)
		}
		c.WriteToUDPAddrPort(buf[:n], from)
	}
}

// startEcho runs the echo process on host j's address, port echoPort.
func (f *fleet) startEcho(t *testing.T, j int) {
	t.Helper()
	log := filepath.Join(f.dir, fmt.Sprintf("echo-%s.log", f.names[j]))
	lf, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", f.r.Hosts[j].Name, os.Args[0], "-test.run=^TestUDPEchoHelper$", "-test.v")
	cmd.Env = append(os.Environ(), echoEnv+"="+netip.AddrPortFrom(f.r.HostAddrs[j], echoPort).String(), "GOMAXPROCS=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); lf.Close() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("echo process on %s ended", f.names[j])
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("echo process on %s not ready", f.names[j])
	}
}

const echoPort = 7000

// pingPong measures n UDP round trips from host i to the echo process of
// host j, paced every interval like the probes (a warm back-to-back loop
// would be faster than any paced traffic), and returns them.
func (f *fleet) pingPong(t testing.TB, i, j, n int, interval time.Duration) []time.Duration {
	var cli *net.UDPConn
	if err := f.r.Hosts[i].Do(func() error {
		var err error
		cli, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: f.r.HostAddrs[j].AsSlice(), Port: echoPort})
		return err
	}); err != nil {
		t.Error(err)
		return nil
	}
	defer cli.Close()
	msg := make([]byte, 40) // the probe's payload size
	buf := make([]byte, 64)
	var rtts []time.Duration
	for k := 0; k < n; k++ {
		time.Sleep(interval)
		t0 := time.Now()
		if _, err := cli.Write(msg); err != nil {
			t.Error(err)
			return rtts
		}
		cli.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := cli.Read(buf); err != nil {
			continue // lost: not a sample
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// jsonlRTTs reads the network RTTs of host i's completed probes from its
// probe log, per destination, and every outcome count.
func (f *fleet) jsonlRTTs(t testing.TB, i int) (map[string][]time.Duration, map[string]map[string]int) {
	rtts, outcomes, _ := f.jsonlDetail(t, i)
	return rtts, outcomes
}

// jsonlDetail is jsonlRTTs with, per destination, the medians of the
// prober's post-to-send-completion time (T2-T1), the responder's delay
// (T4-T3) and the prober's receive-to-processing time (T6-T5).
//
// The namespaces share the host's monotonic clock (verbs.Now), so T3-T2 (the
// way out: the prober's send to the responder's receive completion) and
// T5-T4 (the way back) are meaningful here too, as they are not between
// two machines.
func (f *fleet) jsonlDetail(t testing.TB, i int) (map[string][]time.Duration, map[string]map[string]int, map[string][5]time.Duration) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, f.names[i]+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	rtts := map[string][]time.Duration{}
	parts := map[string][][5]time.Duration{}
	outcomes := map[string]map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var l struct {
			Dst, Outcome           string
			RTT                    int64 `json:"rtt_ns"`
			T1, T2, T3, T4, T5, T6 int64
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			continue // the line being written
		}
		if outcomes[l.Dst] == nil {
			outcomes[l.Dst] = map[string]int{}
		}
		outcomes[l.Dst][l.Outcome]++
		if l.Outcome == "ok" {
			rtts[l.Dst] = append(rtts[l.Dst], time.Duration(l.RTT))
			parts[l.Dst] = append(parts[l.Dst], [5]time.Duration{time.Duration(l.T2 - l.T1), time.Duration(l.T4 - l.T3), time.Duration(l.T6 - l.T5),
				time.Duration(l.T3 - l.T2), time.Duration(l.T5 - l.T4)})
		}
	}
	med := map[string][5]time.Duration{}
	for dst, ps := range parts {
		var m [5]time.Duration
		for k := range m {
			var col []time.Duration
			for _, p := range ps {
				col = append(col, p[k])
			}
			m[k] = median(col)
		}
		med[dst] = m
	}
	return rtts, outcomes, med
}

// rttFactor is how much larger than the UDP ping-pong's median a probe's
// median network RTT may be: 1, as the issue asks. On the udp packet path
// the soft provider stamps a receive completion with the kernel's receive
// time of its packet (SO_TIMESTAMPNS), so T3 and T5 leave out the time the
// receiving driver took to wake and read it, which the application-level
// ping-pong pays on both sides; T2 and T4 are taken when the engine builds
// the packet, just before its sendmmsg. Before those timestamps the probes
// measured 0.7 to 2 times the ping-pong here (the soft receive path costs
// about 80 µs per side on an idle host, more under contention).
const rttFactor = 1

// clean: no fault. Every ordered pair completes its probes with no loss,
// the analysis names nothing, and each pair's median network RTT is no
// larger than rttFactor times the median of a UDP ping-pong between the
// same namespaces (an echo process in the responder's namespace), measured
// at the same time and at a similar pace.
func (f *fleet) clean(t *testing.T) {
	type pp struct {
		i, j int
		rtts []time.Duration
	}
	var mu sync.Mutex
	var pps []pp
	for j := range 4 {
		f.startEcho(t, j)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 4 {
		for j := range 4 {
			if i == j {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := f.pingPong(t, i, j, 200, 20*time.Millisecond)
				mu.Lock()
				pps = append(pps, pp{i, j, r})
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	t.Logf("ping-pong: 12 pairs x 200 round trips in %v", time.Since(start).Round(time.Millisecond))
	time.Sleep(2500 * time.Millisecond) // the last probes' timeout

	d := f.fleetDoc(t, 1)
	if len(d.Paths) != 12 || len(d.Faulty) != 0 {
		t.Errorf("fleet: %d paths, faulty %v", len(d.Paths), d.Faulty)
	}
	for _, p := range d.Paths {
		if p.Lost != 0 || p.Completed < 100 || p.Degraded || p.Errors != 0 {
			t.Errorf("path %s->%s: %d completed, %d lost, %d errors, degraded %v", p.Src, p.Dst, p.Completed, p.Lost, p.Errors, p.Degraded)
		}
	}
	for i := range 4 {
		lost := f.metricSum(t, i, "goroce_probe_lost_total", "target")
		sent := f.metricSum(t, i, "goroce_probe_sent_total", "target")
		for _, dst := range f.names {
			if dst == f.names[i] {
				continue
			}
			if lost[dst] != 0 || sent[dst] < 100 {
				t.Errorf("%s->%s: /metrics sent %v lost %v", f.names[i], dst, sent[dst], lost[dst])
			}
		}
	}
	probeRTT := map[[2]int][]time.Duration{}
	parts := map[[2]int][5]time.Duration{}
	for i := range 4 {
		rtts, outcomes, med := f.jsonlDetail(t, i)
		for j, dst := range f.names {
			if i == j {
				continue
			}
			if outcomes[dst]["lost"] != 0 || outcomes[dst]["error"] != 0 || outcomes[dst]["ok"] < 100 {
				t.Errorf("%s->%s: probe log outcomes %v", f.names[i], dst, outcomes[dst])
			}
			probeRTT[[2]int{i, j}] = rtts[dst]
			parts[[2]int{i, j}] = med[dst]
		}
	}
	for _, p := range pps {
		pr := probeRTT[[2]int{p.i, p.j}]
		if len(p.rtts) < 150 || len(pr) < 100 {
			t.Errorf("%s->%s: %d ping-pong samples, %d probe RTTs", f.names[p.i], f.names[p.j], len(p.rtts), len(pr))
			continue
		}
		pm, um := median(pr), median(p.rtts)
		pt := parts[[2]int{p.i, p.j}]
		t.Logf("%s->%s: probe network RTT p50 %v (%d probes), UDP ping-pong p50 %v (%d); medians T2-T1 %v, T3-T2 %v, T4-T3 %v, T5-T4 %v, T6-T5 %v",
			f.names[p.i], f.names[p.j], pm, len(pr), um, len(p.rtts), pt[0], pt[3], pt[1], pt[4], pt[2])
		if float64(pm) > rttFactor*float64(um) {
			t.Errorf("%s->%s: probe network RTT p50 %v > %v x UDP ping-pong p50 %v", f.names[p.i], f.names[p.j], pm, rttFactor, um)
		}
	}
}

// lossy: the router drops 20 % of the probes (msg_type 0) from h0 to h1,
// counting them; then the rule goes, and after the timeout the path's
// lost count equals the counter exactly, other paths lose nothing, and the
// analysis names the link h0->h1 alone. It returns the counter.
func (f *fleet) lossy(t *testing.T) (dropped uint64) {
	t.Helper()
	rt := f.r.Router
	// UDP payload: BTH (12) + DETH (8) + the probe, whose byte 1 is
	// msg_type (0 probe, 1 ACK); @th counts from the UDP header (8), so
	// the BTH opcode is at bit 64 (0x64: UD SEND ONLY) and msg_type at
	// bit (8+12+8+1)*8 = 232.
	rule := fmt.Sprintf(`table inet goroce_fault {
	counter lossy { }
	chain forward {
		type filter hook forward priority 0; policy accept;
		ip saddr %s ip daddr %s udp dport 4791 @th,64,8 0x64 @th,232,8 0x00 numgen random mod 100 < 20 counter name "lossy" drop
	}
}
`, f.r.HostAddrs[0], f.r.HostAddrs[1])
	rf := filepath.Join(f.dir, "fault.nft")
	os.WriteFile(rf, []byte(rule), 0o644)
	if out, err := rt.Exec("nft", "-f", rf); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	t.Cleanup(func() { rt.Exec("nft", "delete", "table", "inet", "goroce_fault") })
	time.Sleep(10 * time.Second)
	if out, err := rt.Exec("nft", "flush", "chain", "inet", "goroce_fault", "forward"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	out, err := rt.Exec("nft", "list", "counter", "inet", "goroce_fault", "lossy")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`packets (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no counter in %s", out)
	}
	dropped, _ = strconv.ParseUint(string(m[1]), 10, 64)
	if dropped < 10 {
		t.Fatalf("the rule dropped only %d probes in 10 s", dropped)
	}
	time.Sleep(2500 * time.Millisecond) // the timeout (2 s) of the last dropped probe

	for i := range 4 {
		lost := f.metricSum(t, i, "goroce_probe_lost_total", "target")
		for j, dst := range f.names {
			if i == j {
				continue
			}
			want := 0.0
			if i == 0 && j == 1 {
				want = float64(dropped)
			}
			if lost[dst] != want {
				t.Errorf("%s->%s: lost %v, want %v (the rule dropped %d)", f.names[i], dst, lost[dst], want, dropped)
			}
		}
	}
	d := f.fleetDoc(t, 3)
	if len(d.Faulty) != 1 || d.Faulty[0].Kind != "link" || d.Faulty[0].Name != "h0->h1" {
		t.Errorf("faulty components %+v, want link h0->h1 alone", d.Faulty)
	}
	for _, p := range d.Paths {
		lossy := p.Src == "h0" && p.Dst == "h1"
		if p.Degraded != lossy || (p.Lost != 0) != lossy {
			t.Errorf("path %s->%s: %d of %d lost, degraded %v", p.Src, p.Dst, p.Lost, p.Sent, p.Degraded)
		}
	}
	t.Logf("the router dropped %d probes h0->h1; h0 counted %d lost", dropped, dropped)
	return dropped
}

// ---- Prometheus ----

const promSkip = "prometheus is not installed (Debian's prometheus package), or deploy/prometheus/rules.yml is missing"

type promServer struct {
	base string
}

// startPrometheus runs Debian's prometheus in the router's namespace,
// scraping the four agents every second with deploy/prometheus/rules.yml,
// whose `for:` durations (minutes, for a real fleet) are shortened to 5 s
// in a copy (the test cannot wait minutes). It returns nil when prometheus
// or the rules are missing.
func startPrometheus(t *testing.T, f *fleet) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return nil
	}
	rules, err := os.ReadFile("../../deploy/prometheus/rules.yml")
	if err != nil {
		return nil
	}
	rules = regexp.MustCompile(`(?m)^(\s+for:\s*)\d+[mh]\s*$`).ReplaceAll(rules, []byte("${1}5s"))
	dir := filepath.Join(f.dir, "prometheus")
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o644)
	var targets []string
	for _, a := range f.r.HostAddrs {
		targets = append(targets, fmt.Sprintf("'%s:9478'", a))
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: goroce-probe
    static_configs:
      - targets: [%s]
    relabel_configs:
      - source_labels: [__address__]
        regex: '(.+):\d+'
        target_label: instance
`, strings.Join(targets, ", "))
	os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644)
	startProcess(t, f.r.Router, filepath.Join(dir, "prometheus.log"), bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:9090")
	p := &promServer{base: "http://127.0.0.1:9090"}
	waitFor(t, 30*time.Second, "prometheus to be ready", func() bool {
		resp, err := f.router.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

// checkAlerts checks that one alert fired for the lossy link, and no
// other: GoroceProbeFault naming the link h0->h1 (the fleet verdict),
// GoroceProbePairLoss for no pair (the verdict explains the loss before the
// pair alert's 30 s). Alerts resolved by now count: it reads what fired
// over the last 10 minutes from Prometheus's ALERTS series.
// (GoroceProbeHostRTTHigh, p99 over 5 ms, may fire for any host: this
// shared machine's stalls reach tens of milliseconds.)
func (p *promServer) checkAlerts(t *testing.T, f *fleet) {
	fired := p.waitFired(t, f.get, "link", "h0->h1")
	for _, a := range fired {
		if a["alertname"] != "GoroceProbeFault" || a["kind"] != "link" || a["name"] != "h0->h1" {
			t.Errorf("another alert fired: %v", a)
		}
	}
}

// firedAlerts returns the label sets of the alerts that fired in the last
// 10 minutes, but GoroceProbeHostRTTHigh.
func (p *promServer) firedAlerts(t *testing.T, get func(testing.TB, string) []byte) []map[string]string {
	q := url.QueryEscape(`max_over_time(ALERTS{alertstate="firing",alertname!="GoroceProbeHostRTTHigh"}[10m])`)
	var doc struct {
		Status string
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		}
	}
	if err := json.Unmarshal(get(t, p.base+"/api/v1/query?query="+q), &doc); err != nil || doc.Status != "success" {
		t.Fatalf("/api/v1/query: %v %s", err, doc.Status)
	}
	var out []map[string]string
	for _, r := range doc.Data.Result {
		delete(r.Metric, "alertstate")
		out = append(out, r.Metric)
	}
	return out
}

// waitFired waits up to 45 s for GoroceProbeFault naming kind name to have
// fired, and returns every alert that fired.
func (p *promServer) waitFired(t *testing.T, get func(testing.TB, string) []byte, kind, name string) []map[string]string {
	t.Helper()
	var fired []map[string]string
	waitFor(t, 45*time.Second, "GoroceProbeFault to fire for "+kind+" "+name, func() bool {
		fired = p.firedAlerts(t, get)
		for _, a := range fired {
			if a["alertname"] == "GoroceProbeFault" && a["kind"] == kind && a["name"] == name {
				return true
			}
		}
		return false
	})
	for _, a := range fired {
		t.Logf("fired: %v", a)
	}
	return fired
}

// ---- The page in headless Chromium ----

// chromium runs headless Chromium in the router's namespace on url with
// the extra flags and returns its standard output.
func (f *fleet) chromium(t *testing.T, bin string, extra ...string) []byte {
	t.Helper()
	args := []string{"netns", "exec", f.r.Router.Name, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--force-device-scale-factor=1", "--hide-scrollbars",
		"--user-data-dir=" + filepath.Join(f.dir, "chromium"), "--window-size=1400,1000", "--virtual-time-budget=5000"}
	args = append(args, extra...)
	args = append(args, f.agentURL(0, "/"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Env = append(os.Environ(), "HOME="+f.dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v: %s", err, stderr.Bytes())
	}
	return out
}

// page renders the page served by h0 with the lossy run's data in headless
// Chromium: a DOM dump gives each host cell's position (data-rect, written
// by the page), and the screenshot must show the h0 -> h1 cell red and the
// other pairs' cells green.
func (f *fleet) page(t *testing.T, dropped uint64) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Skip(t, testenv.Chromium, "chromium is not installed (Debian's chromium package)")
	}
	dom := f.chromium(t, bin, "--dump-dom")
	shot := filepath.Join(f.dir, "page.png")
	f.chromium(t, bin, "--screenshot="+shot)
	if dst := os.Getenv("GOROCE_PAGE_PNG"); dst != "" { // a copy of the screenshot to look at
		b, _ := os.ReadFile(shot)
		os.WriteFile(dst, b, 0o644)
	}
	if !bytes.Contains(dom, []byte("h0-&gt;h1")) && !bytes.Contains(dom, []byte("h0->h1")) {
		t.Errorf("the page does not name the faulty link h0->h1")
	}
	rects := map[[2]string]image.Rectangle{}
	re := regexp.MustCompile(`<td class="cell ([a-z ]+)" data-src="(h\d)" data-dst="(h\d)"[^>]*data-rect="(\d+),(\d+),(\d+),(\d+)"`)
	for _, m := range re.FindAllSubmatch(dom, -1) {
		n := func(i int) int { v, _ := strconv.Atoi(string(m[i])); return v }
		x, y, w, h := n(4), n(5), n(6), n(7)
		rects[[2]string{string(m[2]), string(m[3])}] = image.Rect(x, y, x+w, y+h)
	}
	if len(rects) != 12 {
		t.Fatalf("found %d host cells with positions in the DOM:\n%s", len(rects), dom)
	}
	fh, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(fh)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The lossy cell is red; the others green, or yellow if a stall of
	// this machine put their p99 over half the (generous) threshold, but
	// never red or grey.
	for k, r := range rects {
		c := dominant(img, r)
		if k == [2]string{"h0", "h1"} {
			if c != "red" {
				t.Errorf("cell h0->h1 at %v is %s in the screenshot, want red", r, c)
			}
			continue
		}
		if c != "green" && c != "yellow" {
			t.Errorf("cell %s->%s at %v is %s in the screenshot, want green", k[0], k[1], r, c)
		}
	}
}

// dominant names the colour most pixels of r have (inset 4 px, away from
// the border and outline): "red", "green", "yellow", "grey" or "other".
func dominant(img image.Image, r image.Rectangle) string {
	r = r.Inset(4).Intersect(img.Bounds())
	count := map[string]int{}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c, g, b, _ := img.At(x, y).RGBA()
			R, G, B := float64(c>>8), float64(g>>8), float64(b>>8)
			switch {
			case near(R, G, B, 0xd7, 0x30, 0x27):
				count["red"]++
			case near(R, G, B, 0x1a, 0x98, 0x50):
				count["green"]++
			case near(R, G, B, 0xf4, 0xa9, 0x3b):
				count["yellow"]++
			case near(R, G, B, 0xd9, 0xdd, 0xe3):
				count["grey"]++
			default:
				count["other"]++
			}
		}
	}
	best, n := "other", 0
	for k, v := range count {
		if v > n {
			best, n = k, v
		}
	}
	return best
}

func near(r, g, b, R, G, B float64) bool {
	return math.Abs(r-R) < 24 && math.Abs(g-G) < 24 && math.Abs(b-B) < 24
}
