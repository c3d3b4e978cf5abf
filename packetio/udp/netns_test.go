//go:build linux

package udp_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/wire"
)

// listenIn opens a Conn inside ns; it is closed at the end of the test.
func listenIn(t testing.TB, ns *netns.NS, addr netip.Addr, opts udp.Options) *udp.Conn {
	t.Helper()
	var c *udp.Conn
	if err := ns.Do(func() (err error) {
		c, err = udp.Listen(addr, opts)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The contract suite between two namespaces over veth, on port 4791, with
// an MTU that carries MaxPacket.
func TestNetnsConformance(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 9000})
	packetiotest.Run(t, func(t *testing.T) (packetio.Conn, packetio.Conn) {
		return listenIn(t, p.A, p.AddrA, noGSO()), listenIn(t, p.B, p.AddrB, noGSO())
	})
}

func TestNetnsBatches(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	a := listenIn(t, p.A, p.AddrA, noGSO())
	b := listenIn(t, p.B, p.AddrB, noGSO())
	if a.LocalAddrPort().Port() != wire.RoCEv2Port {
		t.Fatalf("default port %d, want %d", a.LocalAddrPort().Port(), wire.RoCEv2Port)
	}
	for round := range 4 {
		packetiotest.Send(t, a, b, round*32, 32, 1024)
		got := packetiotest.Recv(t, b, 32, 5*time.Second)
		packetiotest.Check(t, got, a, b, round*32, 1024)
		packetiotest.Send(t, b, a, round*32, 32, 1400)
		packetiotest.Check(t, packetiotest.Recv(t, a, 32, 5*time.Second), b, a, round*32, 1400)
		if got[0].Port != wire.RoCEv2Port {
			t.Fatalf("source port %d, want 4791", got[0].Port)
		}
	}
}

// A packet larger than the path MTU is refused with EMSGSIZE (DF: no
// fragmentation); the others of the batch go, and the Conn keeps working.
func TestNetnsEMSGSIZE(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 1500})
	a := listenIn(t, p.A, p.AddrA, noGSO())
	b := listenIn(t, p.B, p.AddrB, noGSO())
	const fits = 1500 - 20 - 8
	sizes := []int{100, fits + 1, 100, fits, 4000}
	batch := a.TxBatch(len(sizes))
	for i, n := range sizes {
		batch[i].Buf = append(batch[i].Buf[:0], bytes.Repeat([]byte{byte(i)}, n)...)
		batch[i].Addr = p.AddrB
	}
	n, err := a.Transmit(batch)
	var te *packetio.TransmitError
	if n != 3 || !errors.As(err, &te) || te.Index != 1 || te.Failed != 2 || te.Addr != p.AddrB || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("Transmit = %d, %v; want 3 sent and EMSGSIZE for packets 1 and 4", n, err)
	}
	t.Logf("Transmit error: %v", err)
	got := packetiotest.Recv(t, b, 3, 5*time.Second)
	for i, want := range []int{0, 2, 3} {
		if len(got[i].Buf) != sizes[want] || got[i].Buf[0] != byte(want) {
			t.Errorf("packet %d: %d bytes of %d, want packet %d", i, len(got[i].Buf), got[i].Buf[0], want)
		}
	}
	if s := a.Stats(); s.TxErrors != 2 || s.PacketsOut != 3 {
		t.Errorf("stats %+v", s)
	}
	packetiotest.Send(t, a, b, 0, 32, 64)
	packetiotest.Recv(t, b, 32, 5*time.Second)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// The kernel sends RoCEv2 datagrams of a Conn with DF set and IPv4
// Identification 0, so that an ICRC computed before sending
// (wire.AppendDatagram over Flow.PseudoHeader) is right on the wire: checked
// on frames captured with an AF_PACKET socket on the receiving veth, with the
// full 32-bit ICRC check.
func TestNetnsDFAndIDZero(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	a := listenIn(t, p.A, p.AddrA, noGSO())
	b := listenIn(t, p.B, p.AddrB, noGSO())

	var sock int
	if err := p.B.Do(func() error {
		ifi, err := net.InterfaceByName(netns.LinkName)
		if err != nil {
			return err
		}
		sock, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
		if err != nil {
			return err
		}
		if err := unix.Bind(sock, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index}); err != nil {
			return err
		}
		return unix.SetsockoptTimeval(sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
	}); err != nil {
		t.Fatalf("AF_PACKET socket: %v", err)
	}
	defer unix.Close(sock)

	fl := wire.Flow{Src: p.AddrA, Dst: p.AddrB, SrcPort: wire.RoCEv2Port}
	hdrs := []wire.Header{
		{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 1, AckReq: true},
		{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 0x22, PSN: 2, DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 0x33}},
		{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 3},
	}
	payloads := [][]byte{[]byte("df and id zero"), bytes.Repeat([]byte{0xA5}, 1024), bytes.Repeat([]byte{0x5A}, 1400)}
	batch := a.TxBatch(len(hdrs))
	for i := range hdrs {
		var err error
		if batch[i].Buf, err = wire.AppendDatagram(batch[i].Buf[:0], &fl, &hdrs[i], payloads[i]); err != nil {
			t.Fatal(err)
		}
		batch[i].Addr = p.AddrB
	}
	sent := make([][]byte, len(batch))
	for i := range batch {
		sent[i] = bytes.Clone(batch[i].Buf)
	}
	if n, err := a.Transmit(batch); n != len(batch) || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}

	buf := make([]byte, 9000)
	seen := 0
	for seen < len(sent) {
		n, from, err := unix.Recvfrom(sock, buf, 0)
		if err != nil {
			t.Fatalf("capture: %v after %d of %d datagrams", err, seen, len(sent))
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype != unix.PACKET_HOST {
			continue
		}
		var f wire.Frame
		if err := wire.ParseIP(buf[:n], &f); err != nil {
			continue // not RoCEv2 (IPv4 only is captured)
		}
		ip := f.IPv4()
		if !ip.DF() || ip.ID() != 0 {
			t.Errorf("datagram %d: DF %v, Identification %#04x; want DF set and Identification 0", seen, ip.DF(), ip.ID())
		}
		if c := f.UDP().Checksum(); c != 0 {
			t.Errorf("datagram %d: UDP checksum %#04x, want 0 (SO_NO_CHECK, as rxe sends)", seen, c)
		}
		if f.UDP().SrcPort() != wire.RoCEv2Port || f.UDP().DstPort() != wire.RoCEv2Port {
			t.Errorf("datagram %d: ports %d -> %d", seen, f.UDP().SrcPort(), f.UDP().DstPort())
		}
		if !bytes.Equal(f.Transport(), sent[seen]) {
			t.Errorf("datagram %d: transport packet differs from the one sent", seen)
		}
		if err := wire.CheckICRC(f.IPUDP(), f.Transport()); err != nil {
			t.Errorf("datagram %d: ICRC over the real IP/UDP header: %v", seen, err)
		}
		seen++
	}
	// And the receiving Conn got the Conn's datagrams intact.
	got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
	for i := range got {
		if !bytes.Equal(got[i].Buf, sent[i]) {
			t.Errorf("received packet %d differs", i)
		}
		var pk wire.Packet
		if err := wire.Parse(got[i].Buf, &pk); err != nil {
			t.Errorf("received packet %d: %v", i, err)
		}
	}

	// Control: a connected socket's datagrams carry non-zero, incrementing
	// Identifications, which the capture sees (and the ICRC then fails).
	var conn *net.UDPConn
	if err := p.A.Do(func() (err error) {
		conn, err = net.DialUDP("udp4", &net.UDPAddr{IP: p.AddrA.AsSlice()}, &net.UDPAddr{IP: p.AddrB.AsSlice(), Port: wire.RoCEv2Port})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range 2 {
		if _, err := conn.Write(sent[0]); err != nil {
			t.Fatal(err)
		}
	}
	var ids []uint16
	for len(ids) < 2 {
		n, from, err := unix.Recvfrom(sock, buf, 0)
		if err != nil {
			t.Fatalf("capture (control): %v", err)
		}
		var f wire.Frame
		if ll, ok := from.(*unix.SockaddrLinklayer); (ok && ll.Pkttype != unix.PACKET_HOST) || wire.ParseIP(buf[:n], &f) != nil {
			continue
		}
		id := f.IPv4().ID()
		ids = append(ids, id)
		if id != 0 && wire.CheckICRC(f.IPUDP(), f.Transport()) == nil {
			t.Errorf("control datagram with Identification %#04x passed an ICRC computed for 0", id)
		}
	}
	if ids[0] == 0 && ids[1] == 0 { // consecutive IDs: at most one is 0
		t.Errorf("control: a connected socket sent Identification 0 twice; is the capture seeing the header?")
	}
	t.Logf("control: connected socket sent Identifications %#04x, %#04x", ids[0], ids[1])
}

// Packets lost on the link (nftables) are just missing; the Conn's counters
// see no error.
func TestNetnsLoss(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	netns.RequireTool(t, "nft")
	a := listenIn(t, p.A, p.AddrA, noGSO())
	b := listenIn(t, p.B, p.AddrB, noGSO())
	if err := p.B.SetLoss(netns.LinkName, 30); err != nil {
		t.Fatal(err)
	}
	const batches = 10
	for i := range batches {
		packetiotest.Send(t, a, b, i*32, 32, 256)
	}
	// The rule counts packets as they cross the link, which may be after
	// Transmit returned: poll both until every packet is accounted for.
	var dropped uint64
	got := 0
	for end := time.Now().Add(5 * time.Second); got+int(dropped) < batches*32 && time.Now().Before(end); {
		pkts, err := b.Receive(time.Now().Add(20 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		got += len(pkts)
		if dropped, err = p.B.LossDropped(netns.LinkName); err != nil {
			t.Fatal(err)
		}
	}
	if pkts, _ := b.Receive(time.Now().Add(20 * time.Millisecond)); len(pkts) != 0 {
		t.Errorf("%d packets more than sent minus dropped", len(pkts))
	}
	if got+int(dropped) != batches*32 || got == 0 || dropped == 0 {
		t.Errorf("received %d + dropped %d, want %d in all, some of each", got, dropped, batches*32)
	}
	if s := b.Stats(); s.RxDrops != 0 || s.PacketsIn != uint64(got) {
		t.Errorf("receiver stats %+v", s)
	}
}

// A Transmit that finds its socket's send buffer full (EAGAIN) waits until
// the buffer drains, in the netpoller on an epoll instance the socket joins
// for the wait, and sends the rest: here a token bucket on the veth holds
// the datagrams back, and the socket's small buffer with them. Every
// datagram arrives, in order.
func TestNetnsTransmitWaitsForSendBuffer(t *testing.T) {
	netns.RequireTool(t, "tc")
	p := netns.NewPair(t, netns.Options{})
	if out, err := p.A.Exec("tc", "qdisc", "add", "dev", netns.LinkName, "root", "tbf",
		"rate", "50mbit", "burst", "32kb", "limit", "8mb"); err != nil {
		t.Skipf("no token bucket qdisc (tbf) here: %v: %s", err, out)
	}
	ao := noGSO()
	ao.SendBuffer = 16 << 10 // the kernel doubles it: 32 KiB
	a := listenIn(t, p.A, p.AddrA, ao)
	bo := noGSO()
	bo.RecvBuffer = 8 << 20
	b := listenIn(t, p.B, p.AddrB, bo)
	const rounds, n, size = 8, 32, 1024 // 256 KiB: 40 ms at 50 Mbit/s
	for round := range rounds {
		packetiotest.Send(t, a, b, round*n, n, size)
	}
	st := a.Stats()
	if st.TxWaits == 0 || st.TxErrors != 0 || st.PacketsOut != rounds*n {
		t.Fatalf("sender: %d waits, %d errors, %d packets out; want waits, no errors and %d packets",
			st.TxWaits, st.TxErrors, st.PacketsOut, rounds*n)
	}
	got := packetiotest.Recv(t, b, rounds*n, 10*time.Second)
	if len(got) != rounds*n {
		t.Fatalf("received %d datagrams, want %d", len(got), rounds*n)
	}
	packetiotest.Check(t, got, a, b, 0, size)
	t.Logf("%d waits for the send buffer", st.TxWaits)
}
