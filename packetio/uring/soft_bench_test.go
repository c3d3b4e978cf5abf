//go:build linux

package uring_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/packetio/uring"
	"github.com/goroce/goroce/verbs"
)

// BenchmarkSoftNetns runs two soft devices between two namespaces over one
// veth pair (MTU 9000, path MTU 4096), on each packet path in the same
// invocation: RC WRITE goodput at 4 KiB and 64 KiB (16 outstanding) and the
// 64-byte SEND round trip; uring-nooffload is the io_uring path with GSO
// and GRO off. Compare the paths with
//
//	go test ./packetio/uring -run - -bench SoftNetns -count 6 | tee out.txt
//	benchstat -col /path out.txt
func BenchmarkSoftNetns(b *testing.B) {
	pair := netns.NewPair(b, netns.Options{Prefix: netnsPrefix, MTU: 9000})
	paths := []struct {
		name   string
		listen func(netip.Addr) (portConn, error)
	}{
		{"udp", func(a netip.Addr) (portConn, error) { return udp.Listen(a, udp.Options{}) }},
		{"uring", func(a netip.Addr) (portConn, error) { return uring.Listen(a, uring.Options{}) }},
		{"uring-nooffload", func(a netip.Addr) (portConn, error) {
			return uring.Listen(a, uring.Options{GSO: uring.OffloadOff, GRO: uring.OffloadOff})
		}},
		{"uring-nocoop", func(a netip.Addr) (portConn, error) { return uring.ListenNoCoop(a, uring.Options{}) }},
		{"uring-singleshot", func(a netip.Addr) (portConn, error) { return uring.ListenSingleshot(a, uring.Options{}) }},
	}
	open := func(b *testing.B, listen func(netip.Addr) (portConn, error)) (*rcEnd, *rcEnd) {
		var ends [2]*rcEnd
		for i, end := range []struct {
			ns   *netns.NS
			addr netip.Addr
		}{{pair.A, pair.AddrA}, {pair.B, pair.AddrB}} {
			var c portConn
			if err := end.ns.Do(func() (err error) {
				c, err = listen(end.addr)
				return err
			}); err != nil {
				b.Skip(err)
			}
			ends[i] = openEnd(b, c, fmt.Sprintf("soft%d", i)) // closes c at the end
		}
		connectRC(b, ends[0], ends[1], verbs.MTU4096)
		return ends[0], ends[1]
	}
	for _, size := range []int{4096, 65536} {
		for _, p := range paths {
			b.Run(fmt.Sprintf("op=write/size=%d/path=%s", size, p.name), func(b *testing.B) {
				x, y := open(b, p.listen)
				benchWrite(b, x, y, size)
			})
		}
	}
	for _, p := range paths {
		b.Run("op=sendrtt/size=64/path="+p.name, func(b *testing.B) {
			x, y := open(b, p.listen)
			benchSendRTT(b, x, y, 64)
		})
	}
}

// pollOne polls cq until it returns completions into wc, failing after 10 s.
func pollOne(b *testing.B, cq verbs.CQ, wc []verbs.WC) int {
	for start := time.Now(); ; runtime.Gosched() {
		if n := cq.Poll(wc); n > 0 {
			for _, w := range wc[:n] {
				if w.Status != verbs.WCSuccess {
					b.Fatalf("completion %+v", w)
				}
			}
			return n
		}
		if time.Since(start) > 10*time.Second {
			b.Fatal("no completion for 10 s")
		}
	}
}

// benchWrite keeps 16 RDMA WRITEs of size bytes outstanding from x to y.
func benchWrite(b *testing.B, x, y *rcEnd, size int) {
	const depth = 16
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList:     []verbs.SGE{{Addr: x.mr.Addr(), Length: uint32(size), LKey: x.mr.LKey()}},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	wc := make([]verbs.WC, depth)
	b.SetBytes(int64(size))
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			if _, err := x.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		done += pollOne(b, x.cq, wc)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}

// benchSendRTT measures a SEND from x answered by a SEND from y.
func benchSendRTT(b *testing.B, x, y *rcEnd, size int) {
	const recvs = 16
	post := func(e *rcEnd) {
		if _, err := e.qp.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{{Addr: e.mr.Addr() + mrSize/2, Length: 4096, LKey: e.mr.LKey()}}}}); err != nil {
			b.Fatal(err)
		}
	}
	for range recvs {
		post(x)
		post(y)
	}
	send := func(e *rcEnd) {
		if _, err := e.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: e.mr.Addr(), Length: uint32(size), LKey: e.mr.LKey()}}}}); err != nil {
			b.Fatal(err)
		}
	}
	var stop atomic.Bool
	echoed := make(chan struct{})
	go func() { // y answers each RECV with a SEND
		defer close(echoed)
		wc := make([]verbs.WC, 16)
		for !stop.Load() {
			n := y.cq.Poll(wc)
			if n == 0 {
				runtime.Gosched()
				continue
			}
			for _, w := range wc[:n] {
				if w.Opcode == verbs.WCRecv {
					post(y)
					send(y)
				}
			}
		}
	}()
	wc := make([]verbs.WC, 2)
	b.ResetTimer()
	for range b.N {
		send(x)
		for got := 0; got < 2; { // x's SEND and its RECV of the answer
			got += pollOne(b, x.cq, wc[:2-got])
		}
		post(x)
	}
	b.StopTimer()
	stop.Store(true)
	<-echoed
}
