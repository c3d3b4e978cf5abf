//go:build !linux

package uring

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/packetio"
)

// ErrUnavailable is matched by errors from Listen when the kernel has no
// usable io_uring; it also matches packetio.ErrNotSupported.
var ErrUnavailable = fmt.Errorf("packetio/uring: io_uring unavailable: %w", packetio.ErrNotSupported)

// ErrWrongThread is returned by a single-issuer Conn used from another OS
// thread.
var ErrWrongThread = errors.New("packetio/uring: single-issuer ring used from another OS thread")

// Features tells which io_uring features a Conn uses.
type Features struct {
	Multishot, BufRing, DeferTaskrun, CoopTaskrun, SubmitAll, RegisteredBuffers bool
}

// String lists the features in use.
func (f Features) String() string { return "" }

// Conn is a UDP socket driven through io_uring. It is implemented on Linux
// only.
type Conn struct{}

var _ packetio.Conn = (*Conn)(nil)

// Listen returns an error matching ErrUnavailable: io_uring is Linux only.
func Listen(local netip.Addr, opts Options) (*Conn, error) {
	return nil, fmt.Errorf("%w: Linux only", ErrUnavailable)
}

// Features returns the io_uring features the Conn uses.
func (c *Conn) Features() Features { return Features{} }

// Receive implements packetio.Conn.
func (c *Conn) Receive(deadline time.Time) ([]packetio.Packet, error) {
	return nil, packetio.ErrClosed
}

// TxBatch implements packetio.Conn.
func (c *Conn) TxBatch(n int) []packetio.Packet { return nil }

// Transmit implements packetio.Conn.
func (c *Conn) Transmit(pkts []packetio.Packet) (int, error) { return 0, packetio.ErrClosed }

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

// Close implements packetio.Conn.
func (c *Conn) Close() error { return packetio.ErrClosed }

// Offloads reports that the Conn uses neither GSO nor GRO.
func (c *Conn) Offloads() OffloadStatus {
	return OffloadStatus{GSOReason: "Linux only", GROReason: "Linux only"}
}
