//go:build linux

package rocetest

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/packetiotest"
)

// TOSCase is a TOS option of a path (Options.TOS and NoECN) and the TOS
// byte its packets then carry (packetio.SendTOS).
type TOSCase struct {
	Name  string
	TOS   uint8
	NoECN bool
	Want  uint8
}

// TOSCases are the TOS options every path is tested with.
var TOSCases = []TOSCase{
	{"default ECT(0)", 0, false, packetio.ECT0},
	{"DSCP 46", 46 << 2, false, 46<<2 | packetio.ECT0},
	{"ECT(1) as given", packetio.ECT1, false, packetio.ECT1},
	{"CE as given", packetio.CE, false, packetio.CE},
	{"NoECN", 0, true, packetio.NotECT},
	{"DSCP 46 NoECN", 46<<2 | packetio.ECT0, true, 46 << 2},
}

// TOSReceiver opens a plain UDP socket on addr (a port the kernel chooses)
// with IP_RECVTOS, closed at the end of the test; it returns the socket
// and its port.
func TOSReceiver(t testing.TB, addr netip.Addr) (fd int, port uint16) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: addr.As4()}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, uint16(sa.(*unix.SockaddrInet4).Port)
}

// ReadTOS reads one datagram from fd (a TOSReceiver) and returns the TOS
// byte it arrived with.
func ReadTOS(t testing.TB, fd int) uint8 {
	t.Helper()
	buf, oob := make([]byte, 9000), make([]byte, 256)
	_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
	if err != nil {
		t.Fatalf("recvmsg: %v", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1 {
			return m.Data[0]
		}
	}
	t.Fatal("no IP_TOS control message")
	return 0
}

// SendOne sends one packet of 64 bytes from c to to (the destination port
// is c's).
func SendOne(t testing.TB, c packetio.Conn, to netip.Addr) {
	t.Helper()
	b := c.TxBatch(1)
	b[0].Buf = append(b[0].Buf[:0], make([]byte, 64)...)
	b[0].Addr = to
	if n, err := c.Transmit(b[:1]); n != 1 || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
}

// Flood sends n datagrams of size bytes to to from a plain UDP socket on
// from, as fast as it can, without waiting for anyone to read them.
func Flood(t testing.TB, from netip.Addr, to netip.AddrPort, n, size int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: from.As4()}); err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrInet4{Addr: to.Addr().As4(), Port: int(to.Port())}
	buf := make([]byte, size)
	for i := range n {
		buf[0] = byte(i)
		if err := unix.Sendto(fd, buf, 0, sa); err != nil {
			t.Fatalf("sendto %d: %v", i, err)
		}
	}
}

// ProcDrops returns the kernel's count of datagrams dropped by the UDP
// socket bound to a in the calling thread's network namespace: the drops
// column of /proc/thread-self/net/udp.
func ProcDrops(t testing.TB, a netip.AddrPort) uint64 {
	t.Helper()
	f, err := os.Open("/proc/thread-self/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := a.Addr().As4()
	local := fmt.Sprintf("%02X%02X%02X%02X:%04X", b[3], b[2], b[1], b[0], a.Port())
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 2 && fs[1] == local {
			n, err := strconv.ParseUint(fs[len(fs)-1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no UDP socket on %v in /proc/thread-self/net/udp", a)
	return 0
}

// CheckKernelDrops floods c (opened with a receive buffer of a few KiB)
// from a plain socket on from with n datagrams it does not read, so that
// the kernel drops most of them, then reads them, then has one more sent
// (the drops are learnt with the datagrams queued after them) and reads
// it. The Conn's RxDropped and Stats().KernelRxDrops must then both be
// what the kernel counted for the socket (drops, read in ns), which is
// n+1 less those read. It returns that count.
func CheckKernelDrops(t testing.TB, c Conn, from netip.Addr, n int, drops func() uint64) uint64 {
	t.Helper()
	dc, ok := c.(packetio.RxDropCounter)
	if !ok {
		t.Fatalf("%T is no packetio.RxDropCounter", c)
	}
	if d := dc.RxDropped(); d != 0 {
		t.Fatalf("RxDropped %d before any traffic", d)
	}
	Flood(t, from, c.LocalAddrPort(), n, 200)
	got := drain(t, c)
	Flood(t, from, c.LocalAddrPort(), 1, 200)
	got += len(packetiotest.Recv(t, c, 1, 5*time.Second))
	kernel := drops()
	d := dc.RxDropped()
	if d == 0 || d != kernel || d != uint64(n+1-got) || c.Stats().KernelRxDrops != d {
		t.Fatalf("RxDropped %d, Stats().KernelRxDrops %d, kernel's drops %d; %d of %d datagrams read",
			d, c.Stats().KernelRxDrops, kernel, got, n+1)
	}
	if s := c.Stats(); s.RxDrops != 0 {
		t.Errorf("RxDrops %d: the Conn dropped datagrams itself", s.RxDrops)
	}
	return d
}

// drain receives until nothing more comes for 100 ms and returns how many
// packets came.
func drain(t testing.TB, c packetio.Conn) int {
	t.Helper()
	got := 0
	for {
		pkts, err := c.Receive(time.Now().Add(100 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if len(pkts) == 0 {
			return got
		}
		got += len(pkts)
	}
}

// GROAfterDrops sends from a (GSO on, the default TOS) to b (GRO on, after
// CheckKernelDrops: every datagram now carries the socket's drop count)
// one GSO message, which reaches b whole on loopback, with every control
// message the socket asks for: the UDP_GRO segment size, SO_RXQ_OVFL,
// SCM_TIMESTAMPNS, IP_PKTINFO and IP_TOS. None may be cut off: each
// packet comes split out of one GRO buffer with its receive time, local
// address and TOS (ECT(0)), and the drop count stays.
func GROAfterDrops(t testing.TB, a, b Conn) {
	t.Helper()
	before := b.Stats()
	sent := Send(t, a, b.LocalAddr(), b.LocalAddrPort().Port(), Repeat(8, 1040))
	got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
	for i, g := range got {
		if g.TOS != packetio.ECT0 || g.Local != b.LocalAddr() || g.RxTime == 0 || g.GROSeg != uint16(i) && g.GROSeg != 0 {
			t.Errorf("packet %d: TOS %#x Local %v RxTime %d GROSeg %d", i, g.TOS, g.Local, g.RxTime, g.GROSeg)
		}
	}
	s := b.Stats()
	if s.GROBuffers != before.GROBuffers+1 || s.KernelRxDrops != before.KernelRxDrops || s.KernelRxDrops == 0 {
		t.Errorf("stats before %+v after %+v: want one GRO buffer more, the same kernel drops", before, s)
	}
}
