package agent_test

import (
	"compress/gzip"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/agent"
)

// A node the pinglist does not name starts anyway: a responder that peers
// can find and probe, probing nothing itself, until the list names it.
func TestUnlistedNode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pinglist.yaml")
	port := freePort(t, 2)
	write(t, path, pinglist(port, "a/0/g1"))
	b := start(t, path, 1, port) // not in the list
	if b.a.Listed() || len(b.a.Targets()) != 0 {
		t.Fatalf("unlisted node: listed %v, %d targets", b.a.Listed(), len(b.a.Targets()))
	}
	var self probe.Self
	getJSON(t, b.base+probe.SelfPath, &self)
	if len(self.QPNs) == 0 || self.Name != addr(1).String() {
		t.Errorf("unlisted node's self: %+v", self)
	}
	if got := counter(t, b.reg, "goroce_probe_agent_listed", nil); got != 0 {
		t.Errorf("listed gauge = %v", got)
	}
	// Named: it joins and probes a, under its name and group.
	write(t, path, pinglist(port, "a/0/g1", "b/1/g2"))
	start(t, path, 0, port)
	waitFor(t, 10*time.Second, "b probing a after the list named it", func() bool {
		for _, p := range b.a.Paths() {
			if p.Src == "b" && p.SrcGroup == "g2" && p.Dst == "a" && p.Completed >= 5 {
				return true
			}
		}
		return false
	})
	if got := counter(t, b.reg, "goroce_probe_source_info", map[string]string{"source": "b", "source_group": "g2"}); got != 1 {
		t.Errorf("source_info{source=b,source_group=g2} = %v", got)
	}
}

// A peer that dies after it was found is fetched again at its backoff's
// pace, not at every run of lost probes: with RetryMax 1 s and probes at
// 20/s (a run of 5 lost probes every 250 ms), about one fetch a second
// once the backoff has grown.
func TestDeadPeerBackoff(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pinglist.yaml")
	port := freePort(t, 2)
	write(t, path, pinglist(port, "a/0/g1", "b/1/g1"))
	a := startWith(t, path, 0, port, func(o *agent.Options) {
		o.RetryMin, o.RetryMax = 50*time.Millisecond, time.Second
	})
	b := start(t, path, 1, port)
	errs := func() float64 {
		return counter(t, a.reg, "goroce_probe_agent_discoveries_total", map[string]string{"result": "error"})
	}
	waitFor(t, 10*time.Second, "probes to b", func() bool {
		for _, p := range a.a.Paths() {
			if p.Dst == "b" && p.Completed >= 5 {
				return true
			}
		}
		return false
	})
	b.stop()
	waitFor(t, 10*time.Second, "discovery errors", func() bool { return errs() >= 6 })
	e0 := errs()
	const span = 3 * time.Second
	time.Sleep(span)
	rate := (errs() - e0) / span.Seconds()
	t.Logf("dead peer: %.2f failed discoveries/s (backoff 1 s ±25%%: 0.8 to 1.33/s; runs of lost probes: 4/s)", rate)
	if rate > 1.7 || rate < 0.3 {
		t.Errorf("dead peer fetched %.2f times/s, want its backoff's pace, about 1/s", rate)
	}
}

// The fleet document comes gzipped to a client that asks, and plain to
// one that does not; either way it carries the verdicts, their history and
// the exporter.
func TestFleetDocGzip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pinglist.yaml")
	port := freePort(t, 1)
	write(t, path, pinglist(port, "a/0/g1"))
	a := startWith(t, path, 0, port, func(o *agent.Options) { o.FleetInterval = 100 * time.Millisecond })
	waitFor(t, 5*time.Second, "a to find itself the exporter", func() bool {
		var d agent.FleetDoc
		getJSON(t, a.base+agent.FleetPath, &d)
		return d.Exporter == "a"
	})
	req, _ := http.NewRequest("GET", a.base+agent.FleetPath, nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.NewDecoder(zr).Decode(&d); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"verdicts", "history", "exporter", "paths"} {
		if _, ok := d[k]; !ok {
			t.Errorf("the fleet document has no %q", k)
		}
	}
	if got := counter(t, a.reg, "goroce_probe_fleet_exporter", nil); got != 1 {
		t.Errorf("goroce_probe_fleet_exporter = %v on the only node", got)
	}
}
