package agent_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/agent"
)

// bigPinglist is a pinglist of groups x perGroup nodes in 10.x.y.z (only
// node 0, the agent, is on loopback).
func bigPinglist(port, groups, perGroup int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "settings:\n  http_port: %d\n  max_pairs: 100000\nclasses:\n  tor_mesh: {max_rate: 1000000}\n  inter_tor: {max_rate: 1000000}\nnodes:\n", port)
	for g := 0; g < groups; g++ {
		for i := 0; i < perGroup; i++ {
			n := g*perGroup + i
			a := netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}).String()
			if n == 0 {
				a = addr(0).String()
			}
			fmt.Fprintf(&b, "  - {name: node%05d, addr: %s, group: g%03d}\n", n, a, g)
		}
	}
	return b.String()
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkAgentMemory10k: the heap one agent of a 10,000-node pinglist
// holds once running, with the analysis window, the history of every
// path and the metrics filled by 30 s of results for each target (none of
// the other nodes answers, so discovery keeps retrying them): 100 groups
// of 100 (115 targets: its group and 16 others), and the worst case of one
// group of 10,000 (9,999 targets; the window tracks at most 4,096 paths).
// MiB/new is the heap after New (the parsed list, the targets, the prober's
// and responder's buffers, the registry); KiB/target what running and the
// results add per target (window, history, metric series, discovery).
func BenchmarkAgentMemory10k(b *testing.B) {
	for _, shape := range []struct {
		name             string
		groups, perGroup int
	}{{"groups=100x100", 100, 100}, {"groups=1x10000", 1, 10000}} {
		b.Run(shape.name, func(b *testing.B) {
			dir := b.TempDir()
			path := filepath.Join(dir, "pinglist.yaml")
			port := freePort(b, 1)
			write(b, path, bigPinglist(port, shape.groups, shape.perGroup))
			var perAgent, fixed, targets float64
			for range b.N {
				dev := softContext(b, addr(0))
				base := heapInUse()
				ln, err := net.Listen("tcp", netip.AddrPortFrom(addr(0), uint16(port)).String())
				if err != nil {
					b.Fatal(err)
				}
				a, err := agent.New(agent.Options{Device: dev, Pinglist: path, Self: addr(0), Listener: ln,
					Registry: prometheus.NewRegistry(), FetchTimeout: 100 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				fixed = float64(heapInUse() - base)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- a.Run(ctx) }()
				ts := a.Targets()
				now := time.Now()
				for s := 0; s < 30; s++ { // a result per target per second of the window
					for _, t := range ts {
						a.Feed(probe.Result{Peer: probe.Peer{Name: t.Node.Name, Group: t.Node.Group, Addr: t.Node.Addr},
							Class: t.Class, FlowLabel: uint32(s + 1), Sent: now.Add(time.Duration(s-30) * time.Second),
							NetworkRTT: time.Duration(100+s) * time.Microsecond, Outcome: probe.OutcomeOK})
					}
				}
				time.Sleep(3 * time.Second) // discovery, analysis
				perAgent = float64(heapInUse() - base)
				targets = float64(len(ts))
				cancel()
				<-done
			}
			b.ReportMetric(perAgent/(1<<20), "MiB/agent")
			b.ReportMetric(fixed/(1<<20), "MiB/new")
			b.ReportMetric((perAgent-fixed)/targets/1024, "KiB/target")
			b.ReportMetric(targets, "targets")
		})
	}
}

// BenchmarkAgentProbes: the probes per second two agents on loopback
// sustain probing each other, each at up to rate probes/s, and the CPU
// time (user + system, of the whole process: both agents' probers,
// responders and soft devices) per completed probe.
func BenchmarkAgentProbes(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "pinglist.yaml")
	port := freePort(b, 2)
	const rate = 20000
	cfg := strings.Replace(pinglist(port, "a/0/g1", "b/1/g1"), "tor_mesh: {rate: 20}", fmt.Sprintf("tor_mesh: {rate: %d, max_rate: %d}", rate, rate), 1)
	write(b, path, cfg)
	rs := []*running{start(b, path, 0, port), start(b, path, 1, port)}
	completed := func() uint64 {
		var n uint64
		for _, r := range rs {
			n += uint64(counter(b, r.reg, "goroce_probe_completed_total", nil))
		}
		return n
	}
	waitFor(b, 10*time.Second, "probes", func() bool { return completed() > 1000 })
	b.ResetTimer()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	c0, t0 := completed(), time.Now()
	time.Sleep(time.Duration(b.N) * 100 * time.Millisecond)
	c1, t1 := completed(), time.Now()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	b.StopTimer()
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) - syscall.TimevalToNsec(ru0.Utime) + syscall.TimevalToNsec(ru1.Stime) - syscall.TimevalToNsec(ru0.Stime))
	n := float64(c1 - c0)
	b.ReportMetric(n/t1.Sub(t0).Seconds(), "probes/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/n/1000, "cpu-µs/probe")
	var lost float64
	for _, r := range rs {
		lost += counter(b, r.reg, "goroce_probe_lost_total", nil)
	}
	b.ReportMetric(lost, "lost")
}
