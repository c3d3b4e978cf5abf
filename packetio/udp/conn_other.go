//go:build !linux

package udp

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/packetio"
)

// Conn is a UDP socket for RoCEv2 over IPv4. It is implemented on Linux only.
type Conn struct{}

var _ packetio.Conn = (*Conn)(nil)

// Listen returns an error matching packetio.ErrNotSupported: the UDP path is
// implemented on Linux only.
func Listen(local netip.Addr, opts Options) (*Conn, error) {
	return nil, fmt.Errorf("packetio/udp: listen: Linux only: %w", packetio.ErrNotSupported)
}

// Receive implements packetio.Conn.
func (c *Conn) Receive(deadline time.Time) ([]packetio.Packet, error) {
	return nil, packetio.ErrClosed
}

// TxBatch implements packetio.Conn.
func (c *Conn) TxBatch(n int) []packetio.Packet { return nil }

// Transmit implements packetio.Conn.
func (c *Conn) Transmit(pkts []packetio.Packet) (int, error) { return 0, packetio.ErrClosed }

// Offloads reports that no offload is used.
func (c *Conn) Offloads() OffloadStatus {
	return OffloadStatus{GSOReason: "Linux only", GROReason: "Linux only"}
}

// PerPacketSourcePort implements packetio.SourcePorts.
func (c *Conn) PerPacketSourcePort() bool { return false }

// Wake implements packetio.Conn.
func (c *Conn) Wake() {}

// LocalAddr implements packetio.Conn.
func (c *Conn) LocalAddr() netip.Addr { return netip.Addr{} }

// LocalAddrPort returns the local address and UDP port.
func (c *Conn) LocalAddrPort() netip.AddrPort { return netip.AddrPort{} }

// MaxPacket implements packetio.Conn.
func (c *Conn) MaxPacket() int { return 0 }

// Stats implements packetio.Conn.
func (c *Conn) Stats() packetio.Stats { return packetio.Stats{} }

// RxDropped implements packetio.RxDropCounter.
func (c *Conn) RxDropped() uint64 { return 0 }

// SocketBuffers returns the socket's receive and send buffer sizes.
func (c *Conn) SocketBuffers() (recv, send int, err error) {
	return 0, 0, packetio.ErrNotSupported
}

// Close implements packetio.Conn.
func (c *Conn) Close() error { return packetio.ErrClosed }
