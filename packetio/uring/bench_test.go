//go:build linux

package uring_test

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/packetio/uring"
)

// The benchmarks run each path in the same invocation, the UDP path
// (recvmmsg/sendmmsg) first as the baseline; compare them with
//
//	go test ./packetio/uring -run - -bench . -count 6 | tee out.txt
//	benchstat -col /path out.txt

// benchPath opens a Conn of one path.
type benchPath struct {
	name   string
	listen func(netip.Addr, int) (packetio.Conn, uint16, error) // address, port (0: any): conn and its port
	locked bool                                                 // each Conn is driven from a goroutine locked to its thread
}

var benchPaths = []benchPath{
	{name: "udp", listen: func(a netip.Addr, port int) (packetio.Conn, uint16, error) {
		if port == 0 {
			port = udp.AnyPort
		}
		c, err := udp.Listen(a, udp.Options{Port: port})
		if err != nil {
			return nil, 0, err
		}
		return c, c.LocalAddrPort().Port(), nil
	}},
	uringPath("uring", uring.Listen),
	uringPath("uring-singleshot", uring.ListenSingleshot),
	uringPath("uring-nocoop", uring.ListenNoCoop),
	{name: "uring-defer", locked: true, listen: func(a netip.Addr, port int) (packetio.Conn, uint16, error) {
		if port == 0 {
			port = uring.AnyPort
		}
		c, err := uring.Listen(a, uring.Options{Port: port, SingleIssuer: true})
		if err != nil {
			return nil, 0, err
		}
		if !c.Features().DeferTaskrun {
			c.Close()
			return nil, 0, fmt.Errorf("no DEFER_TASKRUN: %w", packetio.ErrNotSupported)
		}
		return c, c.LocalAddrPort().Port(), nil
	}},
}

func uringPath(name string, listen listenFunc) benchPath {
	return benchPath{name: name, listen: func(a netip.Addr, port int) (packetio.Conn, uint16, error) {
		if port == 0 {
			port = uring.AnyPort
		}
		c, err := listen(a, uring.Options{Port: port})
		if err != nil {
			return nil, 0, err
		}
		return c, c.LocalAddrPort().Port(), nil
	}}
}

var (
	benchLo1 = netip.MustParseAddr("127.0.7.21")
	benchLo2 = netip.MustParseAddr("127.0.7.22")
)

// benchPair opens two Conns of path p on loopback, sharing a port.
func benchPair(b *testing.B, p benchPath) (packetio.Conn, packetio.Conn) {
	b.Helper()
	for try := 0; ; try++ {
		x, port, err := p.listen(benchLo1, 0)
		if errors.Is(err, packetio.ErrNotSupported) {
			b.Skip(err)
		}
		if err != nil {
			b.Fatal(err)
		}
		y, _, err := p.listen(benchLo2, int(port))
		if err == nil {
			b.Cleanup(func() { x.Close(); y.Close() })
			return x, y
		}
		x.Close()
		if !errors.Is(err, syscall.EADDRINUSE) || try == 10 {
			b.Fatal(err)
		}
	}
}

// throughput streams b.N packets of size bytes from tx to rx in batches of
// 32, at most window packets ahead of the receiver (so that the socket
// buffer never overflows), and reports packets per second. A sender with a
// full window sleeps until the receiver makes room: spinning would take the
// cores the receiver and the kernel's work need.
func throughput(b *testing.B, tx, rx packetio.Conn, size int, locked bool) {
	const window, batchSize = 1024, 32
	var received atomic.Int64
	var waiting atomic.Bool
	room := make(chan struct{}, 1)
	done := make(chan error, 1)
	if locked {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	go func() {
		if locked {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		n := 0
		for n < b.N {
			pkts, err := rx.Receive(time.Now().Add(2 * time.Second))
			if err != nil {
				done <- err
				return
			}
			if len(pkts) == 0 {
				done <- fmt.Errorf("receiver stalled after %d of %d packets", n, b.N)
				return
			}
			n += len(pkts)
			received.Store(int64(n))
			if waiting.Load() {
				select {
				case room <- struct{}{}:
				default:
				}
			}
		}
		done <- nil
	}()
	to := rx.LocalAddr()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for sent := 0; sent < b.N; {
		for start := time.Now(); int64(sent)-received.Load() > window-batchSize; {
			if time.Since(start) > 5*time.Second {
				b.Fatalf("receiver %d packets behind for 5 s", int64(sent)-received.Load())
			}
			waiting.Store(true)
			if int64(sent)-received.Load() > window-batchSize {
				timer.Reset(10 * time.Millisecond)
				select {
				case <-room:
				case <-timer.C:
				}
			}
			waiting.Store(false)
		}
		batch := tx.TxBatch(min(batchSize, b.N-sent))
		for i := range batch {
			batch[i].Buf = batch[i].Buf[:size]
			batch[i].Addr = to
		}
		n, err := tx.Transmit(batch)
		if err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/pkt")
}

// cpuTime returns the process's user and system CPU time, in nanoseconds:
// both sides' work and the kernel's done on their behalf.
func cpuTime() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// pingPong measures the round trip of one size-byte packet from a to b and
// back, b echoing from its own goroutine.
func pingPong(b *testing.B, a, c packetio.Conn, size int, locked bool) {
	echoed := make(chan error, 1)
	if locked {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	go func() {
		if locked {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		for {
			pkts, err := c.Receive(time.Time{})
			if err != nil {
				if errors.Is(err, packetio.ErrClosed) {
					err = nil
				}
				echoed <- err
				return
			}
			if len(pkts) == 0 {
				continue
			}
			batch := c.TxBatch(len(pkts))
			for i := range batch {
				batch[i].Buf = append(batch[i].Buf[:0], pkts[i].Buf...)
				batch[i].Addr = pkts[i].Addr
			}
			if _, err := c.Transmit(batch); err != nil {
				echoed <- err
				return
			}
		}
	}()
	to := c.LocalAddr()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		batch := a.TxBatch(1)
		batch[0].Buf = batch[0].Buf[:size]
		batch[0].Addr = to
		if _, err := a.Transmit(batch); err != nil {
			b.Fatal(err)
		}
		for got := 0; got == 0; {
			pkts, err := a.Receive(time.Now().Add(2 * time.Second))
			if err != nil {
				b.Fatal(err)
			}
			if len(pkts) == 0 {
				b.Fatal("no echo within 2 s")
			}
			got = len(pkts)
		}
	}
	b.StopTimer()
	c.Close()
	if err := <-echoed; err != nil {
		b.Fatal(err)
	}
}

func BenchmarkThroughput(b *testing.B) {
	for _, size := range []int{64, 1024} {
		for _, p := range benchPaths {
			b.Run(fmt.Sprintf("size=%d/path=%s", size, p.name), func(b *testing.B) {
				x, y := benchPair(b, p)
				throughput(b, x, y, size, p.locked)
			})
		}
	}
}

func BenchmarkPingPong(b *testing.B) {
	for _, p := range benchPaths {
		b.Run("size=64/path="+p.name, func(b *testing.B) {
			x, y := benchPair(b, p)
			pingPong(b, x, y, 64, p.locked)
		})
	}
}

// Between two namespaces over veth (root only): 1 KiB packets and the 64 B
// round trip.
func BenchmarkNetns(b *testing.B) {
	pair := netns.NewPair(b, netns.Options{Prefix: netnsPrefix, MTU: 9000})
	listen := func(b *testing.B, p benchPath) (packetio.Conn, packetio.Conn) {
		var x, y packetio.Conn
		for _, end := range []struct {
			ns   *netns.NS
			addr netip.Addr
			c    *packetio.Conn
		}{{pair.A, pair.AddrA, &x}, {pair.B, pair.AddrB, &y}} {
			if err := end.ns.Do(func() (err error) {
				*end.c, _, err = p.listen(end.addr, 4791)
				return err
			}); err != nil {
				if errors.Is(err, packetio.ErrNotSupported) {
					b.Skip(err)
				}
				b.Fatal(err)
			}
			c := *end.c
			b.Cleanup(func() { c.Close() })
		}
		return x, y
	}
	for _, p := range benchPaths {
		b.Run("op=throughput/size=1024/path="+p.name, func(b *testing.B) {
			x, y := listen(b, p)
			throughput(b, x, y, 1024, p.locked)
		})
	}
	for _, p := range benchPaths {
		b.Run("op=pingpong/size=64/path="+p.name, func(b *testing.B) {
			x, y := listen(b, p)
			pingPong(b, x, y, 64, p.locked)
		})
	}
}
