package preload_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/netns"
)

// TestShimTable measures, in one run between the same two namespaces,
// unmodified ib_write_bw and ib_send_lat on libgoroce-verbs.so against the
// same tests through goroce bench (Go calling the soft engine directly):
// what the C layer costs. The library runs as it comes (its Go side on one
// processor) and with GOMAXPROCS=2 (as it ran before it chose one). The
// runs are interleaved, round after round, and each is reported as its
// ratio to goroce bench's run of the same round: a measurement rather than
// a check, long, so GOROCE_PRELOAD_TABLE=1 runs it (GOROCE_PRELOAD_ROUNDS
// rounds, default 3); the table is in the log.
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
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("GOROCE_PRELOAD_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	pair := netns.NewPair(t, netns.Options{})
	var b strings.Builder
	fmt.Fprintf(&b, "\n| test (two namespaces, udp path) | goroce bench | library | ratio | library, GOMAXPROCS=2 | ratio |\n|---|---|---|---|---|---|\n")
	for _, tc := range shimTests(bin) {
		var vals [3][]float64 // bench, library, library with GOMAXPROCS=2
		for range rounds {
			for i, p := range tc.progs {
				v, err := shimRun(t, pair, l, p, tc.n, tc.cols)
				if err != nil {
					t.Fatalf("%s: %v", tc.label, err)
				}
				vals[i] = append(vals[i], v...)
			}
		}
		t.Logf("%s, round by round (bench, library, GOMAXPROCS=2): %v %v %v", tc.label, vals[0], vals[1], vals[2])
		for c, col := range tc.colNames {
			pick := func(k int) float64 { return median(every(vals[k], len(tc.cols), c)) }
			// Each ratio: the median of the rounds' library/bench ratios.
			fmt.Fprintf(&b, "| %s %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", tc.label, col,
				pick(0), pick(1), medianRatio(vals[1], vals[0], len(tc.cols), c), pick(2), medianRatio(vals[2], vals[0], len(tc.cols), c))
		}
	}
	fmt.Fprintf(&b, "\n(medians of %d interleaved rounds; each ratio is the median of the rounds' library/bench ratios)\n", rounds)
	t.Log(b.String())
}

type shimTest struct {
	label    string
	n        string
	cols     []int // the result line's fields reported
	colNames []string
	progs    [3]program // bench, library, library with GOMAXPROCS=2
}

func shimTests(bin string) []shimTest {
	mk := func(label, n string, cols []int, names []string, perftest string, args []string, gverb string) shimTest {
		pa := append([]string{"-x", "1", "-n", n}, args...)
		ga := append([]string{"bench", gverb, "--addr", "LOCAL", "--path", "udp", "-n", n}, args...)
		lib := program{name: perftest, server: pa, client: append(append([]string{}, pa...), "ADDR")}
		lib2 := lib
		lib2.env = []string{"GOMAXPROCS=2"}
		return shimTest{label: label, n: n, cols: cols, colNames: names, progs: [3]program{
			{name: bin, server: ga, client: append(append([]string{}, ga...), "ADDR"), plain: true}, lib, lib2,
		}}
	}
	return []shimTest{
		mk("write_bw 64 KiB", "2000", []int{3}, []string{"BW average (MB/s)"}, "ib_write_bw", []string{"-s", "65536"}, "write_bw"),
		mk("send_lat 2 B", "2000", []int{4, 5}, []string{"t_typical (µs)", "t_avg (µs)"}, "ib_send_lat", []string{"-s", "2"}, "send_lat"),
	}
}

// shimRun runs p and returns the client's result line's fields cols.
func shimRun(t *testing.T, pair *netns.Pair, l string, p program, n string, cols []int) ([]float64, error) {
	srv, cli, err := between(t, pair, l, p)
	if err != nil {
		return nil, fmt.Errorf("%v\nserver:\n%s\nclient:\n%s", err, srv, cli)
	}
	f := strings.Fields(regexp.MustCompile(`(?m)^\s*\d+\s+` + n + `\s+.*$`).FindString(cli))
	var out []float64
	for _, c := range cols {
		if len(f) <= c {
			return nil, fmt.Errorf("no result line in\n%s", cli)
		}
		v, err := strconv.ParseFloat(f[c], 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("result %q: %v", f[c], err)
		}
		out = append(out, v)
	}
	return out, nil
}

// every returns v[c], v[c+k], v[c+2k], ...
func every(v []float64, k, c int) []float64 {
	var out []float64
	for i := c; i < len(v); i += k {
		out = append(out, v[i])
	}
	return out
}

func medianRatio(a, base []float64, k, c int) float64 {
	x, y := every(a, k, c), every(base, k, c)
	var r []float64
	for i := range x {
		r = append(r, x[i]/y[i])
	}
	return median(r)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
