package metrics

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/analysis"
)

func result(target, group string, o probe.Outcome) probe.Result {
	return probe.Result{
		Peer:           probe.Peer{Name: target, Group: group, Addr: netip.MustParseAddr("10.0.0.2")},
		Class:          "tor_mesh",
		Outcome:        o,
		NetworkRTT:     12 * time.Microsecond,
		ProberDelay:    3 * time.Microsecond,
		ResponderDelay: 5 * time.Microsecond,
		Timestamps:     probe.TimestampsSoftware,
	}
}

func newMetrics(t *testing.T, o Options) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg, o)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func TestObserve(t *testing.T) {
	m, reg := newMetrics(t, Options{Version: "v1.2.3"})
	for i := 0; i < 7; i++ {
		m.Observe(result("b1", "tor-b", probe.OutcomeOK))
	}
	m.Observe(result("b1", "tor-b", probe.OutcomeLost))
	m.Observe(result("b1", "tor-b", probe.OutcomeLate))
	e := result("b1", "tor-b", probe.OutcomeError)
	e.Reason = "post"
	m.Observe(e)
	e.Reason = ""
	m.Observe(e)
	hw := result("b2", "tor-b", probe.OutcomeOK)
	hw.Timestamps = probe.TimestampsHardware
	hw.Class = "inter_tor"
	m.Observe(hw)

	lv := []string{"b1", "tor-b", "tor_mesh", "software"}
	for _, c := range []struct {
		c    *prometheus.CounterVec
		name string
		want float64
	}{
		{m.sent, "sent", 8}, {m.completed, "completed", 7}, {m.lost, "lost", 1}, {m.late, "late", 1},
	} {
		if got := testutil.ToFloat64(c.c.WithLabelValues(lv...)); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.errs.WithLabelValues(append(lv, "post")...)); got != 1 {
		t.Errorf("errors{reason=post} = %v", got)
	}
	if got := testutil.ToFloat64(m.errs.WithLabelValues(append(lv, "unknown")...)); got != 1 {
		t.Errorf("errors{reason=unknown} = %v", got)
	}
	if got := testutil.ToFloat64(m.completed.WithLabelValues("b2", "tor-b", "inter_tor", "hardware")); got != 1 {
		t.Errorf("hardware completed = %v", got)
	}
	// A pair that never lost has a lost counter at 0, not no series.
	want0 := `
# HELP goroce_probe_lost_total Probes not answered within the timeout.
# TYPE goroce_probe_lost_total counter
goroce_probe_lost_total{class="inter_tor",target="b2",target_group="tor-b",timestamps="hardware"} 0
goroce_probe_lost_total{class="tor_mesh",target="b1",target_group="tor-b",timestamps="software"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want0), "goroce_probe_lost_total"); err != nil {
		t.Error(err)
	}

	// The whole exposition of the sent counter and the RTT histogram's
	// count and sum, as Prometheus reads them.
	want := `
# HELP goroce_probe_sent_total Probes whose outcome is known (completed or lost), counted with the outcome so that lost/sent is not skewed by probes in flight.
# TYPE goroce_probe_sent_total counter
goroce_probe_sent_total{class="inter_tor",target="b2",target_group="tor-b",timestamps="hardware"} 1
goroce_probe_sent_total{class="tor_mesh",target="b1",target_group="tor-b",timestamps="software"} 8
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "goroce_probe_sent_total"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		found[mf.GetName()] = true
		switch mf.GetName() {
		case "goroce_probe_network_rtt_seconds", "goroce_probe_prober_delay_seconds", "goroce_probe_responder_delay_seconds":
			wantSum := map[string]float64{
				"goroce_probe_network_rtt_seconds":     12e-6,
				"goroce_probe_prober_delay_seconds":    3e-6,
				"goroce_probe_responder_delay_seconds": 5e-6,
			}[mf.GetName()]
			for _, mm := range mf.GetMetric() {
				h := mm.GetHistogram()
				n := h.GetSampleCount()
				if n != 7 && n != 1 {
					t.Errorf("%s count %d", mf.GetName(), n)
				}
				if s := h.GetSampleSum(); s < float64(n)*wantSum*0.999 || s > float64(n)*wantSum*1.001 {
					t.Errorf("%s sum %v, want %v", mf.GetName(), s, float64(n)*wantSum)
				}
				if b := h.GetBucket(); len(b) != 24 || b[0].GetUpperBound() != 1e-6 {
					t.Errorf("%s: %d classic buckets from %v", mf.GetName(), len(b), b[0].GetUpperBound())
				}
				// Native histogram alongside: factor 1.1 is schema 3.
				if h.Schema == nil || h.GetSchema() != 3 || len(h.GetPositiveSpan()) == 0 {
					t.Errorf("%s: no native histogram (schema %v)", mf.GetName(), h.Schema)
				}
			}
		case "goroce_build_info":
			l := mf.GetMetric()[0].GetLabel()
			if len(l) != 2 || l[0].GetValue() != runtime.Version() || l[1].GetValue() != "v1.2.3" {
				t.Errorf("build info labels %v", l)
			}
		}
	}
	for _, n := range []string{"goroce_probe_network_rtt_seconds", "goroce_probe_prober_delay_seconds", "goroce_probe_responder_delay_seconds", "goroce_build_info", "goroce_probe_errors_total", "goroce_probe_pairs"} {
		if !found[n] {
			t.Errorf("%s not exposed", n)
		}
	}
}

func TestPairCap(t *testing.T) {
	m, reg := newMetrics(t, Options{MaxPairs: 3, MaxReasons: 2})
	for i := 0; i < 50; i++ {
		m.Observe(result(fmt.Sprintf("h%02d", i), fmt.Sprintf("g%d", i%7), probe.OutcomeOK))
		m.Observe(result(fmt.Sprintf("h%02d", i), fmt.Sprintf("g%d", i%7), probe.OutcomeLost))
		e := result("h00", "g0", probe.OutcomeError)
		e.Reason = fmt.Sprintf("reason%d", i)
		m.Observe(e)
	}
	if got := testutil.ToFloat64(m.capped); got != 1 {
		t.Errorf("pairs_capped = %v", got)
	}
	if got := testutil.ToFloat64(m.pairs); got != 3 {
		t.Errorf("pairs = %v", got)
	}
	if got := testutil.ToFloat64(m.cappedResults); got != 94 {
		t.Errorf("capped_results_total = %v, want 94", got)
	}
	// Beyond the cap, one aggregate per target group (the groups capped
	// too: g0, g1, g2 and other).
	other := 0.0
	for _, g := range []string{"g0", "g1", "g2", Other} {
		other += testutil.ToFloat64(m.sent.WithLabelValues(Other, g, "tor_mesh", "software"))
	}
	if other != 94 {
		t.Errorf("sent{target=other} = %v, want 94", other)
	}
	// Bounded series: 3 targets + other in each of 4 groups for the
	// counters, a histogram per group; 2 reasons + other.
	for name, want := range map[string]int{
		"goroce_probe_sent_total":          7,
		"goroce_probe_network_rtt_seconds": 4,
		"goroce_probe_errors_total":        3,
	} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != want {
			t.Errorf("%s: %d series (%v), want %d", name, n, err, want)
		}
	}
	// Not capped: a fresh Metrics under the cap.
	m2, _ := newMetrics(t, Options{MaxPairs: 3})
	m2.Observe(result("x", "g", probe.OutcomeOK))
	if got := testutil.ToFloat64(m2.capped); got != 0 {
		t.Errorf("pairs_capped = %v without reaching the cap", got)
	}
}

func TestSetAnalysis(t *testing.T) {
	m, reg := newMetrics(t, Options{MaxPairs: 2})
	paths := []analysis.PathStat{
		{Src: "a1", SrcGroup: "ga", Dst: "b1", DstGroup: "gb", Sent: 100, Lost: 10, Loss: 0.1, P99: 30 * time.Microsecond, Degraded: true},
		{Src: "a1", SrcGroup: "ga", Dst: "b2", DstGroup: "gb", Sent: 100, Loss: 0, P99: 20 * time.Microsecond},
		{Src: "a1", SrcGroup: "ga", Dst: "b3", DstGroup: "gb", Sent: 100, Loss: 0},
	}
	m.SetAnalysis(paths, []analysis.Component{{Kind: "link", Name: "a1->b1", Paths: 1}})
	want := `
# HELP goroce_probe_path_degraded 1 when the path is degraded (loss or p99 over the SLA), 0 when healthy; absent when not judged.
# TYPE goroce_probe_path_degraded gauge
goroce_probe_path_degraded{source="a1",source_group="ga",target="b1",target_group="gb"} 1
goroce_probe_path_degraded{source="a1",source_group="ga",target="b2",target_group="gb"} 0
# HELP goroce_probe_path_loss_ratio Loss ratio of the path over the analysis window.
# TYPE goroce_probe_path_loss_ratio gauge
goroce_probe_path_loss_ratio{source="a1",source_group="ga",target="b1",target_group="gb"} 0.1
goroce_probe_path_loss_ratio{source="a1",source_group="ga",target="b2",target_group="gb"} 0
# HELP goroce_probe_path_rtt_p99_seconds Network RTT p99 of the path over the analysis window.
# TYPE goroce_probe_path_rtt_p99_seconds gauge
goroce_probe_path_rtt_p99_seconds{source="a1",source_group="ga",target="b1",target_group="gb"} 3e-05
goroce_probe_path_rtt_p99_seconds{source="a1",source_group="ga",target="b2",target_group="gb"} 2e-05
# HELP goroce_probe_paths_left_out Paths of the last analysis left out of the path gauges by the cap.
# TYPE goroce_probe_paths_left_out gauge
goroce_probe_paths_left_out 1
# HELP goroce_probe_faulty_component 1 for each component (kind link, host or group) the last localisation names as faulty.
# TYPE goroce_probe_faulty_component gauge
goroce_probe_faulty_component{kind="link",name="a1->b1"} 1
`
	names := []string{"goroce_probe_path_degraded", "goroce_probe_path_loss_ratio", "goroce_probe_path_rtt_p99_seconds", "goroce_probe_paths_left_out", "goroce_probe_faulty_component"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// The next analysis replaces the last: healed paths and components go.
	paths[0].Degraded, paths[0].Loss = false, 0
	paths[1].Insufficient = true
	m.SetAnalysis(paths[:2], nil)
	if n, _ := testutil.GatherAndCount(reg, "goroce_probe_faulty_component"); n != 0 {
		t.Errorf("%d faulty components after healing", n)
	}
	if n, _ := testutil.GatherAndCount(reg, "goroce_probe_path_degraded"); n != 1 {
		t.Errorf("%d degraded gauges, want 1 (the unjudged path has none)", n)
	}
}

// TestScrape reads the metrics over HTTP as Prometheus does, in the text
// format.
func TestScrape(t *testing.T) {
	m, reg := newMetrics(t, Options{PairHistograms: true})
	m.Observe(result("b1", "tor-b", probe.OutcomeOK))
	// By default the histograms are per target group: no target label.
	mg, regG := newMetrics(t, Options{})
	mg.Observe(result("b1", "tor-b", probe.OutcomeOK))
	mg.Observe(result("b2", "tor-b", probe.OutcomeOK))
	if n, err := testutil.GatherAndCount(regG, "goroce_probe_network_rtt_seconds"); err != nil || n != 1 {
		t.Errorf("per-group histograms: %d (%v), want 1 for two targets of a group", n, err)
	}
	if n, err := testutil.GatherAndCount(regG, "goroce_probe_sent_total"); err != nil || n != 2 {
		t.Errorf("per-pair counters: %d (%v), want 2", n, err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`goroce_probe_network_rtt_seconds_bucket{class="tor_mesh",target="b1",target_group="tor-b",timestamps="software",le="1.6e-05"} 1`,
		`goroce_probe_network_rtt_seconds_bucket{class="tor_mesh",target="b1",target_group="tor-b",timestamps="software",le="8e-06"} 0`,
		`goroce_probe_completed_total{class="tor_mesh",target="b1",target_group="tor-b",timestamps="software"} 1`,
		`goroce_build_info{goversion="` + runtime.Version() + `",version=`,
	} {
		if !strings.Contains(string(b), line) {
			t.Errorf("scrape lacks %s", line)
		}
	}
}

func TestRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg, Options{}); err == nil {
		t.Error("registering twice: no error")
	}
	if _, err := New(nil, Options{}); err != nil {
		t.Errorf("nil registerer: %v", err)
	}
}

func BenchmarkObserve(b *testing.B) {
	m, err := New(nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	r := result("b1", "tor-b", probe.OutcomeOK)
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(r)
	}
}

func TestSourceInfo(t *testing.T) {
	m, reg := newMetrics(t, Options{Source: "a1", SourceGroup: "tor-a"})
	want := `
# HELP goroce_probe_source_info 1, labelled with the prober's node and group: join on instance to give per-target series their source group.
# TYPE goroce_probe_source_info gauge
goroce_probe_source_info{source="a1",source_group="tor-a"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "goroce_probe_source_info"); err != nil {
		t.Error(err)
	}
	m.SetSource("a1", "tor-b")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.ReplaceAll(want, "tor-a", "tor-b")), "goroce_probe_source_info"); err != nil {
		t.Error(err)
	}
}

func TestObserveAllocs(t *testing.T) {
	m, _ := newMetrics(t, Options{})
	ok := result("b1", "tor-b", probe.OutcomeOK)
	lost := result("b1", "tor-b", probe.OutcomeLost)
	m.Observe(ok)
	m.Observe(lost)
	if n := testing.AllocsPerRun(1000, func() { m.Observe(ok); m.Observe(lost) }); n != 0 {
		t.Errorf("Observe allocates %v times for a known target", n)
	}
}

// TestSetAnalysisWhole: duplicate paths or components do not break a
// scrape, and scrapes concurrent with updates always see one whole
// analysis.
func TestSetAnalysisWhole(t *testing.T) {
	m, reg := newMetrics(t, Options{})
	p := analysis.PathStat{Src: "a1", Dst: "b1", Sent: 100}
	c := analysis.Component{Kind: "host", Name: "b1"}
	m.SetAnalysis([]analysis.PathStat{p, p}, []analysis.Component{c, c})
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("gather after duplicates: %v", err)
	}
	sets := [][]analysis.PathStat{make([]analysis.PathStat, 10), make([]analysis.PathStat, 20)}
	for k, set := range sets {
		for i := range set {
			set[i] = analysis.PathStat{Src: "a1", Dst: fmt.Sprintf("b%d", i), Sent: 100, Loss: float64(k)}
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			m.SetAnalysis(sets[i%2], nil)
		}
	}()
	for i := 0; i < 50; i++ {
		n, err := testutil.GatherAndCount(reg, "goroce_probe_path_loss_ratio")
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 && n != 10 && n != 20 { // 1: the duplicates' analysis, before the first update
			t.Fatalf("a scrape saw %d paths: half an analysis", n)
		}
	}
	<-done
}
