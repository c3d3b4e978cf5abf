package probe_test

import (
	"net"
	"net/netip"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/probe"
)

// cpuTime returns the process's user plus system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProbeRate: how many probes per second one prober and responder
// pair (soft devices over UDP on loopback, in this one process) sustains
// with up to 64 probes in flight, and the CPU time per probe of both sides
// together (getrusage user+sys over the probes).
func BenchmarkProbeRate(b *testing.B) {
	_, ca := softContext(b, addrA)
	_, cb := softContext(b, addrB)
	r, err := probe.NewResponder(cb, probe.ResponderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	done := make(chan probe.Outcome, 1024)
	p, err := probe.NewProber(ca, probe.ProberOptions{OnResult: func(x probe.Result) { done <- x.Outcome }})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	peer := peerOf(r, 0)
	labels := probe.FlowLabels(1, 16)
	const window = 64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, t0 := cpuTime(b), time.Now()
	inflight, lost := 0, 0
	for i := 0; i < b.N; i++ {
		for inflight >= window {
			if <-done != probe.OutcomeOK {
				lost++
			}
			inflight--
		}
		if err := p.Probe(peer, labels[i%len(labels)], ""); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for ; inflight > 0; inflight-- {
		if <-done != probe.OutcomeOK {
			lost++
		}
	}
	el, cpu := time.Since(t0), cpuTime(b)-cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "probes/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/probe")
	b.ReportMetric(float64(lost), "lost")
}

// BenchmarkProbeRoundTrip: one probe at a time, from Probe to its result
// (both ACKs back), beside a plain UDP ping-pong of a 40-byte datagram over
// loopback sockets measured in the same run, in alternating blocks; reports
// the medians (and the probes' median network RTT) and the ratio of the
// round trips.
func BenchmarkProbeRoundTrip(b *testing.B) {
	_, ca := softContext(b, addrA)
	_, cb := softContext(b, addrB)
	r, err := probe.NewResponder(cb, probe.ResponderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	done := make(chan probe.Result, 16)
	p, err := probe.NewProber(ca, probe.ProberOptions{OnResult: func(x probe.Result) { done <- x }})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	peer := peerOf(r, 0)

	// The baseline: a UDP echo on loopback, each side its own goroutine.
	srv, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.44.6"), 0)))
	if err != nil {
		b.Skip(err)
	}
	defer srv.Close()
	cli, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.44.5"), 0)), srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		b.Skip(err)
	}
	defer cli.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, a, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			srv.WriteToUDPAddrPort(buf[:n], a)
		}
	}()
	msg, in := make([]byte, probe.PayloadLen), make([]byte, 64)
	ping := func() time.Duration {
		t0 := time.Now()
		if _, err := cli.Write(msg); err != nil {
			b.Fatal(err)
		}
		cli.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := cli.Read(in); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	probeOnce := func() (time.Duration, probe.Result) {
		t0 := time.Now()
		if err := p.Probe(peer, 1, ""); err != nil {
			b.Fatal(err)
		}
		x := <-done
		if x.Outcome != probe.OutcomeOK {
			b.Fatalf("%v %s", x.Outcome, x.Reason)
		}
		return time.Since(t0), x
	}
	ping()
	probeOnce()
	var rt, base, nrtt []time.Duration
	b.ResetTimer()
	// Alternating blocks of 100, so that both see the same machine, and
	// each runs warm (a soft device's driver sleeps after 50 µs idle).
	for i := 0; i < b.N; i += 100 {
		n := min(100, b.N-i)
		for j := 0; j < n; j++ {
			d, x := probeOnce()
			rt, nrtt = append(rt, d), append(nrtt, x.NetworkRTT)
		}
		for j := 0; j < n; j++ {
			base = append(base, ping())
		}
	}
	b.StopTimer()
	med := func(v []time.Duration) float64 {
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		return float64(v[len(v)/2].Nanoseconds())
	}
	mr, mb, mn := med(rt), med(base), med(nrtt)
	b.ReportMetric(mr, "probe-ns")
	b.ReportMetric(mn, "network-rtt-ns")
	b.ReportMetric(mb, "udp-pingpong-ns")
	b.ReportMetric(mr/mb, "probe/udp")
}
