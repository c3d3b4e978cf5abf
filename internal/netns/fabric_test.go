//go:build linux

package netns_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

// A fabric of three groups: a datagram goes from a host to one in its
// group and to one in another; a fault in a ToR drops what it matches.
func TestFabric(t *testing.T) {
	netns.RequireTool(t, "nft")
	f := netns.NewFabric(t, netns.FabricOptions{Groups: []int{2, 2, 1}})
	if len(f.Hosts) != 5 || f.Group[4] != 2 || f.Addrs[4] != netip.MustParseAddr("10.98.2.2") {
		t.Fatalf("fabric: %d hosts, groups %v, addrs %v", len(f.Hosts), f.Group, f.Addrs)
	}
	send := func(from, to int) bool {
		var conn *net.UDPConn
		if err := f.Hosts[to].Do(func() (err error) {
			conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(f.Addrs[to], 4791)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := f.Hosts[from].Do(func() error {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(f.Addrs[to], 4791)))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("x"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, _, err := conn.ReadFromUDP(make([]byte, 16))
		return err == nil
	}
	for _, p := range [][2]int{{0, 1}, {0, 2}, {3, 4}, {4, 0}} {
		if !send(p[0], p[1]) {
			t.Errorf("host %d -> host %d: nothing arrived", p[0], p[1])
		}
	}
	if err := f.Fault(f.ToRs[1], "uplink", `oifname "uplink" udp dport 4791 counter drop`); err != nil {
		t.Fatal(err)
	}
	if send(2, 4) {
		t.Error("host 2 -> host 4 arrived through a ToR whose uplink drops everything")
	}
	if !send(2, 3) {
		t.Error("host 2 -> host 3 (same ToR) did not arrive")
	}
	if err := f.Fault(f.ToRs[1], "uplink", ""); err != nil {
		t.Fatal(err)
	}
	if !send(2, 4) {
		t.Error("host 2 -> host 4 lost after the fault was removed")
	}
}
