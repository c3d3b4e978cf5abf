package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/bench"
)

// ccLine is the report's congestion counters' line.
var ccLine = regexp.MustCompile(`(?m)^ congestion: (\w+)  retransmits (\d+) \((\d+\.\d\d)% of (\d+) packets\)  timeouts (\d+)  NAKs (\d+)  probes (\d+)  CNPs sent (\d+) received (\d+)  window cuts (\d+)  ECN-marked (\d+)  rx drops signalled (\d+)$`)

// ccWindowLine is the first QP's window line.
var ccWindowLine = regexp.MustCompile(`(?m)^ congestion: QP 0x[0-9a-f]{4,}  window (\d+) packets  SRTT \d+\.\d\d usec  min RTT \d+\.\d\d usec  delay target (off|\d+\.\d\d usec)(  alpha \d\.\d{3})?  QPs sharing it (\d+)$`)

// TestBenchCongestion runs write_bw on loopback under each --cc: perftest's
// table is as before, and after it the congestion line names the mode,
// counts the run's packets (64 KiB messages: 16 packets each at least) and no
// retransmission; a window line follows where the mode keeps a window,
// with the delay target in effect;
// --cc-target takes a delay target or off. A bad --cc is a usage error
// that names the modes, a bad --cc-target one that says what it takes.
func TestBenchCongestion(t *testing.T) {
	const iters = 200
	for _, c := range []struct {
		args   []string
		mode   string
		window bool
		qps    int
		target string // the window line's delay target
	}{
		{nil, "ecn", true, 1, "100.00 usec"},
		{[]string{"--cc", "ecn", "-q", "2"}, "ecn", true, 2, "100.00 usec"},
		{[]string{"--cc=loss"}, "loss", true, 1, "100.00 usec"},
		{[]string{"--cc-target", "50us"}, "ecn", true, 1, "50.00 usec"},
		{[]string{"--cc-target", "off"}, "ecn", true, 1, "off"},
		{[]string{"--cc", "off"}, "off", false, 1, ""},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"bench", "write_bw", "--loopback", "--addr", "127.0.6.3", "-s", "65536", "-n", strconv.Itoa(iters), "--timeout", "30s"}, c.args...)
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s%s", c.args, code, out.String(), errb.String())
		}
		checkBenchTable(t, "write_bw", out.String(), false, 65536, int64(iters*c.qps), false)
		m := ccLine.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("%v: no congestion line:\n%s", c.args, out.String())
		}
		if end := strings.LastIndex(out.String(), strings.Repeat("-", 87)); end > strings.Index(out.String(), m[0]) {
			t.Errorf("%v: the congestion line is not after the table:\n%s", c.args, out.String())
		}
		packets, _ := strconv.Atoi(m[4])
		if m[1] != c.mode || m[2] != "0" || m[3] != "0.00" || m[5] != "0" || packets < iters*c.qps*16 {
			t.Errorf("%v: %q; want mode %s, no retransmission or timeout, at least %d packets", c.args, m[0], c.mode, iters*c.qps*16)
		}
		w := ccWindowLine.FindStringSubmatch(out.String())
		if (w != nil) != c.window {
			t.Errorf("%v: window line %q, want one: %v", c.args, w, c.window)
		}
		if w != nil && ((w[3] != "") != (c.mode == "ecn") || w[1] == "0" || w[2] != c.target) {
			t.Errorf("%v: window line %q (delay target %s; alpha under ecn only)", c.args, w[0], c.target)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "write_bw", "--loopback", "--addr", "127.0.6.3", "-n", "100", "--cc", "off", "--json", "--timeout", "30s"}, &out, &errb); code != 0 {
		t.Fatalf("--json: exit %d: %s%s", code, out.String(), errb.String())
	}
	var rep bench.JSONReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if cc := rep.Congestion; cc == nil || cc.Mode != "off" || cc.Packets == 0 || cc.Retransmits != 0 || cc.Window != 0 {
		t.Errorf("--json --cc off: congestion %+v", rep.Congestion)
	}
	for _, bad := range []string{"dcqcn", "ECN", ""} {
		out.Reset()
		errb.Reset()
		if code := run([]string{"bench", "write_bw", "--loopback", "--cc", bad}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `invalid value "`+bad+`" for flag -cc: want off, loss or ecn`) {
			t.Errorf("--cc %q: exit %d, stderr %q", bad, code, errb.String())
		}
	}
	for _, bad := range []string{"0", "50", "-1ms"} {
		out.Reset()
		errb.Reset()
		if code := run([]string{"bench", "write_bw", "--loopback", "--cc-target", bad}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `invalid value "`+bad+`" for flag -cc-target: want a duration above 0 and at most 1s (e.g. 50us), or off`) {
			t.Errorf("--cc-target %q: exit %d, stderr %q", bad, code, errb.String())
		}
	}
}
