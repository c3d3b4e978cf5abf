//go:build linux

package main

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/testenv"
)

// TestPingpongIPv6Netns runs goroce pingpong rc and ud between two
// namespaces over IPv6 (RoCEv2 over IPv6): --addr and the server operand
// take IPv6 addresses, and -g 2 names the GID of the IPv6 address, after the
// link-local and IPv4-mapped GIDs of the veth (which holds an IPv4 address
// too), as rdma_rxe numbers them; the reports show the IPv6 GIDs.
func TestPingpongIPv6Netns(t *testing.T) {
	netns.Require(t)
	pair := netns.NewPair(t, netns.Options{})
	n := pair.Prefix.Addr().As4()
	a6 := netip.MustParseAddr(fmt.Sprintf("fd74:%x::1", n[2]))
	b6 := a6.Next()
	for _, e := range []struct {
		ns         *netns.NS
		addr, peer netip.Addr
		mac        string
	}{{pair.A, a6, b6, pair.MACB.String()}, {pair.B, b6, a6, pair.MACA.String()}} {
		for _, c := range [][]string{
			{"ip", "addr", "add", netip.PrefixFrom(e.addr, 64).String(), "dev", netns.LinkName, "nodad"},
			{"ip", "neigh", "replace", e.peer.String(), "lladdr", e.mac, "dev", netns.LinkName, "nud", "permanent"},
		} {
			if out, err := e.ns.Exec(c...); err != nil {
				t.Fatalf("%v: %v: %s", c, err, out)
			}
		}
	}
	for _, typ := range []string{"rc", "ud"} {
		t.Run(typ, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := []string{"pingpong", typ, "-g", "2", "-n", "50", "--timeout", "40s"}
			sout, cout := &testenv.Buffer{}, &testenv.Buffer{}
			ready, sexit := startIn(t, ctx, pair.A, sout, append(args, "--addr", a6.String())...)
			select {
			case <-ready:
			case <-ctx.Done():
				t.Fatal("server did not start")
			}
			_, cexit := startIn(t, ctx, pair.B, cout, append(args, "--addr", b6.String(), a6.String())...)
			cerr, serr := <-cexit, <-sexit
			if cerr != nil || serr != nil {
				t.Fatalf("server: %v\n%s\nclient: %v\n%s", serr, sout.String(), cerr, cout.String())
			}
			size := int64(4096)
			if typ == "ud" {
				size = 1024
			}
			checkPPPair(t, sout.String(), cout.String(), size, 50)
			s, _ := parsePPReport(sout.String())
			if s.local.gid != a6.String() || s.remote.gid != b6.String() {
				t.Errorf("GIDs %s, %s; want %v and %v", s.local.gid, s.remote.gid, a6, b6)
			}
		})
	}
}
