package udp

import (
	"net/netip"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/mcast"
)

var _ packetio.MulticastJoiner = (*Conn)(nil)

// JoinGroup implements packetio.MulticastJoiner: group, an IPv4 or IPv6
// multicast address of the Conn's family, is joined on the interface that
// holds the Conn's address, on a socket of its own (see package
// packetio/internal/mcast) whose datagrams Receive returns first.
func (c *Conn) JoinGroup(group netip.Addr) error {
	if c.closed.Load() {
		return packetio.ErrClosed
	}
	return c.mc.Join(&mcast.Path{Name: "packetio/udp", Local: c.local, MaxPacket: c.maxPacket, Netns: c.netns, Wake: c.Wake}, group)
}

// LeaveGroup implements packetio.MulticastJoiner.
func (c *Conn) LeaveGroup(group netip.Addr) error { return c.mc.Leave("packetio/udp", group) }

// netns returns a descriptor of the socket's network namespace.
func (c *Conn) netns() (int, error) {
	var ns int
	var nsErr error
	if err := c.raw.Control(func(fd uintptr) { ns, nsErr = mcast.SocketNetns(int(fd)) }); err != nil {
		return -1, err
	}
	return ns, nsErr
}
