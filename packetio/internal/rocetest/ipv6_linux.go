package rocetest

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/wire"
)

// AddIPv6 is netns.Pair.AddIPv6, failing t on an error.
func AddIPv6(t testing.TB, p *netns.Pair) (a, b netip.Addr) {
	t.Helper()
	a, b, err := p.AddIPv6()
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// Capture reads the IP datagrams that arrive on or leave a device, as the
// kernel hands them to an AF_PACKET socket: what is on the wire.
type Capture struct {
	fd  int
	buf []byte
}

// NewCapture opens a capture on dev inside ns (IPv4 and IPv6), closed at
// the end of the test.
func NewCapture(t testing.TB, ns *netns.NS, dev string) *Capture {
	t.Helper()
	c := &Capture{buf: make([]byte, 1<<16)}
	proto := htons(unix.ETH_P_ALL)
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		if c.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(proto)); err != nil {
			return err
		}
		if err := unix.Bind(c.fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
			unix.Close(c.fd)
			return err
		}
		return unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
	}); err != nil {
		t.Fatalf("AF_PACKET capture on %s: %v", dev, err)
	}
	t.Cleanup(func() { unix.Close(c.fd) })
	return c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Next returns the next RoCEv2 datagram captured (a copy, parsed into f),
// leaving out everything else; it fails the test after 2 s without one.
func (c *Capture) Next(t testing.TB, f *wire.Frame) {
	t.Helper()
	for {
		n, _, err := unix.Recvfrom(c.fd, c.buf, 0)
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		b := append([]byte(nil), c.buf[:n]...)
		if wire.ParseIP(b, f) == nil && f.UDP().DstPort() == wire.RoCEv2Port {
			return
		}
	}
}

// IPFields returns a captured datagram's traffic class (IPv4 TOS), hop
// limit (IPv4 TTL) and IPv6 flow label (0 over IPv4).
func IPFields(f *wire.Frame) (tos, ttl uint8, label uint32) {
	if ip := f.IPv4(); ip != nil {
		return ip.TOS(), ip.TTL(), 0
	}
	ip := f.IPv6()
	return ip.TrafficClass(), ip.HopLimit(), ip.FlowLabel()
}
