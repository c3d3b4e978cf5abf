package rxeinterop

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// benchIters is the iteration count of each perftest run: rdma_rxe under
// emulation moves about 10 MB/s.
const benchIters = 20

// benchCase is one perftest program and its message size.
type benchCase struct {
	test string // write_bw, ...
	size int
	args string // extra flags for both sides
	qps  int    // -q (0: 1); the reports count the iterations of all QPs
}

var benchCases = []benchCase{
	{"write_bw", 16384, "", 0},
	{"read_bw", 16384, "", 0},
	{"send_bw", 4096, "", 0},
	{"atomic_bw", 8, "", 0},
	{"send_lat", 64, "", 0},
	// UD: one packet a message (rxe's MTU here is 1024), Q_Key
	// 0x11111111, the receiver's GRH room, a receive for every message.
	{"send_bw", 1024, "-c UD", 0},
	{"send_lat", 64, "-c UD", 0},
	// Bidirectional: both sides post (ib_send_bw's run_iter_bi: the
	// server once the first message is in), and each prints the sum of
	// both directions' rates.
	{"write_bw", 16384, "-b", 0},
	{"send_bw", 4096, "-b", 0},
	// Duration: each side on its own clock, the server's from its first
	// message on.
	{"send_bw", 1024, "-D 1", 0},
	// A latency test on each side's own clock.
	{"send_lat", 64, "-D 1", 0},
	{"write_lat", 64, "-D 1", 0},
	// Post lists: four WRITEs a post, a completion a list.
	{"write_bw", 16384, "-l 4", 0},
}

// name labels c's subtests and captures: the test, and its flags.
func (c benchCase) name() string {
	if c.args == "" {
		return c.test
	}
	return c.test + strings.NewReplacer(" ", "", "-", "_").Replace(" "+c.args)
}

// perftestCmd is the guest's perftest command line; a client when server is
// set.
func (h *harness) perftestCmd(c benchCase, server string) string {
	cmd := fmt.Sprintf("ib_%s -d rxe0 -x %d -F -n %d", c.test, h.gidx, benchIters)
	if c.test != "atomic_bw" {
		cmd += fmt.Sprintf(" -s %d", c.size)
	}
	if c.args != "" {
		cmd += " " + c.args
	}
	if server != "" {
		cmd += " " + server
	}
	return cmd
}

// benchArgs is the goroce bench command line; a client when server is set.
func (h *harness) benchArgs(c benchCase, server string) []string {
	// --path udp: the capture on the bridge sees what goes through the
	// kernel's stack, which AF_XDP (the automatic choice) bypasses.
	a := []string{h.bin, "bench", c.test, "--addr", hostIP, "--path", "udp", "-n", strconv.Itoa(benchIters), "--timeout", "100s"}
	if c.test != "atomic_bw" {
		a = append(a, "-s", strconv.Itoa(c.size))
	}
	a = append(a, strings.Fields(c.args)...)
	if server != "" {
		a = append(a, server)
	}
	return a
}

// TestBenchRxe runs goroce bench against perftest 4.5 (ib_write_bw,
// ib_read_bw, ib_send_bw, ib_atomic_bw, ib_send_lat) on rdma_rxe, each
// program as server and as client, and checks both sides' reports (the same
// addresses seen from both ends, the right sizes and counts, sane figures,
// and for WRITE, READ and atomics the server printing exactly the client's
// report it received) and the capture of each run.
//
// The runs are pairs on the package's shared guest (see guest).
func TestBenchRxe(t *testing.T) {
	h := newHarness(t)
	first := benchCases[0]
	h.startPeer("bench-"+first.name()+"-rxe-server", h.perftestCmd(first, ""), shellJoin(h.benchArgs(first, guestIP)))
	for _, c := range benchCases {
		t.Run(c.name()+"/rxe-server", func(t *testing.T) {
			var r result
			if c == first {
				r = h.peerResult(t)
			} else {
				r = h.pair(t, "bench-"+c.name()+"-rxe-server", h.perftestCmd(c, ""), h.benchArgs(c, guestIP), false)
			}
			h.checkBench(t, r, c, false)
		})
		t.Run(c.name()+"/goroce-server", func(t *testing.T) {
			r := h.pair(t, "bench-"+c.name()+"-goroce-server", h.perftestCmd(c, hostIP), h.benchArgs(c, ""), true)
			h.checkBench(t, r, c, true)
		})
	}
}

// perfReport is what a perftest program (or goroce bench) printed: its
// address lines and its result rows.
type perfReport struct {
	local, remote string // the address lines after "local address: " / "remote address: "
	lat           bool
	rows          [][]string
}

var (
	perfAddrRE = regexp.MustCompile(`^ (local|remote) address: (LID .*)$`)
	bwHeaderRE = regexp.MustCompile(`^ #bytes\s+#iterations\s+BW peak\[MB/sec\]\s+BW average\[MB/sec\]\s+MsgRate\[Mpps\]`)
	// -D on a latency test: perftest's RESULT_FMT_LAT_DUR.
	latDurHeaderRE = regexp.MustCompile(`^ #bytes\s+#iterations\s+t_avg\[usec\]\s+tps average`)
	latHeaderRE    = regexp.MustCompile(`^ #bytes #iterations\s+t_min\[usec\]\s+t_max\[usec\]\s+t_typical\[usec\]\s+t_avg\[usec\]\s+t_stdev\[usec\]\s+99% percentile\[usec\]\s+99.9% percentile\[usec\]`)
)

// parsePerf parses a perftest-style report.
func parsePerf(out string) (perfReport, error) {
	var p perfReport
	in := false
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimRight(l, "\r")
		switch {
		case bwHeaderRE.MatchString(l) || latHeaderRE.MatchString(l) || latDurHeaderRE.MatchString(l):
			in, p.lat = true, !bwHeaderRE.MatchString(l)
		case in && strings.HasPrefix(l, "-----"):
			in = false
		case in:
			if f := strings.Fields(l); len(f) > 0 {
				p.rows = append(p.rows, f)
			}
		default:
			if m := perfAddrRE.FindStringSubmatch(l); m != nil {
				if m[1] == "local" {
					p.local = m[2]
				} else {
					p.remote = m[2]
				}
			}
		}
	}
	if len(p.rows) == 0 || p.local == "" || p.remote == "" {
		return p, fmt.Errorf("no address lines or no result rows in:\n%s", out)
	}
	return p, nil
}

// checkBench judges a bench pair: exit statuses, both reports, the capture.
func (h *harness) checkBench(t *testing.T, r result, c benchCase, goroceServer bool) {
	t.Logf("guest (rc=%d): %s\n%s", r.guestRC, r.guestCmd, r.guestOut)
	t.Logf("host (%v): %s\n%s", r.hostErr, r.hostCmd, r.hostOut)
	if r.guestRC != 0 || r.hostErr != nil {
		t.Errorf("guest exit %d, host %v", r.guestRC, r.hostErr)
	}
	g, gerr := parsePerf(r.guestOut)
	o, oerr := parsePerf(r.hostOut)
	if gerr != nil || oerr != nil {
		t.Fatalf("reports: perftest: %v; goroce: %v", gerr, oerr)
	}
	if strings.Contains(c.args, "-c UD") {
		for _, x := range []struct{ name, out string }{{"perftest", r.guestOut}, {"goroce", r.hostOut}} {
			if !regexp.MustCompile(`Connection type : UD\b`).MatchString(x.out) {
				t.Errorf("%s's report does not say UD", x.name)
			}
		}
	}
	// The same QPs seen from both ends: perftest prints its own address and
	// the one it read, goroce the same in perftest's format.
	if g.local != o.remote || o.local != g.remote {
		t.Errorf("the sides disagree on the addresses:\nperftest local  %s\ngoroce remote   %s\ngoroce local    %s\nperftest remote %s", g.local, o.remote, o.local, g.remote)
	}
	lat := strings.HasSuffix(c.test, "_lat")
	// perftest times with the processor's cycle counter, whose frequency it
	// measures first; under emulation that measurement can fail ("Correlation
	// coefficient r^2: ... < 0.9", which -F lets it go on from), and then
	// every figure it derives from cycles prints as 0, or as inf and -nan
	// (a latency divided by a zero frequency). Its row still has to be
	// there, with the size and the iterations; so does goroce's when it is
	// the server of a WRITE, READ or atomic test, whose row is the report
	// perftest sent it (xchg_bw_reports), whatever its figures.
	noClock := strings.Contains(r.guestOut, "Correlation coefficient r^2")
	// A bidirectional row holds the peer's figures too.
	duplex := strings.Contains(" "+c.args+" ", " -b ")
	timed := strings.Contains(" "+c.args+" ", " -D ")
	clientReport := goroceServer && !lat && c.test != "send_bw" || duplex
	if noClock {
		t.Logf("perftest could not measure the guest's cycle frequency: its figures are 0 and not checked")
	}
	for _, x := range []struct {
		name string
		p    perfReport
	}{{"perftest", g}, {"goroce", o}} {
		if x.p.lat != lat || len(x.p.rows) != 1 {
			t.Errorf("%s: %d rows (latency table %v)", x.name, len(x.p.rows), x.p.lat)
			continue
		}
		row := x.p.rows[0]
		want := 5
		if lat {
			want = 9
			if timed {
				want = 4 // size, iterations, t_avg, tps
			}
		}
		iters := strconv.Itoa(benchIters * max(c.qps, 1))
		if timed {
			// As many as the time allowed; the sides count apart.
			if n, err := strconv.Atoi(row[1]); err == nil && n > 0 {
				iters = row[1]
			}
		}
		if len(row) != want || row[0] != strconv.Itoa(c.size) || row[1] != iters {
			t.Errorf("%s: row %q: want %d columns, %d bytes, %s iterations", x.name, row, want, c.size, iters)
			continue
		}
		// A bandwidth below 0.005 MB/s prints as 0.00 (8-byte atomics
		// at a few thousand per second under emulation): the message rate
		// (Mpps, with six decimals) says whether it is.
		tinyBW := false
		if mpps, err := strconv.ParseFloat(row[len(row)-1], 64); !lat && err == nil && mpps > 0 {
			tinyBW = float64(c.size)*mpps < 0.005
		}
		if noClock && (x.name == "perftest" || clientReport) {
			continue // figures from cycles of unknown frequency
		}
		for i, v := range row[2:] {
			// Zero may be: a latency's standard deviation, the peak of
			// ib_send_bw's server, which it does not compute for short
			// runs, and a bandwidth too small for two decimals.
			zeroOK := lat && i == 4 || !lat && i == 0 && x.name == "perftest" && c.test == "send_bw" && !goroceServer ||
				!lat && i < 2 && tinyBW || !lat && i == 0 && timed // -D: no peak, as perftest
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f == 0 && !zeroOK {
				t.Errorf("%s: column %d of %q is not a positive number", x.name, i+3, row)
			}
		}
	}
	// WRITE, READ and atomics: the server prints the report the client sent
	// it (xchg_bw_reports), so both rows are the same; so are both rows of
	// a bidirectional test, each the sum of the two sides' reports, as
	// long as both clocks ran.
	if duplex && !noClock && len(g.rows) == 1 && len(o.rows) == 1 && strings.Join(g.rows[0], " ") != strings.Join(o.rows[0], " ") {
		t.Errorf("bidirectional: perftest's row %q is not goroce's %q (both the sum of the two directions)", g.rows[0], o.rows[0])
	}
	if !lat && c.test != "send_bw" && !duplex && len(g.rows) == 1 && len(o.rows) == 1 && strings.Join(g.rows[0], " ") != strings.Join(o.rows[0], " ") {
		t.Errorf("the server's row %q is not the client's %q", g.rows[0], o.rows[0])
	}
	h.checkCaptureWire(t, r.pcap, !timed)
}

func TestParsePerf(t *testing.T) {
	out := ` local address: LID 0000 QPN 0x0011 PSN 0x491738 RKey 0x000275 VAddr 0x0055bc2e6ea000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:03
 remote address: LID 0000 QPN 0x0011 PSN 0x908e5c RKey 0x0002cb VAddr 0x0055bf0e353000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:02
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 16384      20               8.76               6.17   		   0.000395
---------------------------------------------------------------------------------------
`
	p, err := parsePerf(out)
	if err != nil || p.lat || len(p.rows) != 1 || p.rows[0][3] != "6.17" || p.remote != "LID 0000 QPN 0x0011 PSN 0x908e5c RKey 0x0002cb VAddr 0x0055bf0e353000" {
		t.Fatalf("%+v, %v", p, err)
	}
	if _, err := parsePerf(" Couldn't connect to 10.99.0.1:18515\n"); err == nil {
		t.Fatal("a failed run parsed")
	}
}
