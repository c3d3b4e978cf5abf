package pingpong

import (
	"bytes"
	"context"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// softDev opens a soft device on a UDP socket at addr (this package's own
// loopback addresses, 127.0.31.x).
func softDev(t *testing.T, addr string) *soft.Device {
	t.Helper()
	c, err := udp.Listen(netip.MustParseAddr(addr), udp.Options{})
	if err != nil {
		t.Skipf("UDP on %s:4791: %v", addr, err)
	}
	d, err := soft.New(soft.Options{Name: "soft0", Conn: c, ActiveMTU: verbs.MTU1024})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestRun runs both sides of the program, RC, UD and SRQ, polling and on
// events, between two soft devices over real UDP sockets and the real TCP
// exchange, and checks rdma-core's report on each side.
func TestRun(t *testing.T) {
	port := 18631
	for _, tc := range []struct {
		name   string
		typ    verbs.QPType
		size   int
		events bool
		qps    int // SRQ: the QPs sharing it
	}{
		{"rc", verbs.QPTRC, 4096, false, 0},
		{"rc_events", verbs.QPTRC, 100, true, 0},
		{"ud", verbs.QPTUD, 1024, false, 0},
		{"ud_events", verbs.QPTUD, 64, true, 0},
		{"srq", verbs.QPTRC, 4096, false, 16},
		{"srq_events", verbs.QPTRC, 100, true, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port++
			srv, cli := softDev(t, "127.0.31.1"), softDev(t, "127.0.31.2")
			base := Config{Type: tc.typ, Port: port, IBPort: 1, Size: tc.size, MTU: 1024, RxDepth: 100, Iters: 200,
				Events: tc.events, Check: tc.typ == verbs.QPTUD || tc.qps > 0, SRQ: tc.qps > 0, NumQP: tc.qps, Timeout: 30 * time.Second}
			sc, cc := base, base
			cc.Host = "127.0.0.1"
			var sout, cout bytes.Buffer
			done := make(chan error, 1)
			go func() { done <- Run(context.Background(), &sc, srv, &sout) }()
			var cerr error
			for i := 0; i < 100; i++ { // until the server listens
				cout.Reset()
				if cerr = Run(context.Background(), &cc, cli, &cout); cerr == nil || !strings.Contains(cerr.Error(), "refused") {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if cerr != nil {
				t.Fatalf("client: %v\n%s", cerr, cout.String())
			}
			if err := <-done; err != nil {
				t.Fatalf("server: %v\n%s", err, sout.String())
			}
			want := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(itoa(2*tc.size*200)) + ` bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\n200 iters in [0-9.]+ seconds = [0-9.]+ usec/iter\n$`)
			for side, out := range map[string]string{"server": sout.String(), "client": cout.String()} {
				nqp := max(tc.qps, 1)
				if strings.Count(out, "  local address:  LID 0x0000, QPN 0x") != nqp || strings.Count(out, "  remote address: LID") != nqp {
					t.Errorf("%s report lacks the addresses of %d QPs:\n%s", side, nqp, out)
				}
				if !want.MatchString(out) {
					t.Errorf("%s report does not end with the byte and iteration lines:\n%s", side, out)
				}
				if strings.Contains(out, "invalid data") {
					t.Errorf("%s: %s", side, out)
				}
			}
		})
	}
}

// TestRunSRQLimits is srq_pingpong's checks: a receive per QP at least,
// fewer QPs than its 256 addresses.
func TestRunSRQLimits(t *testing.T) {
	d := softDev(t, "127.0.31.4")
	for _, c := range []struct {
		qps, rx int
		want    string
	}{
		{17, 16, "rx_depth 16 is too small for 17 QPs"},
		{256, 500, "num_qp 256 must be 1 to 255"},
	} {
		cfg := Config{Type: verbs.QPTRC, SRQ: true, NumQP: c.qps, Port: 18629, IBPort: 1, Size: 64, MTU: 1024, RxDepth: c.rx, Iters: 1}
		if err := Run(context.Background(), &cfg, d, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d QPs, rx depth %d: %v; want %q", c.qps, c.rx, err, c.want)
		}
	}
}

// TestRunRefusesOversizedUD is ud_pingpong's check: a message larger than
// the port MTU is refused before anything is exchanged.
func TestRunRefusesOversizedUD(t *testing.T) {
	d := softDev(t, "127.0.31.3")
	c := Config{Type: verbs.QPTUD, Port: 18630, IBPort: 1, Size: 2048, RxDepth: 10, Iters: 1}
	err := Run(context.Background(), &c, d, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "requested size larger than port MTU (1024)") {
		t.Fatalf("Run with a 2048-byte UD message on a 1024-byte port: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
