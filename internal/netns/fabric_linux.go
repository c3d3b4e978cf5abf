package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// FabricOptions configure NewFabric.
type FabricOptions struct {
	// Groups[g] is the number of hosts under ToR g (at least one group,
	// 1 to 60 hosts each, at most 60 groups).
	Groups []int
	// MTU of every veth end. Default DefaultMTU.
	MTU int
}

// Fabric is a two-tier leaf-spine topology of namespaces: a spine router,
// one ToR router per group, and hosts each linked to their group's ToR.
// Host h of group g has address 10.98.g.(h+2) (a /32 on its link, its
// gateway 10.98.g.1 the ToR, which routes the group's hosts to each other
// and the rest to the spine); ToR g reaches the spine over 10.97.g.0/30 (spine .1, ToR .2).
// Every neighbour entry is permanent, every router forwards IPv4. Faults
// go in the routers (nftables: Fault).
type Fabric struct {
	Spine *NS
	ToRs  []*NS
	// Hosts are every host, group by group; Group[i] is host i's group,
	// Addrs[i] its address, HostLinks[i] its link's name in its ToR.
	Hosts     []*NS
	Group     []int
	Addrs     []netip.Addr
	HostLinks []string
	// Uplink is the name of each ToR's link to the spine, in the ToR
	// ("uplink"); SpineLinks[g] is ToR g's link in the spine ("t<g>").
	Uplink     string
	SpineLinks []string
}

// claimFabric creates the namespaces: goroce-<pid>-<n>s, ...t<g>, ...h<i>.
func claimFabric(tors, hosts int) (spine *NS, ts, hs []*NS, n int, err error) {
	pid := os.Getpid()
next:
	for n = 0; n < 1<<16; n++ {
		base := "goroce-" + strconv.Itoa(pid) + "-" + strconv.Itoa(n)
		names := []string{base + "s"}
		for g := 0; g < tors; g++ {
			names = append(names, base+"t"+strconv.Itoa(g))
		}
		for i := 0; i < hosts; i++ {
			names = append(names, base+"h"+strconv.Itoa(i))
		}
		var made []*NS
		for _, name := range names {
			exists, err := add(name)
			if err != nil || exists {
				for _, m := range made {
					ip("netns", "del", m.Name)
				}
				if err != nil {
					return nil, nil, nil, 0, err
				}
				continue next
			}
			made = append(made, &NS{Name: name})
		}
		return made[0], made[1 : 1+tors], made[1+tors:], n, nil
	}
	return nil, nil, nil, 0, errors.New("netns: no free namespace name")
}

// NewFabric builds a Fabric, deleted at the end of the test. It skips the
// test when namespaces cannot be created.
func NewFabric(t testing.TB, o FabricOptions) *Fabric {
	t.Helper()
	Require(t)
	total := checkFabricOptions(t, &o)
	spine, tors, hosts, n, err := claimFabric(len(o.Groups), total)
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(func() {
		for _, h := range hosts {
			h.delete(t)
		}
		for _, r := range tors {
			r.delete(t)
		}
		spine.delete(t)
	})
	f := &Fabric{Spine: spine, ToRs: tors, Hosts: hosts, Uplink: "uplink"}
	b := &fabricBuilder{f: f, n: n, mtu: strconv.Itoa(o.MTU)}
	for _, c := range b.build(o.Groups) {
		if err := ip(c...); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range append([]*NS{spine}, tors...) {
		if err := r.Do(func() error {
			return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644)
		}); err != nil {
			t.Fatal(fmt.Errorf("netns: enabling forwarding in %s: %w", r.Name, err))
		}
	}
	return f
}

// checkFabricOptions fails the test unless o has 1 to 60 groups of 1 to
// 60 hosts, sets o.MTU to DefaultMTU when unset, and returns the number of
// hosts.
func checkFabricOptions(t testing.TB, o *FabricOptions) int {
	t.Helper()
	total := 0
	for _, h := range o.Groups {
		if h < 1 || h > 60 {
			t.Fatalf("netns: fabric group of %d hosts: want 1 to 60", h)
		}
		total += h
	}
	if len(o.Groups) < 1 || len(o.Groups) > 60 {
		t.Fatalf("netns: fabric of %d groups: want 1 to 60", len(o.Groups))
	}
	if o.MTU <= 0 {
		o.MTU = DefaultMTU
	}
	return total
}

// fabricBuilder lists the ip commands that wire up f, whose namespaces
// exist but are empty, and fills in f's link names and addresses as it
// goes.
type fabricBuilder struct {
	f    *Fabric
	n    int    // the number in f's namespace names, also in its MAC addresses
	mtu  string // of every veth end
	cmds [][]string
}

// mac returns the address of a veth end: kind 1 is a link between the
// spine and a ToR, kind 2 one between a ToR and a host; x numbers the
// link (the ToR's group, the host), y its end (1 the upper, 2 the lower).
// The fabric's number is in the middle two bytes.
func (b *fabricBuilder) mac(kind, x, y int) net.HardwareAddr {
	return net.HardwareAddr{0x02, byte(0x70 + kind), byte(b.n >> 8), byte(b.n), byte(x), byte(y)}
}

// veth returns the command that creates a veth pair: aName in namespace
// aNS with address aMAC, bName in bNS with bMAC.
func (b *fabricBuilder) veth(aName, aNS string, aMAC net.HardwareAddr, bName, bNS string, bMAC net.HardwareAddr) []string {
	return []string{"link", "add", "name", aName, "netns", aNS, "address", aMAC.String(), "mtu", b.mtu,
		"type", "veth", "peer", "name", bName, "netns", bNS, "address", bMAC.String(), "mtu", b.mtu}
}

// build returns the commands of a fabric whose groups[g] is the number of
// hosts under ToR g: the spine's loopback, then group by group the ToR's
// uplink and its hosts.
func (b *fabricBuilder) build(groups []int) [][]string {
	b.cmds = append(b.cmds, []string{"-n", b.f.Spine.Name, "link", "set", "lo", "up"})
	i := 0
	for g, count := range groups {
		b.uplink(g)
		for h := 0; h < count; h, i = h+1, i+1 {
			b.host(g, h, i)
		}
	}
	return b.cmds
}

// uplink adds the commands that link ToR g to the spine over 10.97.g.0/30,
// with permanent neighbour entries at both ends, a route in the spine to
// the group's 10.98.g.0/24 and the ToR's default route to the spine.
func (b *fabricBuilder) uplink(g int) {
	spine, tor := b.f.Spine, b.f.ToRs[g]
	sl := "t" + strconv.Itoa(g)
	b.f.SpineLinks = append(b.f.SpineLinks, sl)
	sa := netip.AddrFrom4([4]byte{10, 97, byte(g), 1})
	ta := netip.AddrFrom4([4]byte{10, 97, byte(g), 2})
	smac, tmac := b.mac(1, g, 1), b.mac(1, g, 2)
	subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 98, byte(g), 0}), 24)
	b.cmds = append(b.cmds,
		[]string{"-n", tor.Name, "link", "set", "lo", "up"},
		b.veth(sl, spine.Name, smac, "uplink", tor.Name, tmac),
		[]string{"-n", spine.Name, "addr", "add", sa.String() + "/30", "dev", sl},
		[]string{"-n", spine.Name, "link", "set", sl, "up"},
		[]string{"-n", spine.Name, "neigh", "replace", ta.String(), "lladdr", tmac.String(), "dev", sl, "nud", "permanent"},
		[]string{"-n", spine.Name, "route", "add", subnet.String(), "via", ta.String(), "dev", sl},
		[]string{"-n", tor.Name, "addr", "add", ta.String() + "/30", "dev", "uplink"},
		[]string{"-n", tor.Name, "link", "set", "dev", "uplink", "up"},
		[]string{"-n", tor.Name, "neigh", "replace", sa.String(), "lladdr", smac.String(), "dev", "uplink", "nud", "permanent"},
		[]string{"-n", tor.Name, "route", "add", "default", "via", sa.String(), "dev", "uplink"},
	)
}

// host adds the commands that link host i, the h-th of group g, to ToR g:
// the host's 10.98.g.(h+2)/32 with a route to it in the ToR, the gateway
// 10.98.g.1 on the host's link and its default route, and permanent
// neighbour entries at both ends.
func (b *fabricBuilder) host(g, h, i int) {
	tor, hn := b.f.ToRs[g], b.f.Hosts[i]
	gw := netip.AddrFrom4([4]byte{10, 98, byte(g), 1})
	hl := "h" + strconv.Itoa(i)
	ha := netip.AddrFrom4([4]byte{10, 98, byte(g), byte(h + 2)})
	rmac, hmac := b.mac(2, i, 1), b.mac(2, i, 2)
	b.f.Group = append(b.f.Group, g)
	b.f.Addrs = append(b.f.Addrs, ha)
	b.f.HostLinks = append(b.f.HostLinks, hl)
	b.cmds = append(b.cmds,
		b.veth(hl, tor.Name, rmac, LinkName, hn.Name, hmac),
		[]string{"-n", tor.Name, "link", "set", hl, "up"},
		[]string{"-n", tor.Name, "route", "add", ha.String() + "/32", "dev", hl},
		[]string{"-n", tor.Name, "neigh", "replace", ha.String(), "lladdr", hmac.String(), "dev", hl, "nud", "permanent"},
		[]string{"-n", hn.Name, "link", "set", "lo", "up"},
		[]string{"-n", hn.Name, "addr", "add", netip.PrefixFrom(ha, 32).String(), "dev", LinkName},
		[]string{"-n", hn.Name, "link", "set", LinkName, "up"},
		[]string{"-n", hn.Name, "neigh", "replace", gw.String(), "lladdr", rmac.String(), "dev", LinkName, "nud", "permanent"},
		[]string{"-n", hn.Name, "route", "add", gw.String() + "/32", "dev", LinkName, "scope", "link"},
		[]string{"-n", hn.Name, "route", "add", "default", "via", gw.String(), "dev", LinkName},
	)
}

// Fault installs (or with rule "" removes) a named nftables fault in
// router ns: a table inet goroce_fault_<name> with a forward-hook chain
// holding rule, which should end in a verdict such as "counter drop".
// Rules can use numgen random for a share of packets, e.g.
// `udp dport 4791 numgen random mod 1000 < 5 counter drop`.
func (f *Fabric) Fault(ns *NS, name, rule string) error {
	if _, err := os.Stat("/usr/sbin/nft"); err != nil {
		if _, err2 := os.Stat("/sbin/nft"); err2 != nil {
			return fmt.Errorf("netns: fault: nft: %w", ErrNotSupported)
		}
	}
	table := faultTable(name)
	script := "add table inet " + table + "\ndelete table inet " + table + "\n"
	if rule != "" {
		script += fmt.Sprintf("table inet %s {\n\tchain faults {\n\t\ttype filter hook forward priority 0; policy accept;\n\t\t%s\n\t}\n}\n", table, rule)
	}
	_, err := ns.execInput([]byte(script), "nft", "-f", "-")
	return err
}

func faultTable(name string) string {
	return "goroce_fault_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, name)
}

var counterComment = regexp.MustCompile(`counter packets (\d+) bytes \d+ .*comment "([^"]*)"`)

// FaultCounters returns the packet counts of the fault's rules that have
// a counter and a comment, by comment.
func (f *Fabric) FaultCounters(ns *NS, name string) (map[string]uint64, error) {
	out, err := ns.Exec("nft", "list", "table", "inet", faultTable(name))
	if err != nil {
		return nil, err
	}
	m := map[string]uint64{}
	for _, c := range counterComment.FindAllSubmatch(out, -1) {
		n, _ := strconv.ParseUint(string(c[1]), 10, 64)
		m[string(c[2])] += n
	}
	return m, nil
}

// ToROf returns host i's ToR.
func (f *Fabric) ToROf(i int) *NS { return f.ToRs[f.Group[i]] }
