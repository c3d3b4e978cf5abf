//go:build linux

package afxdp

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/wire"
)

// neighbours finds the destination MAC address of a packet: the route to
// the destination (it must leave through the Conn's interface), then the
// neighbour table entry of its next hop (the gateway, or the destination on
// a connected route). An unknown or unresolved neighbour is resolved by the
// kernel: an RTM_NEWNEIGH request with NTF_USE makes it create the entry
// and send an ARP request, as it would for a packet of its own; Transmit
// waits for the answer up to ResolveTimeout.
//
// Results are cached per destination for NeighbourTTL, so that the hot path
// is one map lookup. The netlink socket is opened in the namespace of the
// caller of Listen and stays there, whichever thread transmits later.
type neighbours struct {
	h       *netlink.Handle
	ifindex int
	timeout time.Duration
	ttl     time.Duration
	cache   map[netip.Addr]neighEntry
}

type neighEntry struct {
	mac     wire.MAC
	expires int64 // unix nanoseconds
}

func newNeighbours(h *netlink.Handle, ifindex int, timeout, ttl time.Duration) *neighbours {
	return &neighbours{h: h, ifindex: ifindex, timeout: timeout, ttl: ttl, cache: make(map[netip.Addr]neighEntry)}
}

// lookup returns the MAC address to send a packet for dst to. now is
// time.Now().UnixNano().
func (n *neighbours) lookup(dst netip.Addr, now int64) (wire.MAC, error) {
	if dst.IsMulticast() { // a group: its MAC address, no neighbour
		return multicastMAC(dst.Unmap()), nil
	}
	if e, ok := n.cache[dst]; ok && now < e.expires {
		return e.mac, nil
	}
	mac, err := n.resolve(dst)
	if err != nil {
		delete(n.cache, dst)
		return mac, err
	}
	n.cache[dst] = neighEntry{mac: mac, expires: now + int64(n.ttl)}
	return mac, nil
}

const usableNUD = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// resolve asks the kernel (slow path).
func (n *neighbours) resolve(dst netip.Addr) (wire.MAC, error) {
	var mac wire.MAC
	routes, err := n.h.RouteGet(dst.AsSlice())
	if err != nil {
		return mac, fmt.Errorf("%w: route to %v: %w", packetio.ErrNoRoute, dst, err)
	}
	if len(routes) == 0 {
		return mac, fmt.Errorf("%w: no route to %v", packetio.ErrNoRoute, dst)
	}
	r := routes[0]
	if r.LinkIndex != n.ifindex {
		return mac, fmt.Errorf("%w: the route to %v leaves through interface %d, not the AF_XDP interface %d", packetio.ErrNoRoute, dst, r.LinkIndex, n.ifindex)
	}
	hop := dst
	if gw, ok := netip.AddrFromSlice(r.Gw); ok && !gw.Unmap().IsUnspecified() {
		hop = gw.Unmap()
	}
	asked := false
	deadline := time.Now().Add(n.timeout)
	for {
		state, m, err := n.neighbour(hop)
		if err != nil {
			return mac, err
		}
		if state&usableNUD != 0 && len(m) == 6 {
			if state&netlink.NUD_STALE != 0 {
				// The kernel never sees this path's traffic, so it never
				// confirms the entry: have it probe again (without
				// waiting), so that a changed address is learnt.
				n.h.NeighSet(&netlink.Neigh{LinkIndex: n.ifindex, Family: family(hop), IP: hop.AsSlice(), Flags: netlink.NTF_USE})
			}
			return wire.MAC(m), nil
		}
		if !asked || state == 0 || state&netlink.NUD_FAILED != 0 {
			// Unknown, or failed: have the kernel (re)start resolution.
			if err := n.h.NeighSet(&netlink.Neigh{LinkIndex: n.ifindex, Family: family(hop), IP: hop.AsSlice(), Flags: netlink.NTF_USE}); err != nil {
				return mac, fmt.Errorf("packetio/afxdp: resolve %v: %w", hop, err)
			}
			asked = true
		}
		if time.Now().After(deadline) {
			return mac, fmt.Errorf("%w: %v (next hop of %v) after %v", ErrUnresolved, hop, dst, n.timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// neighbour returns the state and link-layer address of hop's entry (state
// 0 when there is none).
func (n *neighbours) neighbour(hop netip.Addr) (int, net.HardwareAddr, error) {
	list, err := n.h.NeighList(n.ifindex, family(hop))
	if err != nil {
		return 0, nil, fmt.Errorf("packetio/afxdp: neighbour table: %w", err)
	}
	for _, e := range list {
		if a, ok := netip.AddrFromSlice(e.IP); ok && a.Unmap() == hop {
			return e.State, e.HardwareAddr, nil
		}
	}
	return 0, nil, nil
}

// family returns a's address family (AF_INET or AF_INET6) for netlink.
func family(a netip.Addr) int {
	if a.Unmap().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}
