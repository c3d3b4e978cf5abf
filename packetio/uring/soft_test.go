//go:build linux

package uring_test

import (
	"bytes"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/uring"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// rcEnd is one side of an RC connection between two soft devices.
type rcEnd struct {
	dev *soft.Device
	qp  verbs.QP
	cq  verbs.CQ
	mr  verbs.MR
	gid verbs.GID
}

const mrSize = 256 << 10

// portConn is a Conn that tells its UDP port (udp.Conn and uring.Conn).
type portConn interface {
	packetio.Conn
	LocalAddrPort() netip.AddrPort
}

func openEnd(t testing.TB, conn portConn, name string) *rcEnd {
	t.Helper()
	dev, err := soft.New(soft.Options{Name: name, Conn: conn, SourcePort: conn.LocalAddrPort().Port()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(256, nil)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, mrSize), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	gid, err := ctx.QueryGID(1, verbs.DefaultGIDIndex)
	if err != nil {
		t.Fatal(err)
	}
	return &rcEnd{dev, qp, cq, mr, gid}
}

// connectRC brings both QPs to RTS aimed at each other.
func connectRC(t testing.TB, a, b *rcEnd, mtu verbs.MTU) {
	t.Helper()
	for _, p := range [][2]*rcEnd{{a, b}, {b, a}} {
		me, peer := p[0], p[1]
		steps := []struct {
			attr verbs.QPAttr
			mask verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
				verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: mtu, DestQPN: peer.qp.Num(), RQPSN: 0,
				MaxDestRdAtomic: 4, MinRNRTimer: 1, AHAttr: verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: peer.gid}},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
				verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := me.qp.Modify(&s.attr, s.mask); err != nil {
				t.Fatalf("modify QP to %v: %v", s.attr.State, err)
			}
		}
	}
}

// waitWC polls cq for one completion.
func waitWC(t *testing.T, cq verbs.CQ) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		if cq.Poll(wc) == 1 {
			if wc[0].Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc[0])
			}
			return wc[0]
		}
		time.Sleep(20 * time.Microsecond)
	}
	t.Fatal("no completion within 10 s")
	return verbs.WC{}
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// rcOps runs RDMA WRITE, SEND/RECV and RDMA READ of several sizes from a to
// b and checks every byte. b's memory is only read or written by b's
// device (WRITE, then READ back into a), and by the test after a RECV
// completion, so that the race detector sees every hand-over.
func rcOps(t *testing.T, a, b *rcEnd) {
	sizes := []int{1, 64, 1000, 4096, 65536, mrSize / 2}
	post := func(qp verbs.QP, wr verbs.SendWR) {
		t.Helper()
		if _, err := qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range sizes {
		seed := uint64(i + 1)
		src, back := a.mr.Buf()[:n], a.mr.Buf()[mrSize/2:mrSize/2+n]

		// WRITE a's first half into b's second half, then READ it back
		// into a's second half.
		fill(src, seed)
		clear(back)
		post(a.qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList:     []verbs.SGE{{Addr: a.mr.Addr(), Length: uint32(n), LKey: a.mr.LKey()}},
			RemoteAddr: b.mr.Addr() + mrSize/2, RKey: b.mr.RKey()})
		if wc := waitWC(t, a.cq); wc.Opcode != verbs.WCRDMAWrite {
			t.Fatalf("WRITE completion %+v", wc)
		}
		post(a.qp, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList:     []verbs.SGE{{Addr: a.mr.Addr() + mrSize/2, Length: uint32(n), LKey: a.mr.LKey()}},
			RemoteAddr: b.mr.Addr() + mrSize/2, RKey: b.mr.RKey()})
		if wc := waitWC(t, a.cq); wc.Opcode != verbs.WCRDMARead || int(wc.ByteLen) != n {
			t.Fatalf("READ completion %+v", wc)
		}
		if !bytes.Equal(back, src) {
			t.Fatalf("WRITE then READ of %d bytes: data differs", n)
		}

		// SEND a's first half into a receive posted on b's first half.
		fill(src, seed+100)
		if _, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 3, SGList: []verbs.SGE{{Addr: b.mr.Addr(), Length: mrSize / 2, LKey: b.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
		post(a.qp, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: uint32(n), LKey: a.mr.LKey()}}})
		waitWC(t, a.cq)
		if wc := waitWC(t, b.cq); wc.Opcode != verbs.WCRecv || int(wc.ByteLen) != n {
			t.Fatalf("RECV completion %+v, want %d bytes", wc, n)
		}
		if !bytes.Equal(b.mr.Buf()[:n], src) {
			t.Fatalf("SEND of %d bytes: data differs", n)
		}
	}
}

// Two soft devices over io_uring Conns on loopback: RC WRITE, SEND and
// READ, data verified, over each receive path.
func TestSoftRCLoopback(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			ca, cb := loopbackPair(t, p.listen, uring.Options{})
			a, b := openEnd(t, ca, "uring0"), openEnd(t, cb, "uring1")
			connectRC(t, a, b, verbs.MTU1024)
			rcOps(t, a, b)
			sa, sb := ca.Stats(), cb.Stats()
			t.Logf("conn a %+v", sa)
			if sa.PacketsOut == 0 || sb.PacketsIn != sa.PacketsOut || sa.TxErrors+sb.RxDrops != 0 {
				t.Errorf("stats a %+v b %+v", sa, sb)
			}
		})
	}
}

// netnsPrefix is the veth subnet of this package's namespace tests.
var netnsPrefix = netip.MustParsePrefix("10.79.7.0/24")

// listenIn opens a Conn inside ns; it is closed at the end of the test.
func listenIn(t testing.TB, ns *netns.NS, addr netip.Addr, opts uring.Options) *uring.Conn {
	t.Helper()
	var c *uring.Conn
	if err := ns.Do(func() (err error) {
		c, err = uring.Listen(addr, opts)
		return err
	}); err != nil {
		if strings.Contains(err.Error(), "io_uring unavailable") {
			testenv.Skip(t, testenv.Uring, err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// capture records the frames arriving on the veth of ns (AF_PACKET), until
// stop; or only those leaving it (out).
type capture struct {
	fd     int
	out    bool
	mu     sync.Mutex
	frames [][]byte
	done   chan struct{}
}

func startCapture(t *testing.T, ns *netns.NS) *capture {
	return startCaptureDir(t, ns, false)
}

// startCaptureDir starts a capture on the veth of ns, of the frames it
// sends only when out. A veth with GRO on coalesces what it receives
// before an AF_PACKET socket sees it, but hands it each frame it sends
// after the kernel cut GSO messages.
func startCaptureDir(t *testing.T, ns *netns.NS, out bool) *capture {
	t.Helper()
	c := &capture{done: make(chan struct{}), out: out}
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(netns.LinkName)
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_ALL))
		c.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		if err := unix.Bind(c.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			return err
		}
		unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		return unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	}); err != nil {
		t.Fatalf("capture: %v", err)
	}
	go func() {
		defer close(c.done)
		buf := make([]byte, 65536)
		for {
			n, from, err := unix.Recvfrom(c.fd, buf, 0)
			if err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			if err != nil {
				return // closed by stop
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); c.out && (!ok || ll.Pkttype != unix.PACKET_OUTGOING) {
				continue
			}
			c.mu.Lock()
			c.frames = append(c.frames, bytes.Clone(buf[:n]))
			c.mu.Unlock()
		}
	}()
	return c
}

// stop ends the capture, once no frame came for 50 ms (those queued on
// the socket are read first), and returns the frames.
func (c *capture) stop() [][]byte {
	for n, end := -1, time.Now().Add(2*time.Second); time.Now().Before(end); {
		c.mu.Lock()
		m := len(c.frames)
		c.mu.Unlock()
		if m == n {
			break
		}
		n = m
		time.Sleep(50 * time.Millisecond)
	}
	unix.Shutdown(c.fd, unix.SHUT_RDWR)
	unix.Close(c.fd)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Two soft devices in two network namespaces joined by veth, each on an
// io_uring Conn on port 4791: RC WRITE, SEND and READ of up to 128 KiB with
// data verified; every RoCEv2 frame on B's veth (both ways) is captured and must
// carry DF, Identification 0, UDP checksum 0 and a right 32-bit ICRC. With
// GOROCE_WIRE_CHECK set, the independent wire checker judges the capture.
func TestSoftRCNetns(t *testing.T) {
	p := netns.NewPair(t, netns.Options{Prefix: netnsPrefix})
	// GSO off: every datagram is sent alone, with Identification 0 and
	// UDP checksum 0, which the capture checks (gso_test.go covers GSO).
	ca := listenIn(t, p.A, p.AddrA, noGSO())
	cb := listenIn(t, p.B, p.AddrB, noGSO())
	capB := startCapture(t, p.B)
	a, b := openEnd(t, ca, "uring0"), openEnd(t, cb, "uring1")
	connectRC(t, a, b, verbs.MTU1024)
	rcOps(t, a, b)
	a.dev.Close()
	b.dev.Close()
	frames := capB.stop()

	dir := t.TempDir()
	pcap := filepath.Join(dir, "uring-rc.pcap")
	f, err := os.Create(pcap)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	roce := 0
	for i, fr := range frames {
		var fm wire.Frame
		if err := wire.ParseFrame(fr, &fm); err != nil {
			continue // ARP, IPv6 neighbour discovery, ...
		}
		if fm.UDP().DstPort() != wire.RoCEv2Port {
			continue
		}
		roce++
		ip := fm.IPv4()
		if !ip.DF() || ip.ID() != 0 || fm.UDP().Checksum() != 0 {
			t.Errorf("frame %d: DF %v Identification %#x UDP checksum %#x; want DF, 0, 0", i, ip.DF(), ip.ID(), fm.UDP().Checksum())
		}
		if err := wire.CheckICRC(fm.IPUDP(), fm.Transport()); err != nil {
			t.Errorf("frame %d: %v", i, err)
		}
		if err := w.WritePacket(gopacketCI(len(fr)), fr); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if roce == 0 {
		t.Fatal("no RoCEv2 frame captured")
	}
	t.Logf("captured %d RoCEv2 frames on B's veth, both ways", roce)

	checker := os.Getenv("GOROCE_WIRE_CHECK")
	if checker == "" {
		t.Log("GOROCE_WIRE_CHECK (path of wire-check's check-pcap.sh) not set: the capture is not checked independently")
		return
	}
	out, err := testenv.WireCheckCommand(t, checker, "--pmtu", "1024", pcap).CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	if err != nil || !strings.HasSuffix(last, " 0 failed") {
		t.Fatalf("wire check: %v: %s", err, out)
	}
	t.Logf("wire check: %s", last)
}

func gopacketCI(n int) gopacket.CaptureInfo {
	return gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: n, Length: n}
}
