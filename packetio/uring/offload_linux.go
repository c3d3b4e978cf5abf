package uring

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/udpsock"
)

// Offloads reports whether the Conn uses GSO and GRO, and why not when it
// does not. GSO may turn off while the Conn runs (a device that cannot
// checksum in hardware makes the kernel refuse GSO with EIO before Linux
// 6.11); it is safe to call from any goroutine.
func (c *Conn) Offloads() OffloadStatus {
	c.offMu.Lock()
	defer c.offMu.Unlock()
	return OffloadStatus{GSO: c.gso.Load(), GSOReason: c.gsoWhy, GRO: c.gro, GROReason: c.groWhy}
}

// probeOffloads decides at Listen whether the socket fd uses GSO and GRO,
// as package udp does. The socket was opened with the UDP checksum on
// unless GSO is off; when GSO turns out unavailable, SO_NO_CHECK is set
// after all.
func (c *Conn) probeOffloads(fd int, o Options) error {
	switch o.GSO {
	case OffloadOff:
		c.gsoWhy = "turned off by Options.GSO"
	default:
		if err := udpsock.ProbeGSO(fd); err != nil {
			if o.GSO == OffloadRequire {
				return udpsock.SysErr("packetio/uring", "UDP GSO: getsockopt UDP_SEGMENT", fmt.Errorf("%w: %w", packetio.ErrNotSupported, err))
			}
			c.gsoWhy = "the kernel lacks UDP_SEGMENT: " + err.Error()
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); err != nil {
				return udpsock.SysErr("packetio/uring", "setsockopt SO_NO_CHECK", err)
			}
		} else {
			c.gso.Store(true)
		}
	}
	switch o.GRO {
	case OffloadOff:
		c.groWhy = "turned off by Options.GRO"
	default:
		if err := udpsock.EnableGRO(fd); err != nil {
			if o.GRO == OffloadRequire {
				return udpsock.SysErr("packetio/uring", "UDP GRO: setsockopt UDP_GRO", fmt.Errorf("%w: %w", packetio.ErrNotSupported, err))
			}
			c.groWhy = "the kernel lacks UDP_GRO: " + err.Error()
		} else {
			c.gro = true
		}
	}
	return nil
}

// turnOffGSO turns GSO off for the Conn after the kernel refused a message
// with EIO: the device cannot do it at all.
func (c *Conn) turnOffGSO(errno unix.Errno) {
	if !c.gso.Load() {
		return
	}
	c.offMu.Lock()
	c.gso.Store(false)
	c.gsoWhy = "the kernel refused a GSO message with EIO (no checksum offload on the device): " + errno.Error()
	c.offMu.Unlock()
}
