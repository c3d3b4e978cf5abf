package afxdp

import (
	"net/netip"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/mcast"
	"github.com/goroce/goroce/wire"
)

var _ packetio.MulticastJoiner = (*Conn)(nil)

// JoinGroup implements packetio.MulticastJoiner: group, an IPv4 or IPv6
// multicast address of the Conn's family, is joined on the Conn's
// interface. The XDP program passes the group's datagrams (not to the
// Conn's address) to the kernel, where a socket of the group's own
// receives them (see package packetio/internal/mcast), and Receive returns
// them first. Sends to a group go to its multicast MAC address
// (01:00:5e and the group's low 23 bits; IPv6: 33:33 and its low 32).
func (c *Conn) JoinGroup(group netip.Addr) error {
	if c.closed.Load() {
		return packetio.ErrClosed
	}
	return c.mc.Join(&mcast.Path{Name: "packetio/afxdp", Local: netip.AddrPortFrom(c.local, c.port), MaxPacket: c.maxPacket,
		Netns: func() (int, error) { return mcast.SocketNetns(c.socks[0].fd) }, Wake: c.Wake}, group)
}

// LeaveGroup implements packetio.MulticastJoiner.
func (c *Conn) LeaveGroup(group netip.Addr) error { return c.mc.Leave("packetio/afxdp", group) }

// multicastMAC is the Ethernet address of IP multicast group g (RFC 1112,
// RFC 2464).
func multicastMAC(g netip.Addr) wire.MAC {
	b := g.As16()
	if g.Is4() {
		a := g.As4()
		return wire.MAC{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}
	}
	return wire.MAC{0x33, 0x33, b[12], b[13], b[14], b[15]}
}
