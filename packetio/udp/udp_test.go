//go:build linux

package udp_test

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/udp"
)

var (
	lo1 = netip.MustParseAddr("127.0.0.1")
	lo2 = netip.MustParseAddr("127.0.0.2")
)

// loopbackPair binds a to 127.0.0.1 on a port the kernel picks and b to
// 127.0.0.2 on the same port, so that each one's default destination port
// reaches the other (as two RoCE hosts on 4791 do).
func loopbackPair(t testing.TB, opts udp.Options) (a, b *udp.Conn) {
	t.Helper()
	for try := 0; ; try++ {
		o := opts
		o.Port = udp.AnyPort
		a, err := udp.Listen(lo1, o)
		if err != nil {
			t.Fatal(err)
		}
		o.Port = int(a.LocalAddrPort().Port())
		b, err := udp.Listen(lo2, o)
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

func TestConformance(t *testing.T) {
	packetiotest.Run(t, func(t *testing.T) (packetio.Conn, packetio.Conn) {
		return loopbackPair(t, noGSO())
	})
}

// Full batches of 32 both ways, payload, source port and IP_PKTINFO checked.
func TestLoopbackBatches(t *testing.T) {
	a, b := loopbackPair(t, noGSO())
	port := a.LocalAddrPort().Port()
	if a.MaxPacket() != packetio.DefaultMaxPacket {
		t.Fatalf("MaxPacket = %d", a.MaxPacket())
	}
	for _, size := range []int{16, 64, 1024, 4096 + 28} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
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
		})
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.PacketsOut != 4*3*32 || sb.PacketsIn != 4*3*32 || sa.TxErrors+sb.RxDrops != 0 {
		t.Errorf("stats a %+v b %+v", sa, sb)
	}
	// One sendmmsg per batch of 32 on loopback.
	if sa.TxBatches != 4*3 {
		t.Errorf("TxBatches = %d, want %d", sa.TxBatches, 4*3)
	}
}

// A Conn bound to 0.0.0.0 learns each packet's local address from
// IP_PKTINFO.
func TestPktinfoUnspecified(t *testing.T) {
	any, err := udp.Listen(netip.IPv4Unspecified(), udp.Options{Port: udp.AnyPort})
	if err != nil {
		t.Fatal(err)
	}
	defer any.Close()
	port := int(any.LocalAddrPort().Port())
	s, err := udp.Listen(lo1, udp.Options{Port: udp.AnyPort, DstPort: port, TOS: 0x68})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, dst := range []netip.Addr{lo2, netip.MustParseAddr("127.3.4.5"), lo1} {
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
	if any.LocalAddr() != netip.IPv4Unspecified() {
		t.Errorf("LocalAddr = %v", any.LocalAddr())
	}
}

func TestTruncatedDropped(t *testing.T) {
	a, err := udp.Listen(lo1, udp.Options{Port: udp.AnyPort, MaxPacket: 4160})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := udp.Listen(lo1, udp.Options{Port: udp.AnyPort, MaxPacket: 256, DstPort: int(a.LocalAddrPort().Port())})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a2, err := udp.Listen(lo2, udp.Options{Port: udp.AnyPort, DstPort: int(b.LocalAddrPort().Port())})
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	batch := a2.TxBatch(3)
	for i, n := range []int{256, 257, 100} {
		batch[i].Buf = append(batch[i].Buf[:0], make([]byte, n)...)
		batch[i].Addr = lo1
	}
	if n, err := a2.Transmit(batch); n != 3 || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	got := packetiotest.Recv(t, b, 2, 5*time.Second)
	if len(got[0].Buf) != 256 || len(got[1].Buf) != 100 {
		t.Fatalf("got lengths %d, %d; want 256, 100", len(got[0].Buf), len(got[1].Buf))
	}
	if d := b.Stats().RxDrops; d != 1 {
		t.Fatalf("RxDrops = %d, want 1", d)
	}
}

func TestListenErrors(t *testing.T) {
	if _, err := udp.Listen(netip.MustParseAddr("fe80::1%lo"), udp.Options{}); err == nil {
		t.Errorf("Listen(fe80::1%%lo) succeeded: a zone is refused")
	}
	a, err := udp.Listen(lo1, udp.Options{Port: udp.AnyPort})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := udp.Listen(lo1, udp.Options{Port: int(a.LocalAddrPort().Port())}); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second Listen on the same port = %v, want EADDRINUSE", err)
	}
	if _, err := udp.Listen(lo1, udp.Options{Port: 70000}); err == nil {
		t.Error("Listen on port 70000 succeeded")
	}
}

func TestSocketBuffers(t *testing.T) {
	c, err := udp.Listen(lo1, udp.Options{Port: udp.AnyPort, RecvBuffer: 8 << 20, SendBuffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, s, err := c.SocketBuffers()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SO_RCVBUF %d SO_SNDBUF %d (kernel doubles the requested size)", r, s)
	if s < 1<<20 {
		t.Errorf("SO_SNDBUF = %d, want at least 1 MiB", s)
	}
	if syscall.Geteuid() == 0 && r < 8<<20 {
		t.Errorf("as root SO_RCVBUFFORCE should give 8 MiB; SO_RCVBUF = %d", r)
	}
}

func TestTransmitBadAddress(t *testing.T) {
	a, b := loopbackPair(t, noGSO())
	batch := a.TxBatch(3)
	for i := range batch {
		batch[i].Buf = append(batch[i].Buf[:0], byte(i))
		batch[i].Addr = b.LocalAddr()
	}
	batch[2].Addr = netip.MustParseAddr("::1")
	n, err := a.Transmit(batch)
	var te *packetio.TransmitError
	if n != 2 || !errors.As(err, &te) || te.Index != 2 || !errors.Is(err, packetio.ErrAddress) {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	packetiotest.Recv(t, b, 2, 5*time.Second)
}

func BenchmarkUDPLoopback(b *testing.B) {
	for _, size := range []int{64, 1024} {
		b.Run(fmt.Sprintf("batch32/%dB", size), func(b *testing.B) {
			const batch = 32
			x, y := loopbackPair(b, noGSO())
			to := y.LocalAddr()
			body := make([]byte, size)
			b.ReportAllocs()
			b.SetBytes(batch * int64(size))
			for b.Loop() {
				pkts := x.TxBatch(batch)
				for i := range pkts {
					pkts[i].Buf = append(pkts[i].Buf[:0], body...)
					pkts[i].Addr = to
				}
				if _, err := x.Transmit(pkts); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < batch; {
					rx, err := y.Receive(time.Time{})
					if err != nil {
						b.Fatal(err)
					}
					got += len(rx)
				}
			}
			b.ReportMetric(float64(b.N)*batch/b.Elapsed().Seconds(), "packets/s")
		})
	}
}

// TestRxTime: each received packet carries the kernel's receive time
// (SO_TIMESTAMPNS), taken when it arrived, not when Receive read it: a
// receiver that reads 30 ms late still sees the arrival time.
func TestRxTime(t *testing.T) {
	a, b := loopbackPair(t, noGSO())
	before := time.Now().UnixNano()
	packetiotest.Send(t, a, b, 0, 4, 64)
	time.Sleep(30 * time.Millisecond)
	read := time.Now().UnixNano()
	got := packetiotest.Recv(t, b, 4, 5*time.Second)
	for i, p := range got {
		if p.RxTime < before || p.RxTime > read-25e6 {
			t.Errorf("packet %d: receive time %d ns after the send began, read %d ns after it; want the arrival, at least 25 ms before the read",
				i, p.RxTime-before, read-before)
		}
	}
}
