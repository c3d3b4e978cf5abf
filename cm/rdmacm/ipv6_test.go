//go:build linux

package rdmacm_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// rdma_cm over IPv6 between two namespaces whose veths hold an IPv4 and an
// IPv6 address each: the soft devices on the IPv6 ones send from GID index
// 2 (after the IPv4-mapped GID, as rdma_rxe), which the connection's QPs
// take; Dial and Listen take bracketed IPv6 addresses; the REQ's traffic
// class and hop limit (64, rdma_cm's) go into both QPs' address vectors and
// on the wire (an AF_PACKET capture on B's veth: every RC packet with the
// DSCP asked for, ECT(0), hop limit 64), and a SEND crosses the connection.
func TestIPv6DialListen(t *testing.T) {
	netns.Require(t)
	p := netns.NewPair(t, netns.Options{})
	a6, b6, err := p.AddIPv6()
	if err != nil {
		t.Fatal(err)
	}
	// The device is made in its namespace: its GID table lists the
	// addresses of the interface there.
	devIn := func(ns *netns.NS, a netip.Addr) *soft.Device {
		var d *soft.Device
		if err := ns.Do(func() error {
			c, err := udp.Listen(a, udp.Options{})
			if err != nil {
				return err
			}
			if d, err = soft.New(soft.Options{Conn: c}); err != nil {
				c.Close()
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	var capt int
	if err := p.B.Do(func() error {
		ifi, err := net.InterfaceByName(netns.LinkName)
		if err != nil {
			return err
		}
		proto := uint16(0x0300) // ETH_P_ALL in network byte order: both directions
		if capt, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, int(proto)); err != nil {
			return err
		}
		return unix.Bind(capt, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index})
	}); err != nil {
		t.Fatalf("capture: %v", err)
	}
	defer unix.Close(capt)

	devA, devB := devIn(p.A, a6), devIn(p.B, b6)
	if devA.GIDIndex() != 2 {
		t.Fatalf("device on %v sends from GID %d, want 2", a6, devA.GIDIndex())
	}
	a, b := newSide(t, devA), newSide(t, devB)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := rdmacm.Listen(ctx, devB, "[::]:7175")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a.postRecv(t)
	dialed := make(chan error, 1)
	var ca *rdmacm.Conn
	go func() {
		var err error
		ca, err = rdmacm.Dial(ctx, devA, "["+b6.String()+"]:7175", a.qp, rdmacm.DialOptions{TrafficClass: 0x68})
		dialed <- err
	}()
	req, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if req.Peer().Addr() != a6 || req.Local() != netip.AddrPortFrom(b6, 7175) {
		t.Fatalf("request from %v to %v", req.Peer(), req.Local())
	}
	b.postRecv(t)
	cb, err := req.Accept(ctx, b.qp, rdmacm.AcceptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	for _, s := range []*side{a, b} {
		q, _ := s.qp.Query()
		if q.State != verbs.QPSRTS || q.AHAttr.SGIDIndex != 2 || q.AHAttr.TrafficClass != 0x68 || q.AHAttr.HopLimit != 64 || q.AHAttr.DGID.Addr().Is4() {
			t.Fatalf("QP %+v", q)
		}
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 16, LKey: a.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if wc := a.poll(t); wc.Status != verbs.WCSuccess {
		t.Fatalf("A's completion %+v", wc)
	}
	if wc := b.poll(t); wc.Status != verbs.WCSuccess || wc.ByteLen != 16 {
		t.Fatalf("B's completion %+v", wc)
	}
	buf := make([]byte, 1<<16)
	rc := 0
	for {
		n, _, err := unix.Recvfrom(capt, buf, 0)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var f wire.Frame
		if wire.ParseIP(buf[:n], &f) != nil || f.IPVersion != 6 || f.UDP().DstPort() != wire.RoCEv2Port {
			continue
		}
		tr := f.Transport()
		if wire.BTH(tr).DestQP() == 1 { // the CM's MADs
			continue
		}
		rc++
		if ip := f.IPv6(); ip.TrafficClass() != 0x6A || ip.HopLimit() != 64 {
			t.Errorf("%v %v -> %v: traffic class %#02x hop limit %d, want 0x6a and 64", wire.Opcode(tr[0]), ip.Src(), ip.Dst(), ip.TrafficClass(), ip.HopLimit())
		}
	}
	if rc < 2 {
		t.Errorf("captured %d RC packets, want the SEND and its ACK", rc)
	}
}
