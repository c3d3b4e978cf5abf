package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
)

// Loopback addresses of the probe command tests.
const (
	probeAddrA = "127.0.45.1"
	probeAddrB = "127.0.45.2"
)

var selfRE = regexp.MustCompile(`QPNs (0x[0-9a-f]+)\S* .*self at http://127\.0\.45\.2:(\d+)/probe/v1/self`)

// startResponder runs goroce probe responder on probeAddrB until the
// returned stop is called, and returns its HTTP port and first QPN.
func startResponder(t *testing.T) (port, qpn string, stop func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut testenv.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runProbeResponder(ctx, []string{"--addr", probeAddrB, "--path", "udp", "--http-port", "0", "--qps", "2"}, &out, &errOut)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := selfRE.FindStringSubmatch(out.String()); m != nil {
			port, qpn = m[2], m[1]
			break
		}
		select {
		case code := <-done:
			if strings.Contains(errOut.String(), "address already in use") || strings.Contains(errOut.String(), "cannot assign") {
				t.Skipf("responder: %s", errOut.String())
			}
			t.Fatalf("responder exited with %d: %s%s", code, out.String(), errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no responder banner: %q %q", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var once sync.Once
	var code int
	stop = func() (int, string) {
		once.Do(func() { cancel(); code = <-done })
		return code, out.String()
	}
	t.Cleanup(func() { stop() })
	return port, qpn, stop
}

func probeOnce(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(append([]string{"probe", "once", "--addr", probeAddrA, "--path", "udp"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

var (
	probeLineRE = regexp.MustCompile(`(?m)^40 bytes from 127\.0\.45\.2: probe=(\d+) label=0x[0-9a-f]{5} sport=(\d+) rtt=([\d.]+) us prober=([\d.]+) us responder=([\d.]+) us$`)
	summaryRE   = regexp.MustCompile(`(?m)^(\d+) probes sent, (\d+) completed, (\d+) lost, (\d+) late, (\d+) errors, ([\d.]+)% loss, (software|hardware) timestamps$`)
	quantRE     = regexp.MustCompile(`(?m)^(network rtt|prober delay|responder delay) min/p50/p99/max = ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) us$`)
)

func TestProbeCommand(t *testing.T) {
	port, qpn, stop := startResponder(t)

	// Discovery over HTTP, 8 probes over 4 labels.
	code, out, errOut := probeOnce("-c", "8", "-i", "0.01", "--labels", "4", "--http-port", port, probeAddrB)
	if code != 0 {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	lines := probeLineRE.FindAllStringSubmatch(out, -1)
	if len(lines) != 8 {
		t.Fatalf("%d probe lines of 8:\n%s", len(lines), out)
	}
	ports := map[string]bool{}
	for _, l := range lines {
		ports[l[2]] = true
		for _, v := range l[3:] {
			if f, err := strconv.ParseFloat(v, 64); err != nil || f < 0 || f > 1e6 {
				t.Fatalf("value %q in %q", v, l[0])
			}
		}
	}
	if len(ports) != 4 {
		t.Fatalf("source ports %v, want 4", ports)
	}
	if !regexp.MustCompile(`(?m)^PROBE 127\.0\.45\.2 \(127\.0\.45\.2\) GID \S+ QPN 0x[0-9a-f]{6},0x[0-9a-f]{6}: 8 probes over 4 flow labels`).MatchString(out) {
		t.Fatalf("no PROBE line naming the responder's 2 QPs:\n%s", out)
	}
	s := summaryRE.FindStringSubmatch(out)
	if s == nil || s[1] != "8" || s[2] != "8" || s[3] != "0" || s[4] != "0" || s[5] != "0" || s[6] != "0" || s[7] != "software" {
		t.Fatalf("summary %q in:\n%s", s, out)
	}
	qs := quantRE.FindAllStringSubmatch(out, -1)
	if len(qs) != 3 {
		t.Fatalf("quantile lines %q in:\n%s", qs, out)
	}
	for _, q := range qs {
		var v [4]float64
		for i := range v {
			v[i], _ = strconv.ParseFloat(q[2+i], 64)
		}
		if !(v[0] <= v[1] && v[1] <= v[2] && v[2] <= v[3]) {
			t.Fatalf("quantiles out of order: %q", q[0])
		}
	}

	// --paths and --json: LabelCount(4, 0.9) = 13 probes by default.
	code, out, errOut = probeOnce("-i", "0.005", "--paths", "4", "--prob", "0.9", "--json", "--http-port", port, probeAddrB)
	if code != 0 {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	var doc struct {
		Hosts []struct {
			Host                  string
			Sent, Completed, Lost int
			Timestamps            string
			NetworkRTT            map[string]int64 `json:"network_rtt_ns"`
			Probes                []struct {
				Outcome      string
				ResponderQPN uint32 `json:"responder_qpn"`
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(doc.Hosts) != 1 || doc.Hosts[0].Sent != 13 || doc.Hosts[0].Completed != 13 || len(doc.Hosts[0].Probes) != 13 ||
		doc.Hosts[0].NetworkRTT["p50"] <= 0 {
		t.Fatalf("json %+v", doc)
	}
	qpns := map[uint32]int{}
	for _, pr := range doc.Hosts[0].Probes {
		qpns[pr.ResponderQPN]++
	}
	if len(qpns) != 2 {
		t.Fatalf("probes went to the responder QPs %v, want both", qpns)
	}

	// Usage and setup errors: 2.
	if code, _, _ := probeOnce(); code != 2 {
		t.Fatalf("no host: exit %d", code)
	}
	if code, _, _ := probeOnce("--labels", "2", "--paths", "3", probeAddrB); code != 2 {
		t.Fatalf("--labels with --paths: exit %d", code)
	}
	if code, _, e := probeOnce("--http-port", "1", "-c", "1", probeAddrB); code != 2 || !strings.Contains(e, "finding the responder") {
		t.Fatalf("no self document: exit %d, %q", code, e)
	}

	// The responder gone: every probe lost, exit 1.
	if code, rout := stop(); code != 0 || !strings.Contains(rout, "answered") {
		t.Fatalf("responder exit %d: %s", code, rout)
	}
	q, _ := strconv.ParseUint(qpn, 0, 32)
	code, out, errOut = probeOnce("-c", "3", "-i", "0.01", "-W", "0.2", "--qpn", strconv.FormatUint(q, 10), probeAddrB)
	if code != 1 {
		t.Fatalf("exit %d with the responder gone:\n%s%s", code, out, errOut)
	}
	if n := strings.Count(out, "lost (no ACKs within the timeout)"); n != 3 {
		t.Fatalf("%d lost lines:\n%s", n, out)
	}
	if s := summaryRE.FindStringSubmatch(out); s == nil || s[1] != "3" || s[3] != "3" || s[6] != "100" {
		t.Fatalf("summary %q:\n%s", s, out)
	}
}
