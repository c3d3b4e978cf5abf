//go:build linux

package verbstest_test

import (
	"net/netip"
	"os/exec"
	"testing"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// TestSoftMcastNetns runs the multicast test with delivery on two soft
// devices over UDP in two network namespaces joined by a veth, with a
// route for 239.0.0.0/8 on it (group 239.1.2.4), and again over IPv6
// (group ff0e::1:4).
func TestSoftMcastNetns(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "ipv4"
		if v6 {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) {
			p := netns.NewPair(t, netns.Options{})
			a, b, group := p.AddrA, p.AddrB, netip.MustParseAddr("239.1.2.4")
			if v6 {
				var err error
				if a, b, err = p.AddIPv6(); err != nil {
					t.Fatal(err)
				}
				group = netip.MustParseAddr("ff0e::1:4")
			} else {
				for _, ns := range []*netns.NS{p.A, p.B} {
					if out, err := exec.Command("ip", "-n", ns.Name, "route", "add", "239.0.0.0/8", "dev", netns.LinkName).CombinedOutput(); err != nil {
						t.Fatalf("multicast route in %s: %v\n%s", ns.Name, err, out)
					}
				}
			}
			ctx := func(ns *netns.NS, addr netip.Addr) (verbs.Context, int) {
				var d *soft.Device
				if err := ns.Do(func() (err error) {
					d, _, err = soft.Open(soft.OpenOptions{Name: "mc", Addr: addr.String(), Path: "udp"})
					return err
				}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { d.Close() })
				c, err := d.Open()
				if err != nil {
					t.Fatal(err)
				}
				return c, d.GIDIndex()
			}
			ca, ga := ctx(p.A, a)
			cb, gb := ctx(p.B, b)
			verbstest.RunMcast(t, verbstest.Env{A: ca, B: cb, GIDIndexA: ga, GIDIndexB: gb, McastGroup: group})
		})
	}
}
