//go:build linux

package rping

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/leakcheck"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func newDev(t *testing.T, addr string) *soft.Device {
	t.Helper()
	c, err := udp.Listen(netip.MustParseAddr(addr), udp.Options{})
	if err != nil {
		t.Skipf("UDP socket on %v: %v", addr, err)
	}
	d, err := soft.New(soft.Options{Conn: c})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// wantPings is what rping -v prints for count pings of size bytes.
func wantPings(prefix string, count, size int) string {
	var b strings.Builder
	ch := byte(65)
	for ping := range count {
		s := []byte(fmt.Sprintf("rdma-ping-%d: ", ping))
		for x := ch; len(s) < size-1; {
			s = append(s, x)
			if x++; x > 122 {
				x = 65
			}
		}
		if ch++; ch > 122 {
			ch = 65
		}
		fmt.Fprintf(&b, "%s%s\n", prefix, s)
	}
	return b.String()
}

// TestRping runs goroce's rping server and client against each other over
// UDP on loopback (-C 50 -V -v), then a persistent server with two clients
// in turn, and checks both sides' output line by line.
func TestRping(t *testing.T) {
	srv, cli := newDev(t, "127.0.11.1"), newDev(t, "127.0.11.2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, size := range []int{64, 26, 5000} {
		var sout, serr, cout bytes.Buffer
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, srv, Config{Server: true, Addr: "127.0.11.1", Size: size, Verbose: true, Timeout: 20 * time.Second}, &sout, &serr)
		}()
		var err error
		for range 100 { // until the server listens
			cout.Reset()
			err = Run(ctx, cli, Config{Addr: "127.0.11.1", Size: size, Count: 50, Verbose: true, Validate: true, Timeout: 20 * time.Second}, &cout, &cout)
			if err == nil || !strings.Contains(err.Error(), "refused") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("-S %d: client: %v", size, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("-S %d: server: %v", size, err)
		}
		if got, want := cout.String(), wantPings("ping data: ", 50, size); got != want {
			t.Fatalf("-S %d: client printed\n%.300s\nwant\n%.300s", size, got, want)
		}
		if got, want := sout.String(), wantPings("server ping data: ", 50, size); got != want {
			t.Fatalf("-S %d: server printed\n%.300s", size, got)
		}
		if !strings.Contains(serr.String(), "server DISCONNECT EVENT") {
			t.Fatalf("server stderr %q", serr.String())
		}
	}

	// Persistent server, two clients in turn.
	pctx, pcancel := context.WithCancel(ctx)
	var sout, serr bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- Run(pctx, srv, Config{Server: true, Port: 7200, Persistent: true}, &sout, &serr) }()
	for i := range 2 {
		var err error
		for range 100 {
			err = Run(ctx, cli, Config{Addr: "127.0.11.1", Port: 7200, Count: 5, Validate: true, Timeout: 20 * time.Second}, &sout, &sout)
			if err == nil || !strings.Contains(err.Error(), "refused") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("persistent server, client %d: %v", i, err)
		}
	}
	pcancel()
	<-done
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{Size: 25}, {Size: 65536}, {Count: -1}, {}} {
		if err := Run(context.Background(), nil, c, nil, nil); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestDeviceAddr(t *testing.T) {
	for _, c := range []struct {
		server    bool
		addr, src string
		want      string
	}{
		{true, "10.0.0.1", "10.0.0.9", "10.0.0.1"}, // the server binds -a
		{true, "", "10.0.0.9", ""},
		{false, "10.0.0.1", "10.0.0.9", "10.0.0.9"}, // the client's -a is the server's
		{false, "10.0.0.1", "", ""},
	} {
		if got := (Config{Server: c.server, Addr: c.addr}).DeviceAddr(c.src); got != c.want {
			t.Errorf("server %v -a %q -I %q: %q, want %q", c.server, c.addr, c.src, got, c.want)
		}
	}
}
