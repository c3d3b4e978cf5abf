package metrics

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/probe/analysis"
)

// fleetCollector exposes the fleet verdicts of the exporting agent: one
// goroce_probe_fleet_fault series per verdict (its best suspect's kind,
// name and direction, every suspect in candidates), and
// goroce_probe_fleet_exporter, 1 on the exporter and 0 elsewhere.
type fleetCollector struct {
	fault, exporter *prometheus.Desc
	max             int

	mu       sync.Mutex
	exports  bool
	verdicts []analysis.Verdict
}

func newFleetCollector(o Options) *fleetCollector {
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "", n) }
	return &fleetCollector{
		max: o.MaxComponents,
		fault: prometheus.NewDesc(name("fleet_fault"),
			"The fleet verdicts, exported by one agent (goroce_probe_fleet_exporter 1): the confidence that the component's paths are over the SLA, per fault. "+
				"kind, name and direction are the best suspect's; an ambiguous verdict (ambiguous=\"true\") lists every suspect in candidates.",
			[]string{"symptom", "kind", "name", "direction", "ambiguous", "candidates"}, nil),
		exporter: prometheus.NewDesc(name("fleet_exporter"), "1 when this agent is the one that exports the fleet verdicts (the first live node by name), 0 otherwise.", nil, nil),
	}
}

// SetFleet sets whether this agent exports the fleet verdicts, and the
// verdicts (ignored when it does not; at most MaxComponents of them).
func (m *Metrics) SetFleet(exports bool, vs []analysis.Verdict) {
	if !exports {
		vs = nil
	}
	vs = append([]analysis.Verdict(nil), vs[:min(len(vs), m.fleet.max)]...)
	m.fleet.mu.Lock()
	m.fleet.exports, m.fleet.verdicts = exports, vs
	m.fleet.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.fault
	ch <- c.exporter
}

// Collect implements prometheus.Collector.
func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	exports, vs := c.exports, c.verdicts
	c.mu.Unlock()
	e := 0.0
	if exports {
		e = 1
	}
	ch <- prometheus.MustNewConstMetric(c.exporter, prometheus.GaugeValue, e)
	seen := map[string]bool{}
	for _, v := range vs {
		if len(v.Suspects) == 0 || seen[v.Key()] {
			continue
		}
		seen[v.Key()] = true
		s := v.Suspects[0]
		labels := make([]string, len(v.Suspects))
		for i, x := range v.Suspects {
			labels[i] = x.Label()
		}
		amb := "false"
		if v.Ambiguous {
			amb = "true"
		}
		if m, err := prometheus.NewConstMetric(c.fault, prometheus.GaugeValue, v.Confidence,
			v.Symptom, s.Kind, s.Name, s.Direction, amb, strings.Join(labels, ", ")); err == nil {
			ch <- m
		}
	}
}
