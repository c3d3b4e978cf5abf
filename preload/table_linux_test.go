package preload_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/netns"
)

// TestShimTable measures, in one run between the same two namespaces,
// unmodified ib_write_bw and ib_send_lat on libgoroce-verbs.so against the
// same tests through goroce bench (Go calling the soft engine directly):
// what the C layer costs. Long, and a measurement rather than a check:
// GOROCE_PRELOAD_TABLE=1 runs it; the table is in the log.
func TestShimTable(t *testing.T) {
	if os.Getenv("GOROCE_PRELOAD_TABLE") == "" {
		t.Skip("set GOROCE_PRELOAD_TABLE=1 to measure perftest on the library against goroce bench")
	}
	netns.Require(t)
	need(t, "ib_write_bw", "ib_send_lat")
	l := lib(t)
	bin := filepath.Join(libDir, "goroce")
	if out, err := exec.Command(goTool(), "build", "-o", bin, "github.com/goroce/goroce/cmd/goroce").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pair := netns.NewPair(t, netns.Options{})
	n := "5000"
	bw := []string{"-x", "1", "-n", n, "-s", "65536"}
	lat := []string{"-x", "1", "-n", n, "-s", "2"}
	gbw := []string{"bench", "write_bw", "--addr", "LOCAL", "--path", "udp", "-n", n, "-s", "65536"}
	glat := []string{"bench", "send_lat", "--addr", "LOCAL", "--path", "udp", "-n", n, "-s", "2"}
	rows := []struct {
		label string
		p     program
		col   int // the result line's field: BW average, or t_avg
	}{
		{"ib_write_bw 64 KiB (MB/s), libgoroce-verbs.so", program{name: "ib_write_bw", server: bw, client: append(append([]string{}, bw...), "ADDR")}, 3},
		{"goroce bench write_bw 64 KiB (MB/s)", program{name: bin, server: gbw, client: append(append([]string{}, gbw...), "ADDR"), plain: true}, 3},
		{"ib_send_lat 2 B t_avg (µs), libgoroce-verbs.so", program{name: "ib_send_lat", server: lat, client: append(append([]string{}, lat...), "ADDR")}, 5},
		{"goroce bench send_lat 2 B t_avg (µs)", program{name: bin, server: glat, client: append(append([]string{}, glat...), "ADDR"), plain: true}, 5},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| test (%s iterations, two namespaces, udp path) | result |\n|---|---|\n", n)
	line := regexp.MustCompile(`(?m)^\s*\d+\s+` + n + `\s+.*$`)
	for _, r := range rows {
		srv, cli, err := between(t, pair, l, r.p)
		if err != nil {
			t.Fatalf("%s: %v\nserver:\n%s\nclient:\n%s", r.label, err, srv, cli)
		}
		m := line.FindString(cli)
		f := strings.Fields(m)
		if len(f) <= r.col {
			t.Fatalf("%s: no result line in\n%s", r.label, cli)
		}
		v, err := strconv.ParseFloat(f[r.col], 64)
		if err != nil || v <= 0 {
			t.Fatalf("%s: result %q: %v", r.label, f[r.col], err)
		}
		fmt.Fprintf(&b, "| %s | %.2f |\n", r.label, v)
	}
	t.Log(b.String())
}
