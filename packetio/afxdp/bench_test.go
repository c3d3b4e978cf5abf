//go:build linux

package afxdp_test

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/udp"
)

// BenchmarkNetnsPackets1K measures one-way packets/s of 1 KiB transport
// packets between two namespaces over one veth pair (MTU 1500): over
// packetio/udp (sendmmsg/recvmmsg, no XDP program attached) and over AF_XDP,
// in the same invocation, with the same sender/receiver loop and window,
// alternating rounds (udp, afxdp, udp, afxdp, ...) so that both see the
// same machine load; it logs each round's ratio and their geometric mean.
//
//	go test ./packetio/afxdp -run - -bench Packets1K -v
func BenchmarkNetnsPackets1K(b *testing.B) {
	p := newPair(b)
	const size, window, rounds = 1024, 512, 3
	run := func(name string, open func() (a, c packetio.Conn)) float64 {
		a, c := open()
		defer a.Close()
		defer c.Close()
		var pps float64
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			var r0, r1 unix.Rusage
			unix.Getrusage(unix.RUSAGE_SELF, &r0)
			b.ResetTimer()
			res := pump(a, c, b.N, size, window, time.Minute)
			b.StopTimer()
			unix.Getrusage(unix.RUSAGE_SELF, &r1)
			if res.err != nil {
				b.Fatal(res.err)
			}
			pps = float64(res.received) / res.elapsed.Seconds()
			b.ReportMetric(pps, "pkts/s")
			// Where the CPU time went, per packet: the process's user time
			// and its system time (the system calls, and the veth and XDP
			// work the kernel does inside them).
			ns := func(tv unix.Timeval) float64 { return float64(tv.Nano()) }
			b.ReportMetric((ns(r1.Utime)-ns(r0.Utime))/float64(b.N), "user-ns/pkt")
			b.ReportMetric((ns(r1.Stime)-ns(r0.Stime))/float64(b.N), "sys-ns/pkt")
		})
		return pps
	}
	logSum, n := 0.0, 0
	for r := range rounds {
		u := run("udp", func() (packetio.Conn, packetio.Conn) {
			return listenUDP(b, p.A, p), listenUDP(b, p.B, p)
		})
		x := run("afxdp", func() (packetio.Conn, packetio.Conn) {
			a := listenIn(b, p.A, p.AddrA, afxdp.Options{})
			if r == 0 {
				b.Logf("AF_XDP mode %s", a.Mode())
			}
			return a, listenIn(b, p.B, p.AddrB, afxdp.Options{})
		})
		if u > 0 && x > 0 {
			b.Logf("round %d: afxdp/udp packet rate at 1 KiB: %.2fx (%.0f vs %.0f packets/s)", r, x/u, x, u)
			logSum += math.Log(x / u)
			n++
		}
	}
	if n > 0 {
		b.Logf("afxdp/udp packet rate at 1 KiB, geometric mean of %d rounds: %.2fx", n, math.Exp(logSum/float64(n)))
	}
}

func listenUDP(b *testing.B, ns *netns.NS, p *netns.Pair) packetio.Conn {
	addr := p.AddrA
	if ns == p.B {
		addr = p.AddrB
	}
	var c *udp.Conn
	if err := ns.Do(func() (err error) {
		c, err = udp.Listen(addr, udp.Options{})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkNetnsJumbo measures one-way throughput between two namespaces
// over veth, in the same invocation and alternating rounds: AF_XDP at MTU
// 1500 with 1 KiB transport packets (one 2 KiB frame each), AF_XDP at MTU
// 9000 with 4158-byte ones (a 4200-byte Ethernet frame, as large as a
// 4096-byte path MTU's packets get: multi-buffer, two 4 KiB frames each
// way), natively and generically attached, and packetio/udp with the same
// 4158-byte packets at MTU 9000; it logs the geometric means of the
// byte-rate ratios.
//
//	go test ./packetio/afxdp -run - -bench Jumbo -benchtime 20000x -v
func BenchmarkNetnsJumbo(b *testing.B) {
	p1500 := newPair(b)
	p9000 := netns.NewPair(b, netns.Options{Prefix: netip.MustParsePrefix("10.79.14.0/24"), MTU: 9000})
	const window, rounds = 512, 3
	const big = 4200 - 42
	run := func(name string, size int, open func() (a, c packetio.Conn)) float64 {
		a, c := open()
		defer a.Close()
		defer c.Close()
		var rate float64
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			res := pump(a, c, b.N, size, window, time.Minute)
			b.StopTimer()
			if res.err != nil {
				b.Fatal(res.err)
			}
			pps := float64(res.received) / res.elapsed.Seconds()
			b.ReportMetric(pps, "pkts/s")
			b.ReportMetric(pps*float64(size)*8/1e9, "Gbit/s")
			rate = pps * float64(size)
		})
		return rate
	}
	var logJ, logU, logG float64
	n := 0
	for r := range rounds {
		small := run("afxdp/mtu1500/1KiB", 1024, func() (packetio.Conn, packetio.Conn) {
			return listenIn(b, p1500.A, p1500.AddrA, afxdp.Options{}), listenIn(b, p1500.B, p1500.AddrB, afxdp.Options{})
		})
		jumbo := run("afxdp/mtu9000/4158B", big, func() (packetio.Conn, packetio.Conn) {
			a := listenIn(b, p9000.A, p9000.AddrA, afxdp.Options{})
			if r == 0 {
				multi, fs := a.MultiBuffer()
				b.Logf("AF_XDP at MTU 9000: mode %s, multi-buffer %v, %d-byte frames", a.Mode(), multi, fs)
			}
			return a, listenIn(b, p9000.B, p9000.AddrB, afxdp.Options{})
		})
		gen := afxdp.Options{Attach: afxdp.AttachGeneric}
		generic := run("afxdp-generic/mtu9000/4158B", big, func() (packetio.Conn, packetio.Conn) {
			return listenIn(b, p9000.A, p9000.AddrA, gen), listenIn(b, p9000.B, p9000.AddrB, gen)
		})
		udpJ := run("udp/mtu9000/4158B", big, func() (packetio.Conn, packetio.Conn) {
			return listenUDP(b, p9000.A, p9000), listenUDP(b, p9000.B, p9000)
		})
		if small > 0 && jumbo > 0 && udpJ > 0 && generic > 0 {
			b.Logf("round %d: afxdp bytes/s 4158 B at MTU 9000 / 1 KiB at MTU 1500: %.2fx; afxdp/udp at 4158 B: %.2fx, generic XDP %.2fx (%.2f, %.2f, %.2f, generic %.2f Gbit/s)",
				r, jumbo/small, jumbo/udpJ, generic/udpJ, small*8/1e9, jumbo*8/1e9, udpJ*8/1e9, generic*8/1e9)
			logJ += math.Log(jumbo / small)
			logU += math.Log(jumbo / udpJ)
			logG += math.Log(generic / udpJ)
			n++
		}
	}
	if n > 0 {
		b.Logf("geometric means of %d rounds: afxdp 4158 B at MTU 9000 / 1 KiB at MTU 1500: %.2fx bytes/s; afxdp/udp at 4158 B, MTU 9000: %.2fx (generic XDP: %.2fx)",
			n, math.Exp(logJ/float64(n)), math.Exp(logU/float64(n)), math.Exp(logG/float64(n)))
	}
}
