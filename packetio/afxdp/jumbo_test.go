//go:build linux

package afxdp_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/packetiotest"
)

// jumboFrame is the largest Ethernet frame of a 4096-byte path MTU's RoCE
// packet: 14 Ethernet + 20 IPv4 + 8 UDP + 12 BTH + 16 RETH + 4 ImmDt +
// 4096 + 4 ICRC bytes.
const jumboFrame = 14 + 20 + 8 + 12 + 16 + 4 + 4096 + 4

// newJumboPair makes two namespaces joined by veth with MTU 9000.
func newJumboPair(t testing.TB) *netns.Pair {
	return netns.NewPair(t, netns.Options{Prefix: testPrefix, MTU: 9000})
}

// Over a veth of MTU 9000 one UMEM frame cannot hold a 4 KiB path MTU's
// packet: Listen chains frames (multi-buffer AF_XDP), and packets of every
// size up to MaxPacket (the default 4160 bytes, so that a soft device's
// active MTU is 4096), across the frame boundaries, go both ways intact,
// natively and generically attached, with 4 KiB frames (two per packet)
// and 2 KiB ones (three): the counters show packets sent and received in
// several frames and none dropped.
func TestNetnsJumbo(t *testing.T) {
	p := newJumboPair(t)
	for _, c := range []struct {
		attach    string
		frameSize int
		chain     int // frames of the largest packet
	}{
		{afxdp.AttachNative, 0, 2},
		{afxdp.AttachGeneric, 0, 2},
		{afxdp.AttachNative, 2048, 3},
	} {
		t.Run(fmt.Sprintf("%s/frame%d", c.attach, c.frameSize), func(t *testing.T) {
			o := afxdp.Options{Attach: c.attach, FrameSize: c.frameSize}
			a := listenIn(t, p.A, p.AddrA, o)
			b := listenIn(t, p.B, p.AddrB, o)
			multi, fs := a.MultiBuffer()
			t.Logf("mode %s, multi-buffer %v, %d-byte frames, MaxPacket %d", a.Mode(), multi, fs, a.MaxPacket())
			if !multi || a.MaxPacket() != packetio.DefaultMaxPacket {
				t.Fatalf("multi-buffer %v, MaxPacket %d; want multi-buffer and %d", multi, a.MaxPacket(), packetio.DefaultMaxPacket)
			}
			if want := 2048; c.frameSize == 0 && fs != afxdp.JumboFrameSize || c.frameSize != 0 && fs != want {
				t.Fatalf("frame size %d", fs)
			}
			room := fs - afxdp.DefaultHeadroom - 256 - 42 // transport bytes in a packet's first frame
			sizes := []int{16, 1000, room - 1, room, room + 1, fs - 42, fs - 42 + 1, jumboFrame - 42, a.MaxPacket()}
			// Packets of more than fs-42 bytes take two or more frames to
			// send; of more than room, two or more to receive.
			txChained, rxChained := 0, 0
			for _, size := range sizes {
				if size > fs-42 {
					txChained += 8
				}
				if size > room {
					rxChained += 8
				}
			}
			seq := 0
			for _, size := range sizes {
				packetiotest.Send(t, a, b, seq, 8, size)
				packetiotest.Check(t, packetiotest.Recv(t, b, 8, 5*time.Second), a, b, seq, size)
				packetiotest.Send(t, b, a, seq+100, 8, size)
				packetiotest.Check(t, packetiotest.Recv(t, a, 8, 5*time.Second), b, a, seq+100, size)
				seq += 8
			}
			for _, c2 := range []struct {
				name   string
				tx, rx *afxdp.Conn
			}{{"a->b", a, b}, {"b->a", b, a}} {
				tx, err := c2.tx.XDPStats()
				if err != nil {
					t.Fatal(err)
				}
				rx, err := c2.rx.XDPStats()
				if err != nil {
					t.Fatal(err)
				}
				if tx.TxChained != uint64(txChained) || rx.RxChained != uint64(rxChained) || rx.RxDropped != 0 || rx.Malformed != 0 || rx.Redirected != uint64(8*len(sizes)) {
					t.Errorf("%s: sent %d chained (want %d), received %d chained (want %d) of %d redirected (want %d), %d dropped, %d malformed",
						c2.name, tx.TxChained, txChained, rx.RxChained, rxChained, rx.Redirected, 8*len(sizes), rx.RxDropped, rx.Malformed)
				}
			}
		})
	}
}

// The packetio conformance suite (round trips at MaxPacket, buffers valid
// until the next Receive, deadlines, Wake, lending, no allocations) holds
// for a multi-buffer Conn too.
func TestNetnsJumboConformance(t *testing.T) {
	p := newJumboPair(t)
	packetiotest.Run(t, func(t *testing.T) (packetio.Conn, packetio.Conn) {
		a := listenIn(t, p.A, p.AddrA, afxdp.Options{})
		b := listenIn(t, p.B, p.AddrB, afxdp.Options{})
		if multi, _ := a.MultiBuffer(); !multi {
			t.Fatalf("not multi-buffer at MTU 9000")
		}
		return a, b
	})
}

// Transmit and Receive of packets chained over frames allocate nothing
// (the chains are copied into memory the Conn has from Listen).
func TestNetnsJumboNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	p := newJumboPair(t)
	a := listenIn(t, p.A, p.AddrA, afxdp.Options{})
	b := listenIn(t, p.B, p.AddrB, afxdp.Options{})
	const n, size = 16, jumboFrame - 42
	var fill [size]byte
	roundTrip := func() { packetiotest.RoundTrip(a, b, fill[:], n) }
	roundTrip()
	if allocs := testing.AllocsPerRun(50, roundTrip); allocs != 0 {
		t.Errorf("TxBatch+Transmit+Receive of %d %d-byte packets: %v allocations, want 0", n, size, allocs)
	}
	if x, err := b.XDPStats(); err != nil || x.RxChained == 0 {
		t.Errorf("no chained packets received (%v)", err)
	}
}

// Where multi-buffer AF_XDP is refused, Listen says so: with a bind flag
// the kernel does not know in place of XDP_USE_SG (the kernel refuses it
// with EINVAL, as kernels before 6.6 refuse XDP_USE_SG) the error matches
// ErrMultiBuffer, ErrMTU and packetio.ErrNotSupported (callers fall back to
// the UDP path) and names the MTU; with Options.SingleBuffer an MTU over
// one frame is refused with ErrMTU alone; too few frames for a batch of
// two-frame transmit slots are refused. None leaves the XDP program
// attached: a Conn opens afterwards.
func TestNetnsJumboRefused(t *testing.T) {
	p := newJumboPair(t)
	listen := func(o afxdp.Options) error {
		return p.A.Do(func() error {
			c, err := afxdp.Listen(p.AddrA, o)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	err := listen(afxdp.WithSGFlag(afxdp.Options{}, 1<<7))
	t.Logf("multi-buffer refused: %v", err)
	if !errors.Is(err, afxdp.ErrMultiBuffer) || !errors.Is(err, afxdp.ErrMTU) || !errors.Is(err, packetio.ErrNotSupported) ||
		!strings.Contains(err.Error(), "MTU 9000") {
		t.Errorf("Listen with multi-buffer refused: %v; want ErrMultiBuffer, ErrMTU and ErrNotSupported naming MTU 9000", err)
	}
	err = listen(afxdp.Options{SingleBuffer: true})
	t.Logf("single-buffer: %v", err)
	if !errors.Is(err, afxdp.ErrMTU) || errors.Is(err, afxdp.ErrMultiBuffer) || !errors.Is(err, packetio.ErrNotSupported) {
		t.Errorf("Listen with SingleBuffer at MTU 9000: %v; want ErrMTU (not ErrMultiBuffer) and ErrNotSupported", err)
	}
	// 64 frames leave 32 to transmit, 16 slots of two: too few for a
	// batch of 32.
	if err = listen(afxdp.Options{Frames: 64}); err == nil || !strings.Contains(err.Error(), "transmit slots") {
		t.Errorf("Listen with 64 frames at MTU 9000: %v; want an error about the transmit slots", err)
	}
	a := listenIn(t, p.A, p.AddrA, afxdp.Options{})
	if multi, _ := a.MultiBuffer(); !multi {
		t.Errorf("not multi-buffer after the refusals")
	}
}

// A datagram to port 4791 longer than MaxPacket but within the MTU (8000
// and 8964 bytes from a UDP socket: three 4 KiB frames each) is dropped
// and counted as malformed; the packets around them arrive intact.
func TestNetnsJumboOversize(t *testing.T) {
	p := newJumboPair(t)
	b := listenIn(t, p.B, p.AddrB, afxdp.Options{})
	sizes := []int{100, 8000, 4132, 8972 - 8}
	if err := p.A.Do(func() error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.AddrB.AsSlice(), Port: 4791})
		if err != nil {
			return err
		}
		defer c.Close()
		for i, n := range sizes {
			msg := make([]byte, n)
			for j := range msg {
				msg[j] = byte(i + j)
			}
			if _, err := c.Write(msg); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := packetiotest.Recv(t, b, 2, 5*time.Second)
	for i, want := range []int{0, 2} {
		if len(got[i].Buf) != sizes[want] || got[i].Buf[sizes[want]-1] != byte(want+sizes[want]-1) {
			t.Errorf("packet %d: %d bytes, want the %d-byte datagram", i, len(got[i].Buf), sizes[want])
		}
	}
	// The two oversized datagrams were redirected (each in three frames)
	// and dropped by Receive.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := b.Receive(time.Now().Add(50 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		x, err := b.XDPStats()
		if err != nil {
			t.Fatal(err)
		}
		if x.Malformed == 2 && x.Redirected == 4 && x.RxChained == 3 && b.Stats().RxDrops == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redirected %d, chained %d, malformed %d, RxDrops %d; want 4, 3, 2, 2", x.Redirected, x.RxChained, x.Malformed, b.Stats().RxDrops)
		}
	}
}

// A packet in more frames than Receive holds at once (the MTU raised after
// Listen: Batch 1 and 2 KiB frames hold the six of an MTU of 9000, and a
// 15000-byte datagram at MTU 16000 takes eleven) is dropped, also the part
// of it that comes after, and counted once as malformed; the next packet
// arrives intact.
func TestNetnsJumboChainTooLong(t *testing.T) {
	p := newJumboPair(t)
	b := listenIn(t, p.B, p.AddrB, afxdp.Options{Batch: 1, FrameSize: 2048})
	for _, ns := range []*netns.NS{p.A, p.B} {
		if out, err := ns.Exec("ip", "link", "set", netns.LinkName, "mtu", "16000"); err != nil {
			t.Skipf("raising the MTU to 16000 with the program attached: %v: %s", err, out)
		}
	}
	sizes := []int{15000, 100}
	if err := p.A.Do(func() error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.AddrB.AsSlice(), Port: 4791})
		if err != nil {
			return err
		}
		defer c.Close()
		for _, n := range sizes {
			if _, err := c.Write(make([]byte, n)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := packetiotest.Recv(t, b, 1, 5*time.Second)
	if len(got[0].Buf) != 100 {
		t.Errorf("received %d bytes, want the 100-byte datagram", len(got[0].Buf))
	}
	x, err := b.XDPStats()
	if err != nil {
		t.Fatal(err)
	}
	if x.Redirected != 2 || x.Malformed != 1 || x.RxDropped != 0 {
		t.Errorf("redirected %d, malformed %d, dropped by the kernel %d; want 2, 1, 0", x.Redirected, x.Malformed, x.RxDropped)
	}
}
