//go:build linux

package netns_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

func selfNetns(t *testing.T) string {
	t.Helper()
	s, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPair(t *testing.T) {
	tests := []struct {
		name       string
		opts       netns.Options
		wantA      string
		wantPrefix int
		wantMTU    string
	}{
		{"defaults", netns.Options{}, "", 24, "mtu 1500"},
		{"slash30 mtu9000", netns.Options{Prefix: netip.MustParsePrefix("192.168.77.4/30"), MTU: 9000}, "192.168.77.5", 30, "mtu 9000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := netns.NewPair(t, tt.opts)
			if tt.wantA != "" && p.AddrA.String() != tt.wantA {
				t.Errorf("AddrA = %v, want %v", p.AddrA, tt.wantA)
			}
			if p.AddrB != p.AddrA.Next() || !p.Prefix.Contains(p.AddrA) || p.Prefix.Bits() != tt.wantPrefix {
				t.Errorf("addresses %v %v in %v", p.AddrA, p.AddrB, p.Prefix)
			}
			for _, end := range []struct {
				ns   *netns.NS
				addr netip.Addr
			}{{p.A, p.AddrA}, {p.B, p.AddrB}} {
				out, err := end.ns.Exec("ip", "addr", "show", "dev", netns.LinkName)
				if err != nil {
					t.Fatal(err)
				}
				if s := string(out); !strings.Contains(s, "inet "+netip.PrefixFrom(end.addr, p.Prefix.Bits()).String()) || !strings.Contains(s, tt.wantMTU) || !strings.Contains(s, "UP") {
					t.Errorf("%s: %s", end.ns.Name, s)
				}
			}
			if !strings.Contains(p.A.Name, "goroce-") || p.A.Name == p.B.Name {
				t.Errorf("names %q %q", p.A.Name, p.B.Name)
			}
		})
	}
}

// Do switches only its own thread, sockets opened inside stay in the
// namespace, and the pair's link carries UDP both ways.
func TestDoAndLink(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	runtime.LockOSThread()
	before := selfNetns(t)
	runtime.UnlockOSThread()

	var inside string
	var rx *net.UDPConn
	err := p.B.Do(func() error {
		var err error
		inside, err = os.Readlink("/proc/thread-self/ns/net")
		if err != nil {
			return err
		}
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.AddrB.AsSlice(), Port: 9999})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	runtime.LockOSThread()
	after := selfNetns(t)
	runtime.UnlockOSThread()
	if inside == before || after != before {
		t.Fatalf("netns before %s, inside Do %s, after %s", before, inside, after)
	}

	var tx *net.UDPConn
	if err := p.A.Do(func() error {
		var err error
		tx, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.AddrB.AsSlice(), Port: 9999})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if _, err := tx.Write([]byte("across")); err != nil {
		t.Fatal(err)
	}
	rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, from, err := rx.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != "across" || !from.IP.Equal(p.AddrA.AsSlice()) {
		t.Fatalf("read %q from %v: %v", buf[:n], from, err)
	}

	// Errors and panics come back.
	want := errors.New("inside")
	if err := p.A.Do(func() error { return want }); err != want {
		t.Errorf("Do returned %v", err)
	}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want boom", v)
			}
		}()
		p.A.Do(func() error { panic("boom") })
	}()
}

func TestNew(t *testing.T) {
	ns := netns.New(t)
	out, err := ns.Exec("ip", "-o", "link")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; lines != 1 || !strings.Contains(string(out), "lo: <LOOPBACK,UP") {
		t.Fatalf("a new namespace should hold only lo, up: %s", out)
	}
	if _, err := ns.Exec("false"); err == nil {
		t.Error("Exec(false) succeeded")
	}
}

func TestCleanupDeletes(t *testing.T) {
	netns.Require(t)
	var names []string
	t.Run("pair", func(t *testing.T) {
		p := netns.NewPair(t, netns.Options{})
		names = []string{p.A.Name, p.B.Name}
	})
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); !os.IsNotExist(err) {
			t.Errorf("namespace %s still exists after the test: %v", n, err)
		}
	}
}

func TestSetLoss(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	netns.RequireTool(t, "nft")
	var rx, tx *net.UDPConn
	if err := p.B.Do(func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.AddrB.AsSlice(), Port: 9999})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := p.A.Do(func() (err error) {
		tx, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.AddrB.AsSlice(), Port: 9999})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	count := func(send int) int {
		for range send {
			if _, err := tx.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		got := 0
		buf := make([]byte, 16)
		for {
			rx.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := rx.Read(buf); err != nil {
				return got
			}
			got++
		}
	}
	if err := p.B.SetLoss(netns.LinkName, 100); err != nil {
		t.Fatal(err)
	}
	if got := count(20); got != 0 {
		t.Errorf("100%% loss: %d of 20 arrived", got)
	}
	if d, err := p.B.LossDropped(netns.LinkName); err != nil || d < 20 {
		t.Errorf("LossDropped = %d, %v; want >= 20", d, err)
	}
	if err := p.B.SetLoss(netns.LinkName, 50); err != nil { // replaces
		t.Fatal(err)
	}
	if got := count(200); got < 40 || got > 160 {
		t.Errorf("50%% loss: %d of 200 arrived", got)
	}
	if err := p.B.SetLoss(netns.LinkName, 0); err != nil {
		t.Fatal(err)
	}
	if got := count(20); got != 20 {
		t.Errorf("no loss: %d of 20 arrived", got)
	}
	if err := p.B.SetLoss(netns.LinkName, 101); err == nil {
		t.Error("SetLoss(101) succeeded")
	}
}
