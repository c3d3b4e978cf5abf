package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"
)

// claimRouter creates the namespaces of a Router with hosts hosts, named
// goroce-<pid>-<n>r (the router) and goroce-<pid>-<n>h<i> after the first
// number n for which none of the names exists.
func claimRouter(hosts int) (r *NS, hs []*NS, n int, err error) {
	pid := os.Getpid()
	names := func(n int) []string {
		base := "goroce-" + strconv.Itoa(pid) + "-" + strconv.Itoa(n)
		s := []string{base + "r"}
		for i := 0; i < hosts; i++ {
			s = append(s, base+"h"+strconv.Itoa(i))
		}
		return s
	}
next:
	for n = 0; n < 1<<16; n++ {
		var made []string
		for _, name := range names(n) {
			exists, err := add(name)
			if err != nil || exists {
				for _, m := range made {
					ip("netns", "del", m)
				}
				if err != nil {
					return nil, nil, 0, err
				}
				continue next
			}
			made = append(made, name)
		}
		r = &NS{Name: made[0]}
		for _, name := range made[1:] {
			hs = append(hs, &NS{Name: name})
		}
		return r, hs, n, nil
	}
	return nil, nil, 0, errors.New("netns: no free namespace name")
}

// NewRouter creates a Router: opts.Hosts host namespaces each joined to a
// router namespace by a veth link, with addresses, routes, permanent
// neighbour entries, loopback up and IPv4 forwarding in the router. Every
// namespace is deleted at the end of the test. It skips the test when
// namespaces cannot be created.
func NewRouter(t testing.TB, opts RouterOptions) *Router {
	t.Helper()
	Require(t)
	if opts.Hosts == 0 {
		opts.Hosts = 4
	}
	if opts.Hosts < 1 || opts.Hosts > 200 {
		t.Fatalf("netns: %d hosts: want 1 to 200", opts.Hosts)
	}
	if opts.MTU <= 0 {
		opts.MTU = DefaultMTU
	}
	prefix := opts.Prefix.Masked()
	if !opts.Prefix.IsValid() {
		prefix = netip.MustParsePrefix("10.99.0.0/16")
	}
	if !prefix.Addr().Is4() || prefix.Bits() != 16 {
		t.Fatalf("netns: router prefix %v: want an IPv4 /16", opts.Prefix)
	}
	r, hs, n, err := claimRouter(opts.Hosts)
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(func() {
		for _, h := range hs {
			h.delete(t)
		}
		r.delete(t)
	})
	rt := &Router{Router: r, Hosts: hs, MTU: opts.MTU}
	mtu := strconv.Itoa(opts.MTU)
	base := prefix.Addr().As4()
	cmds := [][]string{
		{"-n", r.Name, "link", "set", "lo", "up"},
	}
	for i, h := range hs {
		sub := netip.PrefixFrom(netip.AddrFrom4([4]byte{base[0], base[1], byte(i), 0}), 24)
		ra, ha := sub.Addr().Next(), sub.Addr().Next().Next()
		rmac := net.HardwareAddr{0x02, 0x78, byte(n >> 8), byte(n), byte(i), 1}
		hmac := net.HardwareAddr{0x02, 0x78, byte(n >> 8), byte(n), byte(i), 2}
		rl := "h" + strconv.Itoa(i)
		rt.HostAddrs = append(rt.HostAddrs, ha)
		rt.RouterAddrs = append(rt.RouterAddrs, ra)
		rt.RouterLinks = append(rt.RouterLinks, rl)
		rt.Prefixes = append(rt.Prefixes, sub)
		cmds = append(cmds,
			[]string{"link", "add", "name", rl, "netns", r.Name, "address", rmac.String(), "mtu", mtu,
				"type", "veth", "peer", "name", LinkName, "netns", h.Name, "address", hmac.String(), "mtu", mtu},
			[]string{"-n", r.Name, "addr", "add", netip.PrefixFrom(ra, 24).String(), "dev", rl},
			[]string{"-n", r.Name, "link", "set", rl, "up"},
			[]string{"-n", r.Name, "neigh", "replace", ha.String(), "lladdr", hmac.String(), "dev", rl, "nud", "permanent"},
			[]string{"-n", h.Name, "link", "set", "lo", "up"},
			[]string{"-n", h.Name, "addr", "add", netip.PrefixFrom(ha, 24).String(), "dev", LinkName},
			[]string{"-n", h.Name, "link", "set", LinkName, "up"},
			[]string{"-n", h.Name, "neigh", "replace", ra.String(), "lladdr", rmac.String(), "dev", LinkName, "nud", "permanent"},
			[]string{"-n", h.Name, "route", "add", "default", "via", ra.String(), "dev", LinkName},
		)
	}
	for _, c := range cmds {
		if err := ip(c...); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Do(func() error {
		// /proc/sys/net is per namespace: this thread is in the router's.
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644)
	}); err != nil {
		t.Fatal(fmt.Errorf("netns: enabling forwarding in %s: %w", r.Name, err))
	}
	return rt
}
