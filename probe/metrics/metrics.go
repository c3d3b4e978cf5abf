package metrics

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/analysis"
)

// Namespace prefixes every metric name but the build info.
const Namespace = "goroce_probe"

// Other is the value target and target_group take for results beyond the
// MaxPairs cap, and reason for reasons beyond MaxReasons.
const Other = "other"

// Defaults of Options.
const (
	DefaultMaxPairs   = 256
	DefaultMaxReasons = 32
	// DefaultMaxComponents bounds the faulty component series.
	DefaultMaxComponents = 100
)

// DefaultBuckets are the classic histogram buckets, in seconds: 1 µs
// doubling up to about 8.4 s (24 buckets).
func DefaultBuckets() []float64 { return prometheus.ExponentialBuckets(1e-6, 2, 24) }

// Options configure Metrics. Zero values take the defaults.
type Options struct {
	// MaxPairs caps the targets with series of their own (default 256):
	// results for further targets go to target="other" with their own
	// target_group (an aggregate per group), and the per-path analysis gauges of
	// further paths are left out.
	MaxPairs int
	// MaxReasons caps the distinct error reasons (default 32); further
	// ones count as reason="other".
	MaxReasons int
	// MaxComponents caps the faulty component series (default 100).
	MaxComponents int
	// Buckets are the classic buckets of the three histograms (default
	// DefaultBuckets()). Native histograms (bucket factor 1.1) are
	// exposed alongside.
	Buckets []float64
	// PairHistograms gives each target (under MaxPairs) histograms of its
	// own; false keeps the three histograms per target group, with an
	// empty target label (absent in Prometheus): per-ToR aggregates.
	PairHistograms bool
	// Source and SourceGroup are the node and group of the prober, the
	// labels of goroce_probe_source_info (SetSource changes them).
	Source, SourceGroup string
	// Version is the goroce_build_info version label (default the main
	// module's version from runtime/debug, "(devel)" in a work tree).
	Version string
}

// Metrics are the prober's Prometheus metrics. Its methods are safe for
// concurrent use.
type Metrics struct {
	o Options

	networkRTT, proberDelay, responderDelay *prometheus.HistogramVec
	sent, completed, lost, late, errs       *prometheus.CounterVec
	pairs, capped                           prometheus.Gauge
	cappedResults                           prometheus.Counter
	analysis                                *analysisCollector
	fleet                                   *fleetCollector
	buildInfo                               *prometheus.GaugeVec
	sourceInfo                              *prometheus.GaugeVec

	mu      sync.Mutex
	targets map[string]bool // targets with series of their own
	groups  map[string]bool
	reasons map[string]bool
	series  map[[4]string]struct{} // label sets whose counters exist
}

// pairLabels are the labels of the per-result series.
var pairLabels = []string{"target", "target_group", "class", "timestamps"}

// New creates the metrics and registers them with reg (nil: not
// registered, for use with Collectors).
func New(reg prometheus.Registerer, o Options) (*Metrics, error) {
	if o.MaxPairs <= 0 {
		o.MaxPairs = DefaultMaxPairs
	}
	if o.MaxReasons <= 0 {
		o.MaxReasons = DefaultMaxReasons
	}
	if o.MaxComponents <= 0 {
		o.MaxComponents = DefaultMaxComponents
	}
	if len(o.Buckets) == 0 {
		o.Buckets = DefaultBuckets()
	}
	if o.Version == "" {
		o.Version = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			o.Version = bi.Main.Version
		}
	}
	m := &Metrics{o: o, targets: map[string]bool{}, groups: map[string]bool{}, reasons: map[string]bool{}, series: map[[4]string]struct{}{}}
	hist := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace:                       Namespace,
			Name:                            name,
			Help:                            help,
			Buckets:                         o.Buckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}, pairLabels)
	}
	m.networkRTT = hist("network_rtt_seconds", "Network round-trip time of completed probes: (T5-T2)-(T4-T3), host delays excluded.")
	m.proberDelay = hist("prober_delay_seconds", "Prober host delay of completed probes: (T6-T1)-(T5-T2).")
	m.responderDelay = hist("responder_delay_seconds", "Responder host delay of completed probes: T4-T3.")
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	}
	m.sent = counter("sent_total", "Probes whose outcome is known (completed or lost), counted with the outcome so that lost/sent is not skewed by probes in flight.", pairLabels)
	m.completed = counter("completed_total", "Probes answered within the timeout.", pairLabels)
	m.lost = counter("lost_total", "Probes not answered within the timeout.", pairLabels)
	m.late = counter("late_total", "Answers that came after their probe was counted lost.", pairLabels)
	m.errs = counter("errors_total", "Probes that could not be sent or completed with an error, by reason.", append(append([]string(nil), pairLabels...), "reason"))
	m.pairs = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "pairs", Help: "Targets with series of their own."})
	m.capped = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "pairs_capped", Help: "1 when the per-target series cap (max_pairs) is reached and further targets aggregate into target=\"other\"."})
	m.cappedResults = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "capped_results_total", Help: "Results counted under target=\"other\" because of the per-target series cap."})
	m.analysis = newAnalysisCollector(o)
	m.fleet = newFleetCollector(o)
	m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "goroce_build_info", Help: "1, labelled with goroce's version and the Go version that built it."}, []string{"version", "goversion"})
	m.buildInfo.WithLabelValues(o.Version, runtime.Version()).Set(1)
	m.sourceInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "source_info", Help: "1, labelled with the prober's node and group: join on instance to give per-target series their source group."}, []string{"source", "source_group"})
	m.sourceInfo.WithLabelValues(o.Source, o.SourceGroup).Set(1)
	if reg != nil {
		for _, c := range m.Collectors() {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Collectors returns every collector of m, to register elsewhere.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.networkRTT, m.proberDelay, m.responderDelay,
		m.sent, m.completed, m.lost, m.late, m.errs,
		m.pairs, m.capped, m.cappedResults,
		m.analysis, m.fleet,
		m.buildInfo, m.sourceInfo,
	}
}

// SetSource changes the labels of goroce_probe_source_info (after a
// pinglist reload moved the node to another group).
func (m *Metrics) SetSource(name, group string) {
	m.sourceInfo.Reset()
	m.sourceInfo.WithLabelValues(name, group).Set(1)
}

// admit returns the target and group label values for a result, applying
// the cap.
func (m *Metrics) admit(target, group string) (string, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.groups[group] {
		if len(m.groups) >= m.o.MaxPairs {
			group = Other
		} else {
			m.groups[group] = true
		}
	}
	if !m.targets[target] {
		if len(m.targets) >= m.o.MaxPairs {
			// Beyond the cap: one aggregate per target group (ToR).
			m.capped.Set(1)
			m.cappedResults.Inc()
			return Other, group
		}
		m.targets[target] = true
		m.pairs.Set(float64(len(m.targets)))
	}
	return target, group
}

func (m *Metrics) reason(r string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reasons[r] {
		return r
	}
	if len(m.reasons) >= m.o.MaxReasons {
		return Other
	}
	m.reasons[r] = true
	return r
}

// TargetName is the target label of a peer: its name, or its address when
// it has none.
func TargetName(p probe.Peer) string {
	if p.Name != "" {
		return p.Name
	}
	if p.Addr.IsValid() {
		return p.Addr.String()
	}
	return ""
}

// Observe counts one result: ok results in sent and completed and in the
// three histograms, lost ones in sent and lost, late ones in late, errors
// in errors by reason.
func (m *Metrics) Observe(r probe.Result) {
	target, group := m.admit(TargetName(r.Peer), r.Peer.Group)
	lv := [4]string{target, group, r.Class, r.Timestamps.String()}
	m.mu.Lock()
	_, known := m.series[lv]
	if !known {
		m.series[lv] = struct{}{}
	}
	m.mu.Unlock()
	if !known {
		// Every counter of a label set exists from its first result on,
		// at 0: a pair that never loses has lost_total 0, not no series,
		// so that its loss ratio is 0 rather than absent.
		for _, c := range []*prometheus.CounterVec{m.sent, m.completed, m.lost, m.late} {
			c.WithLabelValues(lv[:]...)
		}
	}
	switch r.Outcome {
	case probe.OutcomeOK:
		m.sent.WithLabelValues(lv[:]...).Inc()
		m.completed.WithLabelValues(lv[:]...).Inc()
		hv := lv
		if !m.o.PairHistograms {
			hv[0] = "" // per target group
		}
		m.networkRTT.WithLabelValues(hv[:]...).Observe(r.NetworkRTT.Seconds())
		m.proberDelay.WithLabelValues(hv[:]...).Observe(r.ProberDelay.Seconds())
		m.responderDelay.WithLabelValues(hv[:]...).Observe(r.ResponderDelay.Seconds())
	case probe.OutcomeLost:
		m.sent.WithLabelValues(lv[:]...).Inc()
		m.lost.WithLabelValues(lv[:]...).Inc()
	case probe.OutcomeLate:
		m.late.WithLabelValues(lv[:]...).Inc()
	default:
		reason := r.Reason
		if reason == "" {
			reason = "unknown"
		}
		m.errs.WithLabelValues(lv[0], lv[1], lv[2], lv[3], m.reason(reason)).Inc()
	}
}

// SetAnalysis replaces the per-path gauges with paths (at most MaxPairs of
// them, the rest counted in goroce_probe_paths_left_out) and the faulty
// component gauges with faulty (at most MaxComponents), at once: a scrape
// sees the last analysis whole. Paths not judged get loss and p99 gauges but
// no degraded gauge.
func (m *Metrics) SetAnalysis(paths []analysis.PathStat, faulty []analysis.Component) {
	m.analysis.set(paths, faulty)
}
