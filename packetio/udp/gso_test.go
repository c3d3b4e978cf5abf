//go:build linux

package udp_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/packetio/internal/rocetest"
	"github.com/goroce/goroce/packetio/internal/udpsock"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/wire"
)

// GSO on loopback: rocetest.GSOLoopback, with packets in pieces too.
func TestGSOLoopback(t *testing.T) {
	a, b := loopbackPair(t, udp.Options{GSO: udp.OffloadRequire, GRO: udp.OffloadOff, Batch: 128})
	rocetest.GSOLoopback(t, a, b, true)
}

// TxBatch and Transmit with GSO on and off: rocetest.GSOTxBatch.
func TestGSOTxBatch(t *testing.T) {
	for _, gso := range []udp.Offload{udp.OffloadRequire, udp.OffloadOff} {
		t.Run("gso="+gso.String(), func(t *testing.T) {
			a, b := loopbackPair(t, udp.Options{GSO: gso, GRO: udp.OffloadOff, Batch: 8})
			rocetest.GSOTxBatch(t, a, b, gso == udp.OffloadRequire, udpsock.GSOTxBatch)
		})
	}
}

// Runs are made per source-port socket: packets asking for other source
// ports go as GSO messages of their own socket, with ICRCs for their port.
func TestGSOSourcePorts(t *testing.T) {
	a, b := loopbackPair(t, udp.Options{GSO: udp.OffloadRequire, GRO: udp.OffloadOff, Batch: 64})
	port := b.LocalAddrPort().Port()
	ports := []uint16{a.LocalAddrPort().Port(), 0, 0} // own, and two others the kernel picks
	for i := 1; i < len(ports); i++ {
		ports[i] = freePort(t)
	}
	const per = 8
	batch := a.TxBatch(per * len(ports))
	sent := make(map[uint16][][]byte)
	for i := range batch {
		sp := ports[i%len(ports)] // interleaved: grouping per socket makes the runs
		fl := wire.Flow{Src: a.LocalAddr(), Dst: b.LocalAddr(), SrcPort: sp, DstPort: port}
		batch[i].Buf = rocetest.Packet(t, batch[i].Buf, &fl, 1040, i)
		batch[i].Addr, batch[i].Port = b.LocalAddr(), sp
		sent[sp] = append(sent[sp], bytes.Clone(batch[i].Buf))
	}
	if n, err := a.Transmit(batch); n != len(batch) || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	got := packetiotest.Recv(t, b, len(batch), 5*time.Second)
	byPort := make(map[uint16][]packetiotest.Received)
	for _, p := range got {
		byPort[p.Port] = append(byPort[p.Port], p)
	}
	for _, sp := range ports {
		rocetest.CheckIDs(t, byPort[sp], sent[sp], wire.Flow{Src: a.LocalAddr(), Dst: b.LocalAddr(), SrcPort: sp, DstPort: port}, rocetest.Seq(per))
	}
	if s := a.Stats(); s.GSOMessages != uint64(len(ports)) || s.SourcePortFallbacks != 0 {
		t.Errorf("stats %+v, want %d GSO messages", s, len(ports))
	}
}

// freePort returns a UDP port free on 127.0.0.1 a moment ago.
func freePort(t testing.TB) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

// Transmit with GSO does not allocate.
func TestGSONoAllocs(t *testing.T) {
	a, b := loopbackPair(t, udp.Options{GSO: udp.OffloadRequire, GRO: udp.OffloadOff})
	if allocs := sendRecvAllocs(t, a, b, 1040); allocs != 0 {
		t.Errorf("%v allocations per GSO Transmit and Receive", allocs)
	}
	if s := a.Stats(); s.GSOMessages == 0 {
		t.Errorf("no GSO messages: %+v", s)
	}
}

// sendRecvAllocs returns the allocations of one round of 16 packets of size
// bytes sent from a with one Transmit and received at b.
func sendRecvAllocs(t *testing.T, a, b *udp.Conn, size int) float64 {
	t.Helper()
	fl := wire.Flow{Src: a.LocalAddr(), Dst: b.LocalAddr(), SrcPort: a.LocalAddrPort().Port(), DstPort: b.LocalAddrPort().Port()}
	tmpl := rocetest.Packet(t, nil, &fl, size, 1)
	return testing.AllocsPerRun(50, func() { packetiotest.RoundTrip(a, b, tmpl, 16) })
}

// capture reads Ethernet frames of IPv4 UDP to port 4791 arriving on the
// veth of ns, with an AF_PACKET socket.
type capture struct {
	sock   int
	frames [][]byte
}

func startCaptureIn(t testing.TB, ns *netns.NS) *capture {
	t.Helper()
	c := &capture{sock: -1}
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(netns.LinkName)
		if err != nil {
			return err
		}
		if c.sock, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP))); err != nil {
			return err
		}
		if err := unix.Bind(c.sock, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index}); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(c.sock, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return err
		}
		return unix.SetsockoptTimeval(c.sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
	}); err != nil {
		t.Fatalf("AF_PACKET socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(c.sock) })
	return c
}

// csumNotReady reports whether the PACKET_AUXDATA in oob says the frame's
// checksum is not filled in yet (TP_STATUS_CSUMNOTREADY: a veth passes
// CHECKSUM_PARTIAL packets on, the checksum never computed, as a NIC would).
func csumNotReady(oob []byte) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= 4 {
			return binary.NativeEndian.Uint32(m.Data)&unix.TP_STATUS_CSUMNOTREADY != 0
		}
	}
	return false
}

// fillUDPChecksum computes the UDP checksum of an IPv4 frame as a NIC
// would, for a frame whose checksum the kernel left to the device.
func fillUDPChecksum(f *wire.Frame) {
	u := f.Buf[f.L4:f.End]
	u[6], u[7] = 0, 0
	ip := f.IPv4()
	var s uint32
	add := func(b []byte) {
		for len(b) >= 2 {
			s += uint32(b[0])<<8 | uint32(b[1])
			b = b[2:]
		}
		if len(b) == 1 {
			s += uint32(b[0]) << 8
		}
	}
	add(ip[12:20])
	s += unix.IPPROTO_UDP + uint32(len(u))
	add(u)
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	c := ^uint16(s)
	if c == 0 {
		c = 0xFFFF
	}
	binary.BigEndian.PutUint16(u[6:], c)
}

// next returns the next RoCEv2 frame received.
func (c *capture) next(t testing.TB) ([]byte, *wire.Frame) {
	t.Helper()
	buf := make([]byte, 1<<16)
	oob := make([]byte, 64)
	for {
		n, oobn, _, from, err := unix.Recvmsg(c.sock, buf, oob, 0)
		if err != nil {
			t.Fatalf("capture: %v after %d frames", err, len(c.frames))
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype != unix.PACKET_HOST {
			continue
		}
		fr := bytes.Clone(buf[:n])
		f := new(wire.Frame)
		if wire.ParseFrame(fr, f) != nil || f.UDP().DstPort() != wire.RoCEv2Port {
			continue
		}
		if csumNotReady(oob[:oobn]) {
			fillUDPChecksum(f)
		}
		if err := f.CheckUDPChecksum(); err != nil {
			t.Errorf("captured frame %d: %v", len(c.frames), err)
		}
		c.frames = append(c.frames, fr)
		return fr, f
	}
}

// writePcap writes the captured frames to a pcap file (Ethernet).
func (c *capture) writePcap(t testing.TB, path string) {
	t.Helper()
	le := binary.LittleEndian
	b := le.AppendUint32(nil, 0xa1b2c3d4)
	b = le.AppendUint16(b, 2)
	b = le.AppendUint16(b, 4)
	b = le.AppendUint64(b, 0)
	b = le.AppendUint32(b, 1<<16)
	b = le.AppendUint32(b, 1) // LINKTYPE_ETHERNET
	now := time.Now()
	for _, fr := range c.frames {
		b = le.AppendUint32(b, uint32(now.Unix()))
		b = le.AppendUint32(b, uint32(now.Nanosecond()/1000))
		b = le.AppendUint32(b, uint32(len(fr)))
		b = le.AppendUint32(b, uint32(len(fr)))
		b = append(b, fr...)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// wireCheck runs the independent checker GOROCE_WIRE_CHECK names on pcap,
// or says why it does not run.
func wireCheck(t *testing.T, pcap string, pmtu int) {
	t.Helper()
	checker := os.Getenv("GOROCE_WIRE_CHECK")
	if checker == "" {
		testenv.Skip(t, testenv.WireCheck, "GOROCE_WIRE_CHECK (path of wire-check's check-pcap.sh) is not set")
	}
	out, err := testenv.WireCheckCommand(t, checker, "--pmtu", fmt.Sprint(pmtu), pcap).CombinedOutput()
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	last := lines[len(lines)-1]
	if err != nil || !bytes.HasSuffix(last, []byte(" 0 failed")) {
		t.Fatalf("wire check of %s: %v\n%s", pcap, err, out)
	}
	t.Logf("wire check: %s", last)
}

// Between two namespaces, the GSO messages cross the veth link as one
// datagram per packet (UDP segmentation is off on the sending veth, so the
// kernel cuts the messages before the link): each captured frame has
// DF, IPv4 Identification k for segment k of its message and its own
// lengths, a UDP checksum, and an ICRC that checks on all 32 bits over the
// real headers; the independent wire checker (GOROCE_WIRE_CHECK) agrees;
// and the receiving Conn gets every packet. Every other packet is given to
// Transmit in pieces (Packet.Ext), inside the same GSO messages.
func TestNetnsGSOOnTheWire(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 1500})
	rocetest.SetFeatures(t, p.A, map[string]bool{"tx-udp-segmentation": false})
	a := listenIn(t, p.A, p.AddrA, udp.Options{GSO: udp.OffloadRequire, Batch: 128})
	b := listenIn(t, p.B, p.AddrB, udp.Options{GRO: udp.OffloadOff, Batch: 128})
	capB := startCaptureIn(t, p.B)
	sizes := rocetest.Repeat(70, 1040) // WRITE MIDDLEs of a 1024-byte path MTU: 62 in one message (65507 bytes at most), 8 in the next
	ids := rocetest.Seq(62, 8)
	// Every other packet is given in pieces (a payload left where it lies):
	// on the wire nothing tells them apart.
	sent := rocetest.SendPieces(t, a, p.AddrB, wire.RoCEv2Port, sizes, true)
	for i := range sent {
		_, f := capB.next(t)
		ip := f.IPv4()
		if !ip.DF() || ip.ID() != ids[i] || ip.TotalLen() != wire.IPv4UDPLen+len(sent[i]) {
			t.Errorf("datagram %d: DF %v Identification %d length %d; want DF, %d, %d", i, ip.DF(), ip.ID(), ip.TotalLen(), ids[i], wire.IPv4UDPLen+len(sent[i]))
		}
		if f.UDP().Checksum() == 0 {
			t.Errorf("datagram %d: UDP checksum 0, want one (GSO needs it)", i)
		}
		tr := f.Transport()
		if !bytes.Equal(tr[:len(tr)-wire.ICRCLen], sent[i][:len(sent[i])-wire.ICRCLen]) {
			t.Errorf("datagram %d: transport packet differs from the one sent", i)
		}
		if err := wire.CheckICRC(f.IPUDP(), tr); err != nil {
			t.Errorf("datagram %d (Identification %d): ICRC over the real headers: %v", i, ip.ID(), err)
		}
	}
	got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
	rocetest.CheckIDs(t, got, sent, wire.Flow{Src: p.AddrA, Dst: p.AddrB, SrcPort: wire.RoCEv2Port}, ids)
	if s := a.Stats(); s.GSOMessages != 2 {
		t.Errorf("sender stats %+v, want 2 GSO messages", s)
	}
	pcap := filepath.Join(t.TempDir(), "gso.pcap")
	capB.writePcap(t, pcap)
	wireCheck(t, pcap, 1024)
}
