//go:build linux

package afxdp_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/wire"
)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// capture is an AF_PACKET socket on the veth of a namespace that has no XDP
// program: it sees the frames as they came off the link.
type capture struct {
	fd     int
	frames [][]byte
}

func startCapture(t *testing.T, ns *netns.NS) *capture {
	t.Helper()
	c := &capture{fd: -1}
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(netns.LinkName)
		if err != nil {
			return err
		}
		if c.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP))); err != nil {
			return err
		}
		if err := unix.Bind(c.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index}); err != nil {
			return err
		}
		return unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
	}); err != nil {
		t.Fatalf("AF_PACKET capture: %v", err)
	}
	t.Cleanup(func() { unix.Close(c.fd) })
	return c
}

// next returns the next RoCEv2 frame that arrived for the host.
func (c *capture) next(t *testing.T) []byte {
	t.Helper()
	buf := make([]byte, 9100)
	for {
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			t.Fatalf("capture: %v after %d frames", err, len(c.frames))
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype != unix.PACKET_HOST {
			continue
		}
		var f wire.Frame
		if err := wire.ParseFrame(buf[:n], &f); err != nil {
			continue
		}
		fr := bytes.Clone(buf[:n])
		c.frames = append(c.frames, fr)
		return fr
	}
}

// writePcap writes the captured frames to a pcap file in dir.
func (c *capture) writePcap(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, fr := range c.frames {
		ci := gopacket.CaptureInfo{Timestamp: now.Add(time.Duration(i) * time.Microsecond), CaptureLength: len(fr), Length: len(fr)}
		if err := w.WritePacket(ci, fr); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// wireCheck runs the independent checker named by GOROCE_WIRE_CHECK on a
// pcap, or skips.
func wireCheck(t *testing.T, pcap string, pmtu int) {
	t.Helper()
	checker := os.Getenv("GOROCE_WIRE_CHECK")
	if checker == "" {
		testenv.Skip(t, testenv.WireCheck, "GOROCE_WIRE_CHECK (path of wire-check's check-pcap.sh) is not set")
	}
	if _, err := exec.LookPath("tshark"); err != nil {
		testenv.Skip(t, testenv.WireCheck, "tshark is not installed; the wire checker needs it")
	}
	out, err := testenv.WireCheckCommand(t, checker, "--pmtu", strconv.Itoa(pmtu), pcap).CombinedOutput()
	text := strings.TrimSpace(string(out))
	last := text[strings.LastIndexByte(text, '\n')+1:]
	if err != nil || !strings.HasSuffix(last, " 0 failed") {
		t.Fatalf("wire check of %s: %v:\n%s", pcap, err, text)
	}
	t.Logf("wire check: %s", last)
}

// The frames AF_XDP puts on the link, as the far end's kernel sees them:
// Ethernet addresses from the neighbour table, IPv4 with DF, Identification
// 0, TTL 64 and a right header checksum, UDP 4791 -> 4791 with checksum 0,
// short frames padded to 60 bytes, and the transport packet the engine
// built, whose ICRC (computed before sending, over the pseudo-header) checks
// with all 32 bits over the real headers. The kernel's UDP stack on the far
// end accepts them, and the independent wire checker passes the capture.
func TestNetnsFramesOnTheWire(t *testing.T) {
	p := newPair(t)
	a := listenIn(t, p.A, p.AddrA, afxdp.Options{})
	capB := startCapture(t, p.B)
	var ub *udp.Conn
	if err := p.B.Do(func() (err error) {
		ub, err = udp.Listen(p.AddrB, udp.Options{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ub.Close()

	fl := wire.Flow{Src: p.AddrA, Dst: p.AddrB, SrcPort: wire.RoCEv2Port}
	big := bytes.Repeat([]byte{0xA5}, 1024)
	msgs := []struct {
		h       wire.Header
		payload []byte
	}{
		{wire.Header{Opcode: wire.RCAcknowledge, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: 9, AETH: wire.AETHFields{Syndrome: wire.ACKCredits(0x1F), MSN: 3}}, nil},
		{wire.Header{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: 10, AckReq: true}, nil}, // 58 bytes: padded
		{wire.Header{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: 11}, []byte("over AF_XDP")},
		{wire.Header{Opcode: wire.RCWriteOnly, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: 12, RETH: wire.RETHFields{VA: 0x1000, RKey: 0x77, DMALen: 1024}}, big},
		{wire.Header{Opcode: wire.RCReadRequest, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: 13, RETH: wire.RETHFields{VA: 0x2000, RKey: 0x78, DMALen: 4096}}, nil},
		{wire.Header{Opcode: wire.RCCompareSwap, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: 17, AtomicETH: wire.AtomicFields{VA: 0x3000, RKey: 0x79, SwapAdd: 5, Compare: 6}}, nil},
		{wire.Header{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 0x22, PSN: 2, DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 0x33}}, big[:1024]},
	}
	batch := a.TxBatch(len(msgs))
	sent := make([][]byte, len(msgs))
	for i, m := range msgs {
		var err error
		if batch[i].Buf, err = wire.AppendDatagram(batch[i].Buf[:0], &fl, &m.h, m.payload); err != nil {
			t.Fatal(err)
		}
		batch[i].Addr = p.AddrB
		sent[i] = bytes.Clone(batch[i].Buf)
	}
	if n, err := a.Transmit(batch); n != len(msgs) || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	macA, macB := wire.MAC(p.MACA), wire.MAC(p.MACB)
	for i := range sent {
		fr := capB.next(t)
		var f wire.Frame
		if err := wire.ParseFrame(fr, &f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		eth := wire.Ethernet(fr)
		ip := f.IPv4()
		switch {
		case eth.Dst() != macB || eth.Src() != macA:
			t.Errorf("frame %d: Ethernet %v -> %v, want %v -> %v", i, eth.Src(), eth.Dst(), macA, macB)
		case !ip.DF() || ip.ID() != 0 || ip.TTL() != 64 || !ip.ChecksumOK():
			t.Errorf("frame %d: IPv4 DF %v ID %#x TTL %d checksum ok %v", i, ip.DF(), ip.ID(), ip.TTL(), ip.ChecksumOK())
		case ip.Src() != p.AddrA || ip.Dst() != p.AddrB:
			t.Errorf("frame %d: %v -> %v", i, ip.Src(), ip.Dst())
		case f.UDP().SrcPort() != wire.RoCEv2Port || f.UDP().DstPort() != wire.RoCEv2Port || f.UDP().Checksum() != 0:
			t.Errorf("frame %d: UDP %d -> %d checksum %#x", i, f.UDP().SrcPort(), f.UDP().DstPort(), f.UDP().Checksum())
		case len(fr) < 60:
			t.Errorf("frame %d: %d bytes, shorter than Ethernet's minimum", i, len(fr))
		case !bytes.Equal(f.Transport(), sent[i]):
			t.Errorf("frame %d: transport packet differs from the one sent", i)
		}
		if err := wire.CheckICRC(f.IPUDP(), f.Transport()); err != nil {
			t.Errorf("frame %d: ICRC over the real headers: %v", i, err)
		}
	}
	got := packetiotest.Recv(t, ub, len(sent), 5*time.Second)
	for i := range got {
		if !bytes.Equal(got[i].Buf, sent[i]) || got[i].Addr != p.AddrA || got[i].Port != wire.RoCEv2Port {
			t.Errorf("the far end's UDP socket got packet %d from %v:%d, differing", i, got[i].Addr, got[i].Port)
		}
	}
	wireCheck(t, capB.writePcap(t, "afxdp-frames.pcap"), 1024)
}

// A neighbour missing from the table is resolved by the kernel's ARP on the
// first Transmit; an address nobody answers for fails with ErrUnresolved
// after ResolveTimeout, and one with no route with packetio.ErrNoRoute; the
// Conn goes on working.
func TestNetnsResolvesNeighbour(t *testing.T) {
	p := newPair(t)
	if _, err := p.A.Exec("ip", "neigh", "del", p.AddrB.String(), "dev", netns.LinkName); err != nil {
		t.Fatal(err)
	}
	a := listenIn(t, p.A, p.AddrA, afxdp.Options{ResolveTimeout: 300 * time.Millisecond})
	b := listenIn(t, p.B, p.AddrB, afxdp.Options{})
	packetiotest.Send(t, a, b, 1, 4, 100)
	packetiotest.Check(t, packetiotest.Recv(t, b, 4, 5*time.Second), a, b, 1, 100)
	out, err := p.A.Exec("ip", "neigh", "show", p.AddrB.String(), "dev", netns.LinkName)
	if err != nil || !strings.Contains(string(out), p.MACB.String()) {
		t.Errorf("neighbour entry after resolution: %q, %v", out, err)
	}
	t.Logf("resolved: %s", bytes.TrimSpace(out))

	nobody := p.Prefix.Addr().Next().Next().Next().Next() // .4: in the subnet, not assigned
	offLink := netip.MustParseAddr("198.51.100.1")        // no route in the namespace
	for _, c := range []struct {
		to   netip.Addr
		want error
	}{{nobody, afxdp.ErrUnresolved}, {offLink, packetio.ErrNoRoute}} {
		batch := a.TxBatch(2)
		batch[0].Buf = append(batch[0].Buf[:0], bytes.Repeat([]byte{1}, 64)...)
		batch[0].Addr = c.to
		batch[1].Buf = append(batch[1].Buf[:0], bytes.Repeat([]byte{2}, 64)...)
		batch[1].Addr = p.AddrB
		start := time.Now()
		n, err := a.Transmit(batch)
		var te *packetio.TransmitError
		if n != 1 || !errors.As(err, &te) || te.Index != 0 || !errors.Is(err, c.want) {
			t.Fatalf("Transmit to %v = %d, %v; want 1 sent and %v for packet 0", c.to, n, err, c.want)
		}
		t.Logf("to %v: %v (after %v)", c.to, err, time.Since(start).Round(time.Millisecond))
		if got := packetiotest.Recv(t, b, 1, 5*time.Second); got[0].Buf[0] != 2 {
			t.Fatalf("the packet to the peer did not arrive intact")
		}
	}
}

// An MTU that a 2 KiB frame cannot hold is refused with
// Options.SingleBuffer, with an error matching ErrMTU and
// packetio.ErrNotSupported; by default (and with FrameSize 4096) 4 KiB
// frames hold an MTU of 3000, one frame per packet.
func TestNetnsMTU(t *testing.T) {
	p := netns.NewPair(t, netns.Options{Prefix: testPrefix, MTU: 3000})
	var err error
	p.A.Do(func() error {
		var c *afxdp.Conn
		if c, err = afxdp.Listen(p.AddrA, afxdp.Options{SingleBuffer: true}); err == nil {
			c.Close()
		}
		return nil
	})
	if !errors.Is(err, afxdp.ErrMTU) || !errors.Is(err, packetio.ErrNotSupported) {
		t.Fatalf("Listen with MTU 3000 and 2 KiB frames, single-buffer: %v; want ErrMTU", err)
	}
	t.Logf("refused: %v", err)
	if os.Getpagesize() < 4096 {
		t.Skip("pages smaller than 4 KiB")
	}
	for _, fs := range []int{0, 4096} {
		a := listenIn(t, p.A, p.AddrA, afxdp.Options{FrameSize: fs})
		b := listenIn(t, p.B, p.AddrB, afxdp.Options{FrameSize: fs})
		if multi, size := a.MultiBuffer(); multi || size != 4096 {
			t.Errorf("FrameSize %d: multi-buffer %v, %d-byte frames; want single-buffer 4096", fs, multi, size)
		}
		if a.MaxPacket() != 3000-28 {
			t.Errorf("MaxPacket %d, want %d", a.MaxPacket(), 3000-28)
		}
		packetiotest.Send(t, a, b, 5, 8, a.MaxPacket())
		packetiotest.Check(t, packetiotest.Recv(t, b, 8, 5*time.Second), a, b, 5, a.MaxPacket())
		a.Close()
		b.Close()
	}
}

func TestListenErrors(t *testing.T) {
	for _, c := range []struct {
		addr string
		o    afxdp.Options
		want string
	}{
		{"fe80::1", afxdp.Options{}, "not link-local"},
		{"::1", afxdp.Options{}, "not an Ethernet interface"},
		{"0.0.0.0", afxdp.Options{}, "IPv4"},
		{"127.0.0.1", afxdp.Options{Frames: 4}, "Frames 4"},
		{"127.0.0.1", afxdp.Options{FrameSize: 1024}, "FrameSize 1024"},
		{"127.0.0.1", afxdp.Options{FrameSize: 3000}, "FrameSize 3000"},
		{"127.0.0.1", afxdp.Options{Frames: 64, RxFrames: 64}, "RxFrames 64"},
		{"127.0.0.1", afxdp.Options{Headroom: 1900}, "Headroom 1900"},
		{"127.0.0.1", afxdp.Options{Batch: 2048}, "Batch 2048"},
		{"127.0.0.1", afxdp.Options{Attach: "bogus"}, "attach mode"},
		{"127.0.0.1", afxdp.Options{Copy: "bogus"}, "copy mode"},
		{"127.0.0.1", afxdp.Options{}, "not an Ethernet interface"},
	} {
		c2, err := afxdp.Listen(netip.MustParseAddr(c.addr), c.o)
		if err == nil {
			c2.Close()
			t.Errorf("Listen(%s, %+v) succeeded", c.addr, c.o)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Listen(%s, %+v): %v; want an error about %q", c.addr, c.o, err, c.want)
		}
	}
}

// Packets to the Conn's own address never reach the interface (the kernel
// would route them through lo): Transmit loops them back to Receive, in
// order with the rest, as rdma_rxe does; when the loopback queue is full
// they fail with an error and the others of the batch go.
func TestNetnsLoopback(t *testing.T) {
	p := newPair(t)
	a := listenIn(t, p.A, p.AddrA, afxdp.Options{Frames: 64})
	b := listenIn(t, p.B, p.AddrB, afxdp.Options{Frames: 64})
	packetiotest.Send(t, a, a, 40, 8, 300)
	got := packetiotest.Recv(t, a, 8, 5*time.Second)
	packetiotest.Check(t, got, a, a, 40, 300)
	if got[0].Port != wire.RoCEv2Port {
		t.Errorf("looped-back packet from port %d", got[0].Port)
	}
	// Mixed with traffic from the peer.
	packetiotest.Send(t, b, a, 0, 4, 64)
	packetiotest.Send(t, a, a, 100, 4, 64)
	if got := packetiotest.Recv(t, a, 8, 5*time.Second); len(got) != 8 {
		t.Fatalf("got %d", len(got))
	}
	// 32 receive frames: the loopback queue holds 32 packets (once the
	// ones the last Receive returned are released by a Receive).
	if pkts, err := a.Receive(time.Now()); len(pkts) != 0 || err != nil {
		t.Fatalf("Receive = %d, %v", len(pkts), err)
	}
	for i := range 4 {
		packetiotest.Send(t, a, a, i*8, 8, 64)
	}
	batch := a.TxBatch(2)
	for i := range batch {
		batch[i].Buf = append(batch[i].Buf[:0], make([]byte, 64)...)
	}
	batch[0].Addr, batch[1].Addr = p.AddrA, p.AddrB
	if n, err := a.Transmit(batch); n != 1 || err == nil {
		t.Fatalf("Transmit with a full loopback queue = %d, %v", n, err)
	} else {
		t.Logf("full: %v", err)
	}
	packetiotest.Check(t, packetiotest.Recv(t, a, 32, 5*time.Second), a, a, 0, 64)
	packetiotest.Recv(t, b, 1, 5*time.Second)
}

// Generic (SKB) XDP works as native does; forcing zero-copy on a driver
// without it (veth) is refused with an error matching
// packetio.ErrNotSupported, so that callers fall back.
func TestNetnsModes(t *testing.T) {
	p := newPair(t)
	var err error
	p.A.Do(func() error {
		var c *afxdp.Conn
		if c, err = afxdp.Listen(p.AddrA, afxdp.Options{Copy: afxdp.ZeroCopy}); err == nil {
			t.Logf("zero-copy accepted: %s", c.Mode())
			c.Close()
		}
		return nil
	})
	if err != nil {
		t.Logf("zero-copy refused: %v", err)
		if !errors.Is(err, packetio.ErrNotSupported) {
			t.Errorf("zero-copy refused with an error not matching packetio.ErrNotSupported: %v", err)
		}
	}
	a := listenIn(t, p.A, p.AddrA, afxdp.Options{Attach: afxdp.AttachGeneric})
	b := listenIn(t, p.B, p.AddrB, afxdp.Options{Attach: afxdp.AttachGeneric, Copy: afxdp.Copy})
	if a.Mode() != "generic/copy" || b.Mode() != "generic/copy" {
		t.Errorf("modes %s, %s; want generic/copy", a.Mode(), b.Mode())
	}
	for i := range 4 {
		packetiotest.Send(t, a, b, i*32, 32, 1000)
		packetiotest.Check(t, packetiotest.Recv(t, b, 32, 5*time.Second), a, b, i*32, 1000)
		packetiotest.Send(t, b, a, i*32, 32, 200)
		packetiotest.Check(t, packetiotest.Recv(t, a, 32, 5*time.Second), b, a, i*32, 200)
	}
}

// The kernel puts received data Headroom + XDP_PACKET_HEADROOM (256) bytes
// into a frame: with a headroom that leaves exactly 1514 bytes of a 2 KiB
// frame, full-size frames of an MTU-1500 link still arrive whole, in one
// frame; with one byte more headroom a single-buffer Listen refuses the
// MTU, and a multi-buffer one receives full-size frames in two 2 KiB
// frames (and sends them in one), intact.
func TestNetnsHeadroomBoundary(t *testing.T) {
	p := newPair(t)
	const exact = 2048 - 256 - (1500 + 14)
	a := listenIn(t, p.A, p.AddrA, afxdp.Options{Headroom: exact})
	b := listenIn(t, p.B, p.AddrB, afxdp.Options{Headroom: exact})
	if multi, fs := a.MultiBuffer(); multi || fs != 2048 {
		t.Errorf("multi-buffer %v, %d-byte frames; want single-buffer 2048", multi, fs)
	}
	packetiotest.Send(t, a, b, 0, 8, a.MaxPacket())
	packetiotest.Check(t, packetiotest.Recv(t, b, 8, 5*time.Second), a, b, 0, a.MaxPacket())
	if x, err := b.XDPStats(); err != nil || x.RxDropped != 0 {
		t.Fatalf("receiver dropped %d (%v)", x.RxDropped, err)
	}
	a.Close()
	b.Close()
	var err error
	p.A.Do(func() error {
		var c *afxdp.Conn
		if c, err = afxdp.Listen(p.AddrA, afxdp.Options{Headroom: exact + 1, FrameSize: 2048, SingleBuffer: true}); err == nil {
			c.Close()
		}
		return nil
	})
	if !errors.Is(err, afxdp.ErrMTU) {
		t.Fatalf("headroom %d: %v; want ErrMTU", exact+1, err)
	}
	o := afxdp.Options{Headroom: exact + 1, FrameSize: 2048}
	a = listenIn(t, p.A, p.AddrA, o)
	b = listenIn(t, p.B, p.AddrB, o)
	if multi, _ := b.MultiBuffer(); !multi || b.MaxPacket() != 1500-28 {
		t.Fatalf("headroom %d: multi-buffer %v, MaxPacket %d; want multi-buffer, %d", exact+1, multi, b.MaxPacket(), 1500-28)
	}
	packetiotest.Send(t, a, b, 0, 8, a.MaxPacket())
	packetiotest.Check(t, packetiotest.Recv(t, b, 8, 5*time.Second), a, b, 0, a.MaxPacket())
	if x, err := b.XDPStats(); err != nil || x.RxDropped != 0 || x.RxChained != 8 {
		t.Fatalf("receiver: %d chained (want 8), %d dropped (%v)", x.RxChained, x.RxDropped, err)
	}
}
