package demo

import (
	"bytes"
	"errors"
	"github.com/goroce/goroce/internal/testenv"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/packetio/uring"
)

// TestDemoUDP runs the demo as `goroce demo` does, over UDP sockets on the
// loopback addresses, and checks its report.
func TestDemoUDP(t *testing.T) {
	var out bytes.Buffer
	pcap := filepath.Join(t.TempDir(), "demo.pcap")
	err := Run(Options{A: netip.MustParseAddr("127.0.3.1"), B: netip.MustParseAddr("127.0.3.2"), Out: &out, Pcap: pcap})
	if testing.Verbose() {
		t.Log("\n" + out.String())
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"=== 1. SEND / RECV ===", "RC_SEND_FIRST(0x00)", "RC_SEND_LAST(0x02)", "RC_ACKNOWLEDGE(0x11)",
		"RC_RDMA_WRITE_FIRST(0x06)", "RC_RDMA_READ_REQUEST(0x0c)", "RC_RDMA_READ_RESPONSE_LAST(0x0f)",
		"RC_COMPARE_SWAP(0x13)", "RC_FETCH_ADD(0x14)", "RC_ATOMIC_ACKNOWLEDGE(0x12)",
		"RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE(0x0b)", "NAK REMOTE_ACCESS_ERROR", "status=REM_ACCESS_ERR",
		"opcode=RECV_RDMA_WITH_IMM", "imm=0x1234abcd", "remote word = 50", "fetched value = 42",
		"7 steps, 0 did not end as expected.",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(s, "ICRC=BAD") || strings.Contains(s, "MALFORMED") {
		t.Error("a packet on the wire was bad")
	}
	if fi, err := os.Stat(pcap); err != nil || fi.Size() < 1000 {
		t.Errorf("pcap not written: %v", err)
	}
}

// TestDemoPipe runs it over the in-memory packet path.
func TestDemoPipe(t *testing.T) {
	a, b := netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.9.0.2")
	ca, cb := pipe.New(a, b, pipe.Options{})
	conns := map[netip.Addr]packetio.Conn{a: ca, b: cb}
	var out bytes.Buffer
	err := Run(Options{A: a, B: b, Out: &out, NewConn: func(l netip.Addr) (packetio.Conn, error) { return conns[l], nil }})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
}

// TestDemoPaths runs the demo over each packet path: io_uring and auto on
// loopback, AF_XDP between two namespaces over veth (each device's packet
// path opened in its namespace).
func TestDemoPaths(t *testing.T) {
	check := func(t *testing.T, out string, err error, path string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"goroce demo: two soft RoCEv2 devices", "7 steps, 0 did not end as expected."} {
			if !strings.Contains(out, want) {
				t.Errorf("report lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "ICRC=BAD") || strings.Contains(out, "MALFORMED") {
			t.Errorf("a packet on the wire was bad:\n%s", out)
		}
	}
	t.Run("uring", func(t *testing.T) {
		if c, err := uring.Listen(netip.MustParseAddr("127.0.3.5"), uring.Options{Port: uring.AnyPort}); err != nil {
			testenv.Skipf(t, testenv.Uring, "io_uring unavailable: %v", err)
		} else {
			c.Close()
		}
		var out bytes.Buffer
		err := Run(Options{A: netip.MustParseAddr("127.0.3.3"), B: netip.MustParseAddr("127.0.3.4"), Out: &out, Path: "uring"})
		check(t, out.String(), err, "uring")
		if !strings.Contains(out.String(), "  packet path: uring") {
			t.Errorf("report does not name the path:\n%s", out.String())
		}
	})
	t.Run("auto", func(t *testing.T) {
		var out bytes.Buffer
		err := Run(Options{A: netip.MustParseAddr("127.0.3.6"), B: netip.MustParseAddr("127.0.3.7"), Out: &out})
		check(t, out.String(), err, "")
	})
	t.Run("afxdp", func(t *testing.T) {
		netns.Require(t)
		p := netns.NewPair(t, netns.Options{})
		var out bytes.Buffer
		err := Run(Options{A: p.AddrA, B: p.AddrB, Out: &out, NewConn: func(local netip.Addr) (c packetio.Conn, err error) {
			ns := p.A
			if local == p.AddrB {
				ns = p.B
			}
			err = ns.Do(func() (err error) {
				c, err = afxdp.Listen(local, afxdp.Options{})
				return err
			})
			return c, err
		}})
		if err != nil && errors.Is(err, packetio.ErrNotSupported) {
			testenv.Skipf(t, testenv.AFXDP, "AF_XDP refused: %v", err)
		}
		if err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		check(t, out.String(), nil, "")
	})
}
