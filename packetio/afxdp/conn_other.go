//go:build !linux

package afxdp

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/packetio"
)

// Conn is the AF_XDP packet path; it exists on Linux only.
type Conn struct{ packetio.Conn }

// Listen returns an error matching packetio.ErrNotSupported: AF_XDP is
// Linux's.
func Listen(local netip.Addr, opts Options) (*Conn, error) {
	return nil, fmt.Errorf("packetio/afxdp: AF_XDP is Linux only: %w", packetio.ErrNotSupported)
}

// Mode is "" (no AF_XDP here).
func (c *Conn) Mode() string { return "" }

// Interface is "" (no AF_XDP here).
func (c *Conn) Interface() string { return "" }

// MultiBuffer is false, 0 (no AF_XDP here).
func (c *Conn) MultiBuffer() (bool, int) { return false, 0 }

// RxDropped is 0 (no AF_XDP here).
func (c *Conn) RxDropped() uint64 { return 0 }
