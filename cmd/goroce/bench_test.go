package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/bench"
	"github.com/goroce/goroce/internal/testenv"

	"github.com/goroce/goroce/internal/netns"
)

// benchRow is one row of a bench table.
type benchRow struct {
	bytes, iters int64
	vals         []float64 // the remaining columns
}

// benchTable is what a bench side printed.
type benchTable struct {
	lat              bool
	rows             []benchRow
	local, remote    []string // address lines
	percentiles      []string
	verified         []int64
	gidLocal, gidRem string
}

var (
	bwHeader  = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	latHeader = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	addrLine  = regexp.MustCompile(`^ (local|remote) address: LID 0000 QPN 0x[0-9a-f]{4,} PSN (0x[0-9a-f]{4,}|0000)( OUT 0x[0-9a-f]+)?( RKey 0x[0-9a-f]{6,} VAddr 0x[0-9a-f]{14,})?$`)
	gidLine   = regexp.MustCompile(`^ GID: (\d{2,3}:){15}\d{2,3}$`)
)

// parseBenchTable parses a bench table: the header, then rows of numbers up
// to the closing line.
func parseBenchTable(out string) (benchTable, error) {
	var t benchTable
	in := false
	lastAddr := ""
	for _, l := range strings.Split(out, "\n") {
		switch {
		case l == bwHeader || l == latHeader:
			in, t.lat = true, l == latHeader
		case in && strings.HasPrefix(l, "-----"):
			in = false
		case in:
			f := strings.Fields(l)
			if len(f) < 5 {
				return t, fmt.Errorf("short row %q", l)
			}
			var r benchRow
			var err error
			if r.bytes, err = strconv.ParseInt(f[0], 10, 64); err != nil {
				return t, fmt.Errorf("row %q: %v", l, err)
			}
			if r.iters, err = strconv.ParseInt(f[1], 10, 64); err != nil {
				return t, fmt.Errorf("row %q: %v", l, err)
			}
			for _, x := range f[2:] {
				v, err := strconv.ParseFloat(x, 64)
				if err != nil {
					return t, fmt.Errorf("row %q: %v", l, err)
				}
				r.vals = append(r.vals, v)
			}
			t.rows = append(t.rows, r)
		case addrLine.MatchString(l):
			lastAddr = addrLine.FindStringSubmatch(l)[1]
			if lastAddr == "local" {
				t.local = append(t.local, l)
			} else {
				t.remote = append(t.remote, l)
			}
		case gidLine.MatchString(l):
			if lastAddr == "local" {
				t.gidLocal = l
			} else {
				t.gidRem = l
			}
		case strings.HasPrefix(l, " percentiles[usec]"):
			t.percentiles = append(t.percentiles, l)
		case strings.HasPrefix(l, " data verified: #bytes "):
			n, _ := strconv.ParseInt(strings.TrimPrefix(l, " data verified: #bytes "), 10, 64)
			t.verified = append(t.verified, n)
		}
	}
	if len(t.rows) == 0 {
		return t, fmt.Errorf("no result rows in:\n%s", out)
	}
	return t, nil
}

// checkBenchTable checks a side's table: one row of size bytes and iters
// iterations with sane figures.
func checkBenchTable(t *testing.T, side, out string, lat bool, size, iters int64, verified bool) benchTable {
	t.Helper()
	tb, err := parseBenchTable(out)
	if err != nil {
		t.Fatalf("%s: %v", side, err)
	}
	if tb.lat != lat || len(tb.rows) != 1 {
		t.Fatalf("%s: latency table %v, %d rows:\n%s", side, tb.lat, len(tb.rows), out)
	}
	r := tb.rows[0]
	if r.bytes != size || r.iters != iters {
		t.Errorf("%s: row %+v, want %d bytes, %d iterations", side, r, size, iters)
	}
	if lat {
		// t_min t_max t_typical t_avg t_stdev p99 p99.9
		v := r.vals
		if len(v) != 7 || !(v[0] > 0 && v[0] <= v[2] && v[2] <= v[5] && v[5] <= v[6] && v[6] <= v[1] && v[3] >= v[0] && v[4] >= 0) {
			t.Errorf("%s: latency columns out of order: %v", side, v)
		}
		if len(tb.percentiles) != 1 {
			t.Errorf("%s: no percentile line", side)
		}
	} else {
		v := r.vals // peak, average, msg rate
		if len(v) != 3 || !(v[1] > 0 && v[0] >= v[1]*0.99 && v[2] > 0) {
			t.Errorf("%s: bandwidth columns: %v", side, v)
		}
		if got := v[2] * float64(size) * 1e6 / (1 << 20); got < v[1]*0.98-0.006 || got > v[1]*1.02+0.006 {
			t.Errorf("%s: message rate %v Mpps x %d B is %v MB/sec, not the average %v", side, v[2], size, got, v[1])
		}
	}
	if verified && (len(tb.verified) != 1 || tb.verified[0] != size) {
		t.Errorf("%s: data not reported verified:\n%s", side, out)
	}
	return tb
}

func TestParseBenchTable(t *testing.T) {
	out := bwHeader + "\n 65536      1000             624.44             501.43 \t\t   0.008023\n" + strings.Repeat("-", 87) + "\n"
	tb, err := parseBenchTable(out)
	if err != nil || len(tb.rows) != 1 || tb.rows[0].bytes != 65536 || tb.rows[0].iters != 1000 || tb.rows[0].vals[1] != 501.43 {
		t.Fatalf("%+v, %v", tb, err)
	}
	if _, err := parseBenchTable("goroce bench write_bw: couldn't connect\n"); err == nil {
		t.Fatal("a failed run parsed")
	}
}

func TestBenchUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "usage: goroce bench TEST"},
		{[]string{"bench", "rdma_bw"}, "unknown test"},
		{[]string{"bench", "write_bw", "-m", "1000"}, "MTU 1000"},
		{[]string{"bench", "write_bw", "-c", "UD"}, "only possible in SEND tests"},
		{[]string{"bench", "send_bw", "-c", "UC"}, "not supported"},
		{[]string{"bench", "send_bw", "-c", "UD", "-R", "host"}, "not with -R"},
		{[]string{"bench", "send_bw", "-c", "XY"}, "unknown connection type"},
		{[]string{"bench", "send_lat", "-b", "--loopback"}, "-b (bidirectional) runs RC bandwidth tests"},
		{[]string{"bench", "atomic_bw", "-A", "SWAP"}, "atomic type"},
		{[]string{"bench", "write_bw", "-n", "2", "--loopback"}, "iterations 2"},
		{[]string{"bench", "send_bw", "-c", "UD", "-D", "1", "--loopback"}, "-D runs RC tests"},
		{[]string{"bench", "send_bw", "-D", "0", "--loopback"}, "duration 0: want seconds above 0"},
		{[]string{"bench", "send_bw", "--duration=-1", "--loopback"}, "duration -1: want seconds above 0"},
		{[]string{"bench", "send_lat", "-q", "2", "--loopback"}, "latency tests use one"},
		{[]string{"bench", "write_bw", "--loopback", "host"}, "--loopback takes no HOST"},
		{[]string{"bench", "write_bw", "-p", "70000"}, "port 70000"},
		{[]string{"bench", "write_bw", "a", "b"}, "usage"},
		{[]string{"bench", "send_lat", "--baseline-ack", "host"}, "goes with --baseline"},
		{[]string{"bench", "write_bw", "--baseline", "--baseline-ack", "host"}, "is for latency tests"},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "-h"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "write_bw") {
		t.Errorf("bench -h: %d %q", code, out.String())
	}
}

// TestBenchLoopback runs goroce bench --loopback (both sides in this
// process, two soft devices on this package's loopback addresses).
func TestBenchLoopback(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "write_bw", "--loopback", "--addr", "127.0.6.3", "-s", "4096", "-n", "300", "--verify", "--timeout", "30s"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	tb := checkBenchTable(t, "write_bw", out.String(), false, 4096, 300, true)
	if len(tb.local) != 1 || len(tb.remote) != 1 || tb.gidLocal != " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:06:04" {
		t.Errorf("addresses %q %q %q", tb.local, tb.remote, tb.gidLocal)
	}
	out.Reset()
	if code := run([]string{"bench", "send_lat", "--loopback", "--addr", "127.0.6.3", "-n", "100", "--json", "--timeout", "30s"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	var rep bench.JSONReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	checkJSON(t, rep, "send_lat", "client", 2, 100)
	// UD over the udp path, with the server's device recording: every
	// message one UD SEND-only packet of the client's QP, Q_Key
	// 0x11111111, each in the capture once.
	pcap := filepath.Join(t.TempDir(), "ud.pcap")
	out.Reset()
	if code := run([]string{"bench", "send_bw", "-c", "UD", "--loopback", "--addr", "127.0.6.3", "--path", "udp", "--pcap", pcap, "-s", "1024", "-n", "100", "--json", "--timeout", "30s"}, &out, &errb); code != 0 {
		t.Fatalf("send_bw -c UD: exit %d: %s%s", code, out.String(), errb.String())
	}
	rep = bench.JSONReport{}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	checkJSON(t, rep, "send_bw", "client", 1024, 100)
	if rep.Connection != "UD" || !strings.HasPrefix(rep.Path, "udp") {
		t.Errorf("connection %q, path %q; want UD over udp", rep.Connection, rep.Path)
	}
	out.Reset()
	if code := run([]string{"decode", "--json", pcap}, &out, &errb); code != 0 {
		t.Fatalf("decode: exit %d: %s", code, errb.String())
	}
	ud := 0
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var p struct {
			Opcode  string `json:"opcode_name"`
			Payload int    `json:"payload_len"`
			OK      bool   `json:"icrc_ok"`
			BTH     struct {
				DQPN uint32 `json:"dqpn"`
			} `json:"bth"`
			Ext struct {
				DETH struct {
					QKey  uint32 `json:"qkey"`
					SrcQP uint32 `json:"srcqp"`
				} `json:"DETH"`
			} `json:"ext"`
		}
		if err := json.Unmarshal([]byte(l), &p); err != nil {
			t.Fatalf("decode --json line %q: %v", l, err)
		}
		if p.Opcode != "UD_SEND_ONLY" || p.Payload != 1024 || !p.OK || p.Ext.DETH.QKey != bench.UDQKey ||
			p.BTH.DQPN != rep.Remote[0].QPN || p.Ext.DETH.SrcQP != rep.Local[0].QPN {
			t.Errorf("packet %s: want a UD SEND-only of 1024 bytes from QP %#x to %#x, Q_Key %#x, ICRC good", l, rep.Local[0].QPN, rep.Remote[0].QPN, bench.UDQKey)
			break
		}
		ud++
	}
	if ud != 100 {
		t.Errorf("%d UD packets captured, want 100", ud)
	}
	// Every test runs on one thread by default (and gives the process its
	// GOMAXPROCS back); latency tests poll busily, -e and --events wait on completion
	// channels. (write_lat, which polls memory the driver writes, runs in
	// internal/bench's tests: the race detector sees no synchronization
	// there, as a remote WRITE gives none.)
	procs := runtime.GOMAXPROCS(0)
	for _, args := range [][]string{{"read_lat"}, {"send_lat", "-e"}, {"read_lat", "--events"}, {"write_bw", "-s", "2"}, {"send_bw", "-b", "-s", "2"}} {
		out.Reset()
		if code := run(append([]string{"bench"}, append(args, "--loopback", "--addr", "127.0.6.3", "-n", "100", "--json", "--timeout", "30s")...), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, out.String(), errb.String())
		}
		var rep bench.JSONReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%v: %v:\n%s", args, err, out.String())
		}
		checkJSON(t, rep, args[0], "client", 2, 100)
		if bi := slices.Contains(args, "-b"); rep.Bidirectional != bi {
			t.Errorf("%v: bidirectional %v in the report", args, rep.Bidirectional)
		}
		if got := runtime.GOMAXPROCS(0); got != procs {
			t.Errorf("%v: GOMAXPROCS %d after the run, was %d", args, got, procs)
		}
	}
}

// checkJSON checks a --json report.
func checkJSON(t *testing.T, rep bench.JSONReport, test, side string, size int, iters uint64) {
	t.Helper()
	if rep.Test != test || rep.Side != side || rep.Error != "" || rep.PeerVersion != "6.06" || rep.MTU < 256 || len(rep.Local) != 1 || len(rep.Remote) != 1 || len(rep.Results) != 1 {
		t.Fatalf("report %+v", rep)
	}
	if rep.Local[0].QPN == 0 || rep.Remote[0].QPN == 0 || !strings.HasPrefix(rep.Local[0].GID, "::ffff:") {
		t.Errorf("addresses %+v %+v", rep.Local, rep.Remote)
	}
	r := rep.Results[0]
	if r.Bytes != size || r.Iterations != iters {
		t.Errorf("result %d bytes, %d iterations; want %d, %d", r.Bytes, r.Iterations, size, iters)
	}
	if strings.HasSuffix(test, "_lat") {
		if r.TMin == nil || r.P50 == nil || r.P99 == nil || r.P999 == nil || r.MaxAll == nil ||
			!(*r.TMin > 0 && *r.TMin <= *r.P50 && *r.P50 <= *r.P99 && *r.P99 <= *r.P999 && *r.P999 <= *r.MaxAll) {
			t.Errorf("latencies %+v", r)
		}
	} else if r.BWAverage == nil || r.BWPeak == nil || r.MsgRate == nil || !(*r.BWAverage > 0 && *r.BWPeak >= *r.BWAverage*0.99 && *r.MsgRate > 0) || r.BWUnit != "MB/sec" {
		t.Errorf("bandwidth %+v", r)
	}
}

// startBench starts goroce (this test binary as a helper process) with args
// in namespace ns; it returns the stdout and stderr buffers and its exit.
func startBench(t *testing.T, ctx context.Context, ns *netns.NS, args ...string) (stdout, stderr *testenv.Buffer, exit <-chan error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, os.Args[0], "-test.run=^TestPingpongHelperProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "GOROCE_PINGPONG_HELPER=1")
	stdout, stderr = &testenv.Buffer{}, &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait() }()
	return stdout, stderr, ch
}

// TestBenchNetns runs every bench test between two network namespaces
// joined by a veth pair, each side its own process, as on two machines:
// once with the tables (checked on both sides), once with --json.
func TestBenchNetns(t *testing.T) {
	netns.Require(t)
	if testing.Short() {
		t.Skip("-short")
	}
	pair := netns.NewPair(t, netns.Options{})
	for _, c := range []struct {
		test   string
		args   []string
		size   int64
		iters  int64
		verify bool
	}{
		{"write_bw", []string{"-s", "4096", "-n", "500", "--verify"}, 4096, 500, true},
		{"read_bw", []string{"-s", "65536", "-n", "100", "--verify"}, 65536, 100, true},
		{"send_bw", []string{"-s", "1000", "-n", "500", "--verify"}, 1000, 500, true},
		{"atomic_bw", []string{"-n", "300", "-A", "CMP_AND_SWAP"}, 8, 300, false},
		{"send_lat", []string{"-s", "64", "-n", "300", "--verify"}, 64, 300, true},
		{"write_lat", []string{"-s", "64", "-n", "300", "--verify"}, 64, 300, true},
		{"read_lat", []string{"-s", "64", "-n", "300"}, 64, 300, false},
		{"atomic_lat", []string{"-n", "300"}, 8, 300, false},
	} {
		for _, js := range []bool{false, true} {
			name := c.test
			if js {
				name += "/json"
			}
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				args := append(append([]string{"bench", c.test}, c.args...), "--timeout", "40s")
				if js {
					args = append(args, "--json")
				}
				sout, serrb, sexit := startBench(t, ctx, pair.A, append(args, "--addr", pair.AddrA.String())...)
				for !strings.Contains(sout.String()+serrb.String(), "Waiting for client") {
					select {
					case err := <-sexit:
						t.Fatalf("server ended: %v\n%s%s", err, sout.String(), serrb.String())
					case <-time.After(20 * time.Millisecond):
					}
				}
				cout, cerrb, cexit := startBench(t, ctx, pair.B, append(args, "--addr", pair.AddrB.String(), pair.AddrA.String())...)
				cerr, serr := <-cexit, <-sexit
				if cerr != nil || serr != nil {
					t.Fatalf("server: %v\n%s%s\nclient: %v\n%s%s", serr, sout.String(), serrb.String(), cerr, cout.String(), cerrb.String())
				}
				lat := strings.HasSuffix(c.test, "_lat")
				// read_lat and atomic_lat servers only wait, as perftest's.
				serverMeasures := !lat || c.test == "send_lat" || c.test == "write_lat"
				if js {
					var cr, sr bench.JSONReport
					if err := json.Unmarshal([]byte(cout.String()), &cr); err != nil {
						t.Fatalf("client JSON: %v\n%s", err, cout.String())
					}
					if err := json.Unmarshal([]byte(sout.String()), &sr); err != nil {
						t.Fatalf("server JSON: %v\n%s", err, sout.String())
					}
					checkJSON(t, cr, c.test, "client", int(c.size), uint64(c.iters))
					if serverMeasures {
						checkJSON(t, sr, c.test, "server", int(c.size), uint64(c.iters))
					}
					if cr.Local[0] != sr.Remote[0] || sr.Local[0] != cr.Remote[0] {
						t.Errorf("the sides disagree on the keys: client %+v %+v, server %+v %+v", cr.Local, cr.Remote, sr.Local, sr.Remote)
					}
					if cr.Local[0].GID != "::ffff:"+pair.AddrB.String() || sr.Local[0].GID != "::ffff:"+pair.AddrA.String() {
						t.Errorf("GIDs %s %s", cr.Local[0].GID, sr.Local[0].GID)
					}
					return
				}
				ct := checkBenchTable(t, "client", cout.String(), lat, c.size, c.iters, c.verify)
				if serverMeasures {
					st := checkBenchTable(t, "server", sout.String(), lat, c.size, c.iters, c.verify && c.test != "send_bw" || c.test == "send_bw")
					if !lat && c.test != "send_bw" && fmt.Sprint(st.rows) != fmt.Sprint(ct.rows) {
						t.Errorf("the server prints %v, not the client's report %v", st.rows, ct.rows)
					}
					if len(st.local) != 1 || len(ct.remote) != 1 || strings.TrimPrefix(st.local[0], " local") != strings.TrimPrefix(ct.remote[0], " remote") {
						t.Errorf("server local %q, client remote %q", st.local, ct.remote)
					}
				}
				t.Logf("client:\n%s", cout.String())
			})
		}
	}
}

// TestBenchProgress runs write_bw for two seconds (-D): progress lines on
// stderr while it runs, then a row with the iterations it did.
func TestBenchProgress(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "write_bw", "--loopback", "--addr", "127.0.6.5", "-s", "1024", "-D", "2", "--timeout", "30s"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	if !regexp.MustCompile(`(?m)^write_bw: [12] of 2 s, \d+ iterations, [0-9.]+ MB/sec, [0-9.]+ Mpps$`).MatchString(errb.String()) {
		t.Errorf("no progress line on stderr: %q", errb.String())
	}
	tb, err := parseBenchTable(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if r := tb.rows[0]; len(tb.rows) != 1 || r.bytes != 1024 || r.iters < 100 || r.vals[1] <= 0 {
		t.Errorf("rows %+v", tb.rows)
	}
}
