//go:build linux

package agent_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/probe"
	pl "github.com/goroce/goroce/probe/pinglist"
	"github.com/goroce/goroce/verbs"
)

// cpuAddr is node n's address in BenchmarkAgentCPU1000's fleet.
func cpuAddr(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 46, byte((n + 1) >> 8), byte(n + 1)})
}

// procCPU is the user and system CPU time process pid has used.
func procCPU(tb testing.TB, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command's closing parenthesis: state is field 3,
	// utime 14, stime 15, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// BenchmarkAgentCPU1000 is the agent's CPU at the baseline
// parameters: one `goroce probe agent` process, a node of a fleet of
// 1,000 in 25 groups of 40 with the default classes (its 39 group mates
// and 16 nodes of other groups, 55 targets at 10 probes/s: 550 probes/s
// sent), answering 550 probes/s from its peers, over a fixed run of
// GOROCE_PROBE_CPU_SECONDS (default 30) after 10 s of warm-up. Its targets
// are answered by one responder in the benchmark's process (their
// /probe/v1/self all name it), which also probes the agent; node00000
// answers as the fleet's exporter, so the agent is one of the 999 that
// are not (the exporter's fleet view is BenchmarkFleet1000's). The agent's
// CPU (user + system, from /proc) is reported as a percentage of one core
// and per probe (sent or answered), over two runs. With
// GOROCE_PROBE_CPU_BASELINE set to another goroce binary (an earlier
// commit's), its agent runs too, in alternating blocks, and cpu/baseline
// is the ratio. Linux, loopback; run with -benchtime 1x.
func BenchmarkAgentCPU1000(b *testing.B) {
	secs := 30
	if s, err := strconv.Atoi(os.Getenv("GOROCE_PROBE_CPU_SECONDS")); err == nil && s > 0 {
		secs = s
	}
	bin := buildGoroce(b)
	const self = 40 // node00040, the first of group g001
	var list strings.Builder
	for n := 0; n < 1000; n++ {
		fmt.Fprintf(&list, "  - {name: node%05d, addr: %s, group: g%03d}\n", n, cpuAddr(n), n/40)
	}
	// The responder standing in for every target, and the prober that
	// probes the agent at 550/s.
	rdev := softContext(b, netip.AddrFrom4([4]byte{127, 46, 250, 1}))
	resp, err := probe.NewResponder(rdev, probe.ResponderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Close()
	ln0, err := net.Listen("tcp", netip.AddrPortFrom(cpuAddr(0), 0).String())
	if err != nil {
		b.Skipf("loopback 127.46.0.0/16: %v", err)
	}
	port := ln0.Addr().(*net.TCPAddr).Port
	cfg := fmt.Sprintf("settings:\n  http_port: %d\nnodes:\n%s", port, list.String())
	l, err := pl.Parse([]byte(cfg))
	if err != nil {
		b.Fatal(err)
	}
	me, _ := l.Self(cpuAddr(self))
	targets := l.Targets(me)
	names := map[netip.Addr]string{cpuAddr(0): "node00000"}
	lns := []net.Listener{ln0}
	for _, t := range targets {
		names[t.Node.Addr] = t.Node.Name
		if t.Node.Addr == cpuAddr(0) {
			continue
		}
		ln, err := net.Listen("tcp", netip.AddrPortFrom(t.Node.Addr, uint16(port)).String())
		if err != nil {
			b.Fatal(err)
		}
		lns = append(lns, ln)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		ap, _ := netip.ParseAddrPort(la.String())
		if r.URL.Path != probe.SelfPath || names[ap.Addr()] == "" {
			http.NotFound(w, r)
			return
		}
		s := probe.Self{Name: names[ap.Addr()], GID: resp.GID().Addr().String(), QPNs: resp.QPNs(), QKey: probe.QKey}
		probe.SelfHandler(func() probe.Self { return s }).ServeHTTP(w, r)
	})}
	for _, ln := range lns {
		go srv.Serve(ln)
	}
	defer srv.Close()
	path := filepath.Join(b.TempDir(), "pinglist.yaml")
	write(b, path, cfg)
	pdev := softContext(b, netip.AddrFrom4([4]byte{127, 46, 250, 2}))
	run := func(bin string) cpuRun {
		return agentCPU(b, pdev, bin, path, netip.AddrPortFrom(cpuAddr(self), uint16(port)), time.Duration(secs)*time.Second)
	}
	baseline := os.Getenv("GOROCE_PROBE_CPU_BASELINE")
	b.ResetTimer()
	var now, before cpuRun
	for k := 0; k < 2; k++ { // alternating blocks, when there is a baseline
		now = now.add(run(bin))
		if baseline != "" {
			before = before.add(run(baseline))
		}
	}
	b.StopTimer()
	now.report(b, "")
	b.ReportMetric(float64(len(targets)), "targets")
	if baseline != "" {
		before.report(b, "baseline-")
		b.ReportMetric(now.cpu.Seconds()/now.elapsed.Seconds()/(before.cpu.Seconds()/before.elapsed.Seconds()), "cpu/baseline")
	}
}

// cpuRun is what agentCPU measured.
type cpuRun struct {
	cpu, elapsed         time.Duration
	sent, answered, lost float64
}

func (r cpuRun) add(o cpuRun) cpuRun {
	return cpuRun{r.cpu + o.cpu, r.elapsed + o.elapsed, r.sent + o.sent, r.answered + o.answered, r.lost + o.lost}
}

func (r cpuRun) report(b *testing.B, prefix string) {
	el := r.elapsed.Seconds()
	b.ReportMetric(100*r.cpu.Seconds()/el, prefix+"cpu-%")
	b.ReportMetric(r.cpu.Seconds()*1e6/(r.sent+r.answered), prefix+"cpu-µs/probe")
	b.ReportMetric(r.sent/el, prefix+"sent/s")
	b.ReportMetric(r.answered/el, prefix+"answered/s")
	b.ReportMetric(r.lost, prefix+"lost")
}

// agentCPU runs bin's agent on the pinglist at path (listening on
// listen), probes it at 550/s from this process, and measures its CPU
// over d after 10 s of warm-up.
func agentCPU(b *testing.B, pdev verbs.Context, bin, path string, listen netip.AddrPort, d time.Duration) cpuRun {
	cmd := exec.Command(bin, "probe", "agent", "--config", path, "--addr", listen.Addr().String(),
		"--listen", listen.String(), "--path", "udp", "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	base := "http://" + listen.String()
	var s probe.Self
	var err error
	waitFor(b, 20*time.Second, "the agent's responder", func() bool {
		s, err = probe.FetchSelf(context.Background(), nil, base)
		return err == nil
	})
	peer, _ := s.Peer()
	var answered, lost atomic.Uint64
	prober, err := probe.NewProber(pdev, probe.ProberOptions{OnResult: func(r probe.Result) {
		if r.Outcome == probe.OutcomeOK {
			answered.Add(1)
		} else {
			lost.Add(1)
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer prober.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // 550 probes/s: 11 every 20 ms, over 16 flow labels
		labels := probe.FlowLabels(7, 16)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for n := 0; ; {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for range 11 {
				prober.Probe(peer, labels[n%len(labels)], "")
				n++
			}
		}
	}()
	sent := func() float64 { return scrapeCounter(b, base+"/metrics", "goroce_probe_sent_total") }
	time.Sleep(10 * time.Second)
	s0, a0, l0, c0, t0 := sent(), answered.Load(), lost.Load(), procCPU(b, cmd.Process.Pid), time.Now()
	time.Sleep(d)
	s1, a1, l1, c1, t1 := sent(), answered.Load(), lost.Load(), procCPU(b, cmd.Process.Pid), time.Now()
	return cpuRun{cpu: c1 - c0, elapsed: t1.Sub(t0), sent: s1 - s0, answered: float64(a1 - a0), lost: float64(l1 - l0)}
}

// scrapeCounter sums the samples of counter name in the text exposition
// at url.
func scrapeCounter(tb testing.TB, url, name string) float64 {
	r, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}
