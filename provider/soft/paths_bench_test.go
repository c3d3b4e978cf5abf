//go:build linux

package soft

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/paths"
	"github.com/goroce/goroce/verbs"
)

// BenchmarkNetnsPaths compares the packet paths under a soft device in one
// invocation, on one veth pair between two namespaces (MTU 1500, path MTU
// 1024): RC WRITE goodput at 4 KiB and 64 KiB (16 WRITEs outstanding) and
// the 64-byte SEND round trip, over udp, uring and afxdp in alternating
// rounds. It logs each path's figures against udp's (geometric mean over
// the rounds); a path the kernel refuses is left out with the reason.
//
//	go test ./provider/soft -run - -bench NetnsPaths -v
func BenchmarkNetnsPaths(b *testing.B) {
	netns.Require(b)
	pair := netns.NewPair(b, netns.Options{Prefix: netip.MustParsePrefix("10.79.12.0/24"), MTU: 1500})
	const depth, rounds = 16, 2
	names := []string{paths.UDP, paths.Uring, paths.AFXDP}
	refused := map[string]bool{}
	listen := func(path string, ns *netns.NS, addr netip.Addr) packetio.Conn {
		var c packetio.Conn
		err := ns.Do(func() (err error) {
			c, _, err = paths.Open(addr, path, paths.Options{})
			return err
		})
		if err != nil {
			if !refused[path] {
				b.Logf("%s refused: %v", path, err)
			}
			refused[path] = true
			return nil
		}
		return c
	}
	results := map[string]map[string][]float64{} // metric -> path -> per round
	record := func(m, path string, v float64) {
		if results[m] == nil {
			results[m] = map[string][]float64{}
		}
		results[m][path] = append(results[m][path], v)
	}
	metrics := []string{"WRITE 4KiB Gbit/s", "WRITE 64KiB Gbit/s", "SEND 64B rtt µs"}
	for range rounds {
		for _, path := range names {
			ca, cb := listen(path, pair.A, pair.AddrA), listen(path, pair.B, pair.AddrB)
			if ca == nil || cb == nil {
				for _, c := range []packetio.Conn{ca, cb} {
					if c != nil {
						c.Close()
					}
				}
				continue
			}
			da, err := New(Options{Name: "pa", Conn: ca, ActiveMTU: verbs.MTU1024})
			if err != nil {
				b.Fatal(err)
			}
			db, err := New(Options{Name: "pb", Conn: cb, ActiveMTU: verbs.MTU1024})
			if err != nil {
				da.Close()
				b.Fatal(err)
			}
			x, y := perfEnd(b, da, 1<<16, depth), perfEnd(b, db, 1<<16, depth)
			connectPerf(b, x, y, verbs.MTU1024, 1)
			for _, size := range []int{4096, 65536} {
				var last float64
				b.Run(fmt.Sprintf("%s/write=%dKiB", path, size>>10), func(b *testing.B) {
					b.SetBytes(int64(size))
					start := time.Now()
					if err := afxdpWriteStream(x, y, size, depth, b.N); err != nil {
						b.Fatal(err)
					}
					last = float64(b.N*size) * 8 / 1e9 / time.Since(start).Seconds()
					b.ReportMetric(last, "Gbit/s")
				})
				if last > 0 {
					record(fmt.Sprintf("WRITE %dKiB Gbit/s", size>>10), path, last)
				}
			}
			var rtt float64
			b.Run(path+"/send_rtt=64B", func(b *testing.B) {
				start := time.Now()
				if err := perfSoftPingPong(x, y, b.N); err != nil {
					b.Fatal(err)
				}
				rtt = float64(time.Since(start).Microseconds()) / float64(b.N)
				b.ReportMetric(rtt, "µs/rtt")
			})
			if rtt > 0 {
				record("SEND 64B rtt µs", path, rtt)
			}
			da.Close()
			db.Close()
		}
	}
	for _, m := range metrics {
		u := results[m][paths.UDP]
		var line []string
		for _, path := range names {
			v := results[m][path]
			if len(v) == 0 || len(v) != len(u) {
				continue
			}
			ratio := 1.0
			for i := range v {
				ratio *= v[i] / u[i]
			}
			line = append(line, fmt.Sprintf("%s %.2f (%.2fx udp)", path, v[len(v)-1], math.Pow(ratio, 1/float64(len(v)))))
		}
		b.Logf("%s: %s", m, strings.Join(line, ", "))
	}
}
