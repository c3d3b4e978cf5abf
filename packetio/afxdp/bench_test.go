//go:build linux

package afxdp_test

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/udp"
)

// BenchmarkNetnsPackets1K measures one-way packets/s of 1 KiB transport
// packets between two namespaces over one veth pair (MTU 1500), first over
// packetio/udp (sendmmsg/recvmmsg, no XDP program attached), then over
// AF_XDP, in the same invocation, with the same sender/receiver loop and
// window; it logs the ratio.
//
//	go test ./packetio/afxdp -run - -bench Packets1K -count 3
func BenchmarkNetnsPackets1K(b *testing.B) {
	p := newPair(b)
	const size, window = 1024, 512
	rates := map[string]float64{}
	run := func(name string, open func() (a, c packetio.Conn)) {
		a, c := open()
		defer a.Close()
		defer c.Close()
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			res := pump(a, c, b.N, size, window, time.Minute)
			b.StopTimer()
			if res.err != nil {
				b.Fatal(res.err)
			}
			pps := float64(res.received) / res.elapsed.Seconds()
			b.ReportMetric(pps, "pkts/s")
			rates[name] = pps
		})
	}
	run("udp", func() (packetio.Conn, packetio.Conn) {
		return listenUDP(b, p.A, p), listenUDP(b, p.B, p)
	})
	run("afxdp", func() (packetio.Conn, packetio.Conn) {
		a := listenIn(b, p.A, p.AddrA, afxdp.Options{})
		b.Logf("AF_XDP mode %s", a.Mode())
		return a, listenIn(b, p.B, p.AddrB, afxdp.Options{})
	})
	if rates["udp"] > 0 {
		b.Logf("afxdp/udp packet rate at 1 KiB: %.2fx (%.0f vs %.0f packets/s)", rates["afxdp"]/rates["udp"], rates["afxdp"], rates["udp"])
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
