package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/probe/analysis"
)

// analysisCollector exposes the last analysis as constant metrics, so that
// replacing it is one pointer swap and a scrape never sees half of one.
type analysisCollector struct {
	maxPaths, maxComponents int

	loss, p99, degraded, leftOut, faulty *prometheus.Desc

	mu      sync.Mutex
	paths   []analysis.PathStat
	comps   []analysis.Component
	dropped int
}

func newAnalysisCollector(o Options) *analysisCollector {
	pathLabels := []string{"source", "source_group", "target", "target_group"}
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "", n) }
	return &analysisCollector{
		maxPaths:      o.MaxPairs,
		maxComponents: o.MaxComponents,
		loss:          prometheus.NewDesc(name("path_loss_ratio"), "Loss ratio of the path over the analysis window.", pathLabels, nil),
		p99:           prometheus.NewDesc(name("path_rtt_p99_seconds"), "Network RTT p99 of the path over the analysis window.", pathLabels, nil),
		degraded:      prometheus.NewDesc(name("path_degraded"), "1 when the path is degraded (loss or p99 over the SLA), 0 when healthy; absent when not judged.", pathLabels, nil),
		leftOut:       prometheus.NewDesc(name("paths_left_out"), "Paths of the last analysis left out of the path gauges by the cap.", nil, nil),
		faulty:        prometheus.NewDesc(name("faulty_component"), "1 for each component (kind link, host or group) the last localisation names as faulty.", []string{"kind", "name"}, nil),
	}
}

func (c *analysisCollector) set(paths []analysis.PathStat, faulty []analysis.Component) {
	n := min(len(paths), c.maxPaths)
	p := append([]analysis.PathStat(nil), paths[:n]...)
	f := append([]analysis.Component(nil), faulty[:min(len(faulty), c.maxComponents)]...)
	c.mu.Lock()
	c.paths, c.comps, c.dropped = p, f, len(paths)-n
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *analysisCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.loss, c.p99, c.degraded, c.leftOut, c.faulty} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *analysisCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	paths, comps, dropped := c.paths, c.comps, c.dropped
	c.mu.Unlock()
	send := func(d *prometheus.Desc, v float64, lv ...string) {
		if m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, lv...); err == nil {
			ch <- m
		}
	}
	seen := make(map[[2]string]bool, len(paths))
	for _, p := range paths {
		k := [2]string{p.Src, p.Dst}
		if seen[k] {
			continue // a duplicate would fail the whole scrape
		}
		seen[k] = true
		lv := []string{p.Src, p.SrcGroup, p.Dst, p.DstGroup}
		send(c.loss, p.Loss, lv...)
		send(c.p99, p.P99.Seconds(), lv...)
		if !p.Insufficient {
			d := 0.0
			if p.Degraded {
				d = 1
			}
			send(c.degraded, d, lv...)
		}
	}
	send(c.leftOut, float64(dropped))
	seenC := make(map[analysis.Component]bool, len(comps))
	for _, x := range comps {
		k := analysis.Component{Kind: x.Kind, Name: x.Name}
		if seenC[k] {
			continue
		}
		seenC[k] = true
		send(c.faulty, 1, x.Kind, x.Name)
	}
}
