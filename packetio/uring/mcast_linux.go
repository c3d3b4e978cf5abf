package uring

import (
	"net/netip"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/mcast"
)

var _ packetio.MulticastJoiner = (*Conn)(nil)

// JoinGroup implements packetio.MulticastJoiner: group, an IPv4 or IPv6
// multicast address of the Conn's family, is joined on the interface that
// holds the Conn's address, on a socket of its own outside the ring (see
// package packetio/internal/mcast) whose datagrams Receive returns first.
func (c *Conn) JoinGroup(group netip.Addr) error {
	if c.closed.Load() {
		return packetio.ErrClosed
	}
	return c.mc.Join(&mcast.Path{Name: "packetio/uring", Local: c.local, MaxPacket: c.maxPacket,
		Netns: func() (int, error) { return mcast.SocketNetns(c.sock) }, Wake: c.Wake}, group)
}

// LeaveGroup implements packetio.MulticastJoiner.
func (c *Conn) LeaveGroup(group netip.Addr) error { return c.mc.Leave("packetio/uring", group) }
