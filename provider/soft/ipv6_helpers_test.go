//go:build linux

package soft

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/wire"
)

// ipv6Addrs is netns.Pair.AddIPv6, failing t on an error.
func ipv6Addrs(t testing.TB, p *netns.Pair) (a, b netip.Addr) {
	t.Helper()
	a, b, err := p.AddIPv6()
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// wireCapture reads the frames that cross a device (both ways) through an
// AF_PACKET socket with a large buffer: what is on the wire, IP headers
// included.
type wireCapture struct{ fd int }

func newWireCapture(t testing.TB, ns *netns.NS, dev string) *wireCapture {
	t.Helper()
	c := &wireCapture{}
	proto := uint16(unix.ETH_P_ALL)<<8 | uint16(unix.ETH_P_ALL)>>8
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		if c.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, int(proto)); err != nil {
			return err
		}
		unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
		return unix.Bind(c.fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index})
	}); err != nil {
		t.Fatalf("AF_PACKET capture on %s: %v", dev, err)
	}
	t.Cleanup(func() { unix.Close(c.fd) })
	return c
}

// frames returns the RoCEv2 frames captured so far (Ethernet, parsed).
func (c *wireCapture) frames(t testing.TB) []wire.Frame {
	t.Helper()
	var out []wire.Frame
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) {
			return out
		}
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		var f wire.Frame
		if wire.ParseFrame(append([]byte(nil), buf[:n]...), &f) == nil && f.L4 > 0 && f.UDP().DstPort() == wire.RoCEv2Port {
			out = append(out, f)
		}
	}
}

// ipFields returns a frame's traffic class (IPv4 TOS), hop limit (TTL) and
// IPv6 flow label.
func ipFields(f *wire.Frame) (tos, ttl uint8, label uint32) {
	if ip := f.IPv4(); ip != nil {
		return ip.TOS(), ip.TTL(), 0
	}
	ip := f.IPv6()
	return ip.TrafficClass(), ip.HopLimit(), ip.FlowLabel()
}
