package soft

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/goroce/goroce/verbs"
)

// The GID table of a soft device's port 1, laid out as rdma_rxe's on an
// IPv4 interface, so that the GID index every rxe user types (-g 1, -x 1)
// names the same GID here.
const (
	// GIDIndexLinkLocal is the link-local IPv6 GID: fe80::/64 and the
	// modified EUI-64 of the interface's MAC. A soft device sends over
	// IPv4 only: a QP or address handle may not send from it.
	GIDIndexLinkLocal = 0
	// GIDIndexIPv4 is the IPv4-mapped GID of the device's address
	// (::ffff:a.b.c.d), the one a soft device sends from.
	GIDIndexIPv4 = 1
	// GIDTableLen is the number of GIDs of port 1.
	GIDTableLen = 2
)

// linkLocalGID is a device's link-local GID: fe80::/64 and the modified
// EUI-64 of the MAC of the interface holding addr (as the kernel's IPv6
// link-local address and rdma_rxe's GID 0). An address no interface with a
// MAC holds (loopback, a pipe, another namespace) has none: then the
// interface ID is the device's GUID, which is derived from the address, so
// that the GID is still unique per device and the same every time.
func linkLocalGID(addr netip.Addr, guid uint64) verbs.GID {
	g := verbs.GID{0: 0xfe, 1: 0x80}
	if mac := linkMAC(addr); len(mac) == 6 {
		g[8], g[9], g[10], g[11], g[12] = mac[0]^0x02, mac[1], mac[2], 0xff, 0xfe
		g[13], g[14], g[15] = mac[3], mac[4], mac[5]
		return g
	}
	binary.BigEndian.PutUint64(g[8:], guid)
	return g
}

// linkMAC returns the hardware address of the interface that holds addr,
// in the network namespace of the calling goroutine's thread (nil when
// none does).
func linkMAC(addr netip.Addr) net.HardwareAddr {
	addr = addr.Unmap()
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	for _, ifc := range ifs {
		as, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == addr {
					return ifc.HardwareAddr
				}
			}
		}
	}
	return nil
}

// LinkLocalGID returns the device's GID 0, its link-local IPv6 GID.
func (d *Device) LinkLocalGID() verbs.GID { return d.linkLocal }

// checkSGID checks the source GID index of an address vector: only the
// IPv4-mapped GID can send. Its errors want a "soft: ..." prefix.
func (d *Device) checkSGID(i uint8) error {
	switch i {
	case GIDIndexIPv4:
		return nil
	case GIDIndexLinkLocal:
		return fmt.Errorf("source GID index 0 is the link-local IPv6 GID %v, and the device sends RoCEv2 over IPv4: use GID index 1, its IPv4-mapped GID %v: %w",
			d.linkLocal.Addr(), d.addr, verbs.ErrInvalidAttr)
	}
	return fmt.Errorf("source GID index %d: port 1 has GIDs 0 (link-local) and 1 (IPv4-mapped): %w", i, verbs.ErrInvalidAttr)
}
