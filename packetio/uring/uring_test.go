//go:build linux

package uring_test

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/uring"
)

// Loopback addresses of this package's tests.
var (
	lo1 = netip.MustParseAddr("127.0.7.1")
	lo2 = netip.MustParseAddr("127.0.7.2")
	lo3 = netip.MustParseAddr("127.0.7.3")
)

type listenFunc func(netip.Addr, uring.Options) (*uring.Conn, error)

// listenOrSkip opens a Conn, skipping the test when the kernel has no
// usable io_uring.
func listenOrSkip(t testing.TB, listen listenFunc, addr netip.Addr, opts uring.Options) (*uring.Conn, error) {
	t.Helper()
	c, err := listen(addr, opts)
	if errors.Is(err, uring.ErrUnavailable) {
		testenv.Skip(t, testenv.Uring, err)
	}
	return c, err
}

// loopbackPair binds a to 127.0.7.1 on a port the kernel picks and b to
// 127.0.7.2 on the same port, so that each one's default destination port
// reaches the other.
func loopbackPair(t testing.TB, listen listenFunc, opts uring.Options) (a, b *uring.Conn) {
	t.Helper()
	for try := 0; ; try++ {
		o := opts
		o.Port = uring.AnyPort
		a, err := listenOrSkip(t, listen, lo1, o)
		if err != nil {
			t.Fatal(err)
		}
		o.Port = int(a.LocalAddrPort().Port())
		b, err := listenOrSkip(t, listen, lo2, o)
		if err == nil {
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		}
		a.Close()
		if !errors.Is(err, syscall.EADDRINUSE) || try == 10 {
			t.Fatal(err)
		}
	}
}

var paths = []struct {
	name   string
	listen listenFunc
}{
	{"multishot", uring.Listen},
	{"singleshot", uring.ListenSingleshot},
	{"nocoop", uring.ListenNoCoop},
}

// TestConformance, under one processor too (GOMAXPROCS=1, as goroce bench
// runs each side).
func TestConformance(t *testing.T) {
	eachPath(t, []int{0, 1}, func(t *testing.T, listen listenFunc) {
		packetiotest.Run(t, func(t *testing.T) (packetio.Conn, packetio.Conn) {
			return loopbackPair(t, listen, noGSO())
		})
	})
}

func TestFeatures(t *testing.T) {
	a, _ := loopbackPair(t, uring.Listen, uring.Options{})
	f := a.Features()
	t.Logf("features: %v", f)
	if f.Multishot != f.BufRing {
		t.Errorf("multishot %v without the buffer ring %v", f.Multishot, f.BufRing)
	}
	s, _ := loopbackPair(t, uring.ListenSingleshot, uring.Options{})
	if s.Features().Multishot || s.Features().BufRing {
		t.Errorf("single-shot conn reports %v", s.Features())
	}
}

// Full batches of 32 both ways, payload, source port and IP_PKTINFO checked,
// over each receive path.
func TestLoopbackBatches(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			a, b := loopbackPair(t, p.listen, noGSO())
			port := a.LocalAddrPort().Port()
			for _, size := range []int{16, 64, 1024, 4096 + 28} {
				for round := range 3 {
					packetiotest.Send(t, a, b, round*32, 32, size)
					got := packetiotest.Recv(t, b, 32, 5*time.Second)
					packetiotest.Check(t, got, a, b, round*32, size)
					packetiotest.Send(t, b, a, round*32+5, 32, size)
					back := packetiotest.Recv(t, a, 32, 5*time.Second)
					packetiotest.Check(t, back, b, a, round*32+5, size)
					for _, p := range append(got, back...) {
						if p.Port != port {
							t.Fatalf("source port %d, want the socket's %d", p.Port, port)
						}
					}
				}
			}
			sa, sb := a.Stats(), b.Stats()
			if sa.PacketsOut != 4*3*32 || sb.PacketsIn != 4*3*32 || sa.TxErrors+sb.RxDrops != 0 {
				t.Errorf("stats a %+v b %+v", sa, sb)
			}
			if sa.TxBatches != 4*3 {
				t.Errorf("TxBatches = %d, want %d (one io_uring_enter per batch)", sa.TxBatches, 4*3)
			}
		})
	}
}

// A Conn bound to 0.0.0.0 learns each packet's local address from
// IP_PKTINFO and its TOS from IP_RECVTOS.
func TestPktinfoUnspecified(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			any, err := listenOrSkip(t, p.listen, netip.IPv4Unspecified(), uring.Options{Port: uring.AnyPort})
			if err != nil {
				t.Fatal(err)
			}
			defer any.Close()
			port := int(any.LocalAddrPort().Port())
			s, err := p.listen(lo1, uring.Options{Port: uring.AnyPort, DstPort: port, TOS: 0x68})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, dst := range []netip.Addr{lo2, netip.MustParseAddr("127.0.7.45"), lo1} {
				batch := s.TxBatch(1)
				batch[0].Buf = append(batch[0].Buf[:0], "pktinfo"...)
				batch[0].Addr = dst
				if _, err := s.Transmit(batch); err != nil {
					t.Fatal(err)
				}
				got := packetiotest.Recv(t, any, 1, 5*time.Second)[0]
				if got.Local != dst || got.Addr != lo1 || got.Port != s.LocalAddrPort().Port() || string(got.Buf) != "pktinfo" {
					t.Fatalf("sent to %v: got Local %v Addr %v Port %d %q", dst, got.Local, got.Addr, got.Port, got.Buf)
				}
				if got.TOS != 0x6a { // DSCP 26, and ECT(0) added (packetio.SendTOS)
					t.Errorf("TOS = %#x, want 0x6a (IP_RECVTOS)", got.TOS)
				}
			}
		})
	}
}

// Datagrams longer than MaxPacket are dropped and counted; the others
// arrive.
func TestTruncatedDropped(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			b, err := listenOrSkip(t, p.listen, lo1, uring.Options{Port: uring.AnyPort, MaxPacket: 256})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			a, err := p.listen(lo2, uring.Options{Port: uring.AnyPort, DstPort: int(b.LocalAddrPort().Port()), GSO: uring.OffloadOff})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			sizes := []int{256, 257, 100, 4000, 0, 1}
			batch := a.TxBatch(len(sizes))
			for i, n := range sizes {
				batch[i].Buf = append(batch[i].Buf[:0], make([]byte, n)...)
				batch[i].Addr = lo1
			}
			if n, err := a.Transmit(batch); n != len(sizes) || err != nil {
				t.Fatalf("Transmit = %d, %v", n, err)
			}
			got := packetiotest.Recv(t, b, 4, 5*time.Second)
			for i, want := range []int{256, 100, 0, 1} {
				if len(got[i].Buf) != want {
					t.Errorf("packet %d: %d bytes, want %d", i, len(got[i].Buf), want)
				}
			}
			if d := b.Stats().RxDrops; d != 2 {
				t.Errorf("RxDrops = %d, want 2", d)
			}
			// Still receiving afterwards (a zero-length datagram ends a
			// multishot receive, which is armed again).
			packetiotest.Send(t, a, b, 0, 8, 64)
			packetiotest.Recv(t, b, 8, 5*time.Second)
		})
	}
}

func TestListenErrors(t *testing.T) {
	for _, tc := range []struct {
		addr netip.Addr
		opts uring.Options
		want error
	}{
		{netip.MustParseAddr("fe80::1%lo"), uring.Options{}, nil},
		{lo1, uring.Options{Port: 70000}, nil},
		{lo1, uring.Options{Port: uring.AnyPort, DstPort: -2}, nil},
		{netip.MustParseAddr("192.0.2.77"), uring.Options{Port: uring.AnyPort}, syscall.EADDRNOTAVAIL},
	} {
		c, err := uring.Listen(tc.addr, tc.opts)
		if err == nil {
			c.Close()
			t.Errorf("Listen(%v, %+v) succeeded", tc.addr, tc.opts)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("Listen(%v, %+v) = %v, want %v", tc.addr, tc.opts, err, tc.want)
		}
		t.Logf("Listen(%v): %v", tc.addr, err)
	}
}

// Many packets in flight: more than the receive buffers, so that the
// multishot receive runs out of buffers (ENOBUFS), ends, and is armed again
// without losing what the socket queued.
func TestBufferExhaustion(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			a, b := loopbackPair(t, p.listen, uring.Options{RxBuffers: 16, Batch: 8, GSO: uring.OffloadOff})
			const total = 40 * 8
			for i := range total / 8 {
				packetiotest.Send(t, a, b, i*8, 8, 200)
			}
			packetiotest.Check(t, packetiotest.Recv(t, b, total, 10*time.Second), a, b, 0, 200)
			if s := b.Stats(); s.PacketsIn != total || s.RxDrops != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

func ExampleListen() {
	conn, err := uring.Listen(netip.MustParseAddr("127.0.7.9"), uring.Options{Port: uring.AnyPort})
	if errors.Is(err, packetio.ErrNotSupported) {
		fmt.Println("no io_uring here; use package udp")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	fmt.Println("receiving with", conn.Features())
}
