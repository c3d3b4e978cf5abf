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
	mtu := strconv.Itoa(o.MTU)
	mac := func(kind, a, b int) net.HardwareAddr {
		return net.HardwareAddr{0x02, byte(0x70 + kind), byte(n >> 8), byte(n), byte(a), byte(b)}
	}
	veth := func(aName, aNS string, aMAC net.HardwareAddr, bName, bNS string, bMAC net.HardwareAddr) []string {
		return []string{"link", "add", "name", aName, "netns", aNS, "address", aMAC.String(), "mtu", mtu,
			"type", "veth", "peer", "name", bName, "netns", bNS, "address", bMAC.String(), "mtu", mtu}
	}
	cmds := [][]string{{"-n", spine.Name, "link", "set", "lo", "up"}}
	i := 0
	for g, count := range o.Groups {
		tor := tors[g]
		sl := "t" + strconv.Itoa(g)
		f.SpineLinks = append(f.SpineLinks, sl)
		sa := netip.AddrFrom4([4]byte{10, 97, byte(g), 1})
		ta := netip.AddrFrom4([4]byte{10, 97, byte(g), 2})
		smac, tmac := mac(1, g, 1), mac(1, g, 2)
		subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 98, byte(g), 0}), 24)
		gw := netip.AddrFrom4([4]byte{10, 98, byte(g), 1})
		cmds = append(cmds,
			[]string{"-n", tor.Name, "link", "set", "lo", "up"},
			veth(sl, spine.Name, smac, "uplink", tor.Name, tmac),
			[]string{"-n", spine.Name, "addr", "add", sa.String() + "/30", "dev", sl},
			[]string{"-n", spine.Name, "link", "set", sl, "up"},
			[]string{"-n", spine.Name, "neigh", "replace", ta.String(), "lladdr", tmac.String(), "dev", sl, "nud", "permanent"},
			[]string{"-n", spine.Name, "route", "add", subnet.String(), "via", ta.String(), "dev", sl},
			[]string{"-n", tor.Name, "addr", "add", ta.String() + "/30", "dev", "uplink"},
			[]string{"-n", tor.Name, "link", "set", "dev", "uplink", "up"},
			[]string{"-n", tor.Name, "neigh", "replace", sa.String(), "lladdr", smac.String(), "dev", "uplink", "nud", "permanent"},
			[]string{"-n", tor.Name, "route", "add", "default", "via", sa.String(), "dev", "uplink"},
		)
		for h := 0; h < count; h, i = h+1, i+1 {
			hn := hosts[i]
			hl := "h" + strconv.Itoa(i)
			ha := netip.AddrFrom4([4]byte{10, 98, byte(g), byte(h + 2)})
			rmac, hmac := mac(2, i, 1), mac(2, i, 2)
			f.Group = append(f.Group, g)
			f.Addrs = append(f.Addrs, ha)
			f.HostLinks = append(f.HostLinks, hl)
			cmds = append(cmds,
				veth(hl, tor.Name, rmac, LinkName, hn.Name, hmac),
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
	}
	for _, c := range cmds {
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
