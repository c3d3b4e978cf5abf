package soft

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/verbs"
)

// The GID table of a soft device's port 1, laid out as rdma_rxe's, so that
// the GID index every rxe user types (-g 1, -x 1, -x 2) names the same GID
// here: index 0 the link-local GID, then one GID per IPv4 address of the
// interface that holds the device's address (IPv4-mapped), then one per
// IPv6 address of that interface (link-local ones aside), in the order the
// kernel lists them. A device whose address no interface holds (a pipe,
// another namespace) has GIDs 0 and its address's. The device sends from
// its own address's GID (Device.GIDIndex), which is index 1 for a device on
// an IPv4 address; an address vector may name no other.
const (
	// GIDIndexLinkLocal is the link-local IPv6 GID: fe80::/64 and the
	// modified EUI-64 of the interface's MAC. A QP or address handle may
	// not send from it.
	GIDIndexLinkLocal = 0
	// GIDIndexIPv4 is the IPv4-mapped GID of the interface's first IPv4
	// address (::ffff:a.b.c.d): a device on that address sends from it.
	GIDIndexIPv4 = 1
	// GIDTableLen is the number of GIDs of port 1 of a device on an IPv4
	// address of an interface with no other address (or on no interface);
	// Context.QueryPort tells a device's own.
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
	if ifc := linkOf(addr); ifc != nil && len(ifc.HardwareAddr) == 6 {
		mac := ifc.HardwareAddr
		g[8], g[9], g[10], g[11], g[12] = mac[0]^0x02, mac[1], mac[2], 0xff, 0xfe
		g[13], g[14], g[15] = mac[3], mac[4], mac[5]
		return g
	}
	binary.BigEndian.PutUint64(g[8:], guid)
	return g
}

// linkOf returns the interface that holds addr, in the network namespace
// of the calling goroutine's thread (nil when none does).
func linkOf(addr netip.Addr) *net.Interface {
	addr = addr.Unmap()
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	for i := range ifs {
		for _, a := range ifAddrs(&ifs[i]) {
			if a == addr {
				return &ifs[i]
			}
		}
	}
	return nil
}

// ifAddrs returns the IP addresses of an interface, unmapped, in the
// kernel's order.
func ifAddrs(ifc *net.Interface) []netip.Addr {
	as, err := ifc.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, x.Unmap())
			}
		}
	}
	return out
}

// gidTable returns a device's GID table (see GIDIndexLinkLocal) and the
// index of the GID of addr, the one it sends from.
func gidTable(addr netip.Addr, linkLocal verbs.GID) (gids []verbs.GID, own int) {
	gids = []verbs.GID{linkLocal}
	var addrs []netip.Addr
	if ifc := linkOf(addr); ifc != nil {
		addrs = ifAddrs(ifc)
	}
	for _, v4 := range []bool{true, false} {
		for _, a := range addrs {
			if a.Is4() == v4 && !a.IsLinkLocalUnicast() {
				gids = appendGID(gids, verbs.GIDFromAddr(a))
			}
		}
	}
	gids = appendGID(gids, verbs.GIDFromAddr(addr))
	for i, g := range gids {
		if g == verbs.GIDFromAddr(addr) {
			own = i
		}
	}
	return gids, own
}

// appendGID appends g to gids unless it is there already.
func appendGID(gids []verbs.GID, g verbs.GID) []verbs.GID {
	for _, x := range gids {
		if x == g {
			return gids
		}
	}
	return append(gids, g)
}

// LinkLocalGID returns the device's GID 0, its link-local IPv6 GID.
func (d *Device) LinkLocalGID() verbs.GID { return d.linkLocal }

// GIDIndex returns the index of the device's GID (Device.GID) in its GID
// table: the one its QPs and address handles send from (1 on an IPv4
// address; over IPv6, after the interface's IPv4-mapped GIDs).
func (d *Device) GIDIndex() int { return d.sgid }

// GIDs returns the device's GID table (port 1).
func (d *Device) GIDs() []verbs.GID { return append([]verbs.GID(nil), d.gids...) }

// queryGID returns GID index of port 1.
func (d *Device) queryGID(port uint8, index int) (verbs.GID, error) {
	if port != 1 || index < 0 || index >= len(d.gids) {
		return verbs.GID{}, fmt.Errorf("soft: GID %d/%d: the device has GIDs 0 to %d on port 1: %w", port, index, len(d.gids)-1, verbs.ErrInvalidAttr)
	}
	return d.gids[index], nil
}

// checkSGID checks the source GID index of an address vector: only the
// GID of the device's address can send. Its errors want a "soft: ..."
// prefix.
func (d *Device) checkSGID(i uint8) error {
	switch {
	case int(i) == d.sgid:
		return nil
	case i == GIDIndexLinkLocal:
		return fmt.Errorf("source GID index 0 is the link-local IPv6 GID %v, and the device sends RoCEv2 from %v: use GID index %d, its GID %v: %w",
			d.linkLocal.Addr(), d.addr, d.sgid, d.GID(), verbs.ErrInvalidAttr)
	case int(i) < len(d.gids):
		return fmt.Errorf("source GID index %d is %v, and the device sends RoCEv2 from %v: use GID index %d: %w",
			i, d.gids[i], d.addr, d.sgid, verbs.ErrInvalidAttr)
	case len(d.gids) == 2 && d.addr.Is4():
		return fmt.Errorf("source GID index %d: port 1 has GIDs 0 (link-local) and 1 (IPv4-mapped): %w", i, verbs.ErrInvalidAttr)
	}
	return fmt.Errorf("source GID index %d: port 1 has GIDs 0 (link-local) to %d, the device's own at %d: %w", i, len(d.gids)-1, d.sgid, verbs.ErrInvalidAttr)
}

// checkDGID checks that a destination GID is of the device's address
// family (IPv4-mapped for an IPv4 device, IPv6 for an IPv6 one). Its
// errors want a "soft: ..." prefix.
func (d *Device) checkDGID(g verbs.GID) error {
	switch a := g.Addr(); {
	case d.addr.Is4() && !a.Is4():
		return fmt.Errorf("GID %v is not IPv4-mapped, and the device sends RoCEv2 over IPv4 from %v: %w", g, d.addr, verbs.ErrInvalidAttr)
	case !d.addr.Is4() && a.Is4():
		return fmt.Errorf("GID %v is IPv4-mapped, and the device sends RoCEv2 over IPv6 from %v: %w", g, d.addr, verbs.ErrInvalidAttr)
	}
	return nil
}

// setIP puts the IP header fields the engine gave a packet (its address
// vector's traffic class, hop limit and flow label) into the packet to
// send.
func setIP(p *packetio.Packet, h engine.IPHeader) {
	p.TOS, p.HopLimit, p.FlowLabel = h.TrafficClass, h.HopLimit, h.FlowLabel
}

// GIDIndex returns the index of the GID the QP's device sends from
// (Device.GIDIndex), for connection managers that fill in an address
// vector's source GID index.
func (q *QP) GIDIndex() int { return q.d.sgid }
