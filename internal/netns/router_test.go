//go:build linux

package netns_test

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

// Every host reaches every other through the router, which forwards, and
// the topology's namespaces are gone after the test.
func TestRouter(t *testing.T) {
	var names []string
	t.Run("star", func(t *testing.T) {
		r := netns.NewRouter(t, netns.RouterOptions{Hosts: 3})
		names = append(names, r.Router.Name)
		for _, h := range r.Hosts {
			names = append(names, h.Name)
		}
		out, err := r.Router.Exec("cat", "/proc/sys/net/ipv4/ip_forward")
		if err != nil || strings.TrimSpace(string(out)) != "1" {
			t.Fatalf("router ip_forward = %q, %v", out, err)
		}
		if len(r.Hosts) != 3 || len(r.HostAddrs) != 3 || r.HostAddrs[2].String() != "10.99.2.2" || r.RouterAddrs[2].String() != "10.99.2.1" {
			t.Fatalf("hosts %v, addresses %v, router %v", r.Hosts, r.HostAddrs, r.RouterAddrs)
		}
		// Listen on every host, then send from every host to every other.
		conns := make([]*net.UDPConn, len(r.Hosts))
		for i, h := range r.Hosts {
			if err := h.Do(func() error {
				var err error
				conns[i], err = net.ListenUDP("udp4", &net.UDPAddr{IP: r.HostAddrs[i].AsSlice(), Port: 7000})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer conns[i].Close()
		}
		for i := range r.Hosts {
			for j := range r.Hosts {
				if i == j {
					continue
				}
				msg := fmt.Sprintf("%d->%d", i, j)
				if _, err := conns[i].WriteToUDP([]byte(msg), &net.UDPAddr{IP: r.HostAddrs[j].AsSlice(), Port: 7000}); err != nil {
					t.Fatal(err)
				}
				conns[j].SetReadDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 64)
				n, from, err := conns[j].ReadFromUDP(buf)
				if err != nil || string(buf[:n]) != msg || !from.IP.Equal(r.HostAddrs[i].AsSlice()) {
					t.Fatalf("%s: read %q from %v: %v", msg, buf[:n], from, err)
				}
			}
		}
	})
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.Contains(string(out), n+" ") || strings.Contains(string(out), n+"\n") {
			t.Errorf("namespace %s left behind", n)
		}
	}
}
