package netns

import (
	"fmt"
	"net"
	"net/netip"
)

// AddIPv6 gives the pair's link ends the IPv6 addresses fd77:N::1 (A) and
// fd77:N::2 (B), N taken from the pair's IPv4 subnet so that the pairs of
// one test run differ, as /64s with no duplicate address detection (usable
// at once), and permanent neighbour entries for each other, and returns
// them.
func (p *Pair) AddIPv6() (a, b netip.Addr, err error) {
	n := p.Prefix.Addr().As4()
	a = netip.MustParseAddr(fmt.Sprintf("fd77:%x::1", n[2]))
	b = a.Next()
	for _, end := range []struct {
		ns         *NS
		addr, peer netip.Addr
		peerMAC    net.HardwareAddr
	}{{p.A, a, b, p.MACB}, {p.B, b, a, p.MACA}} {
		for _, c := range [][]string{
			{"ip", "addr", "add", netip.PrefixFrom(end.addr, 64).String(), "dev", LinkName, "nodad"},
			{"ip", "neigh", "replace", end.peer.String(), "lladdr", end.peerMAC.String(), "dev", LinkName, "nud", "permanent"},
		} {
			if out, err := end.ns.Exec(c...); err != nil {
				return a, b, fmt.Errorf("%v: %w: %s", c, err, out)
			}
		}
	}
	return a, b, nil
}
