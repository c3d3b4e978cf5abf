package agent_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/agent"
	"github.com/goroce/goroce/probe/analysis"
	pl "github.com/goroce/goroce/probe/pinglist"
)

// scrapeSeries counts the series a classic (text) scrape of reg gives
// Prometheus: a histogram is its buckets, +Inf, sum and count.
func scrapeSeries(tb testing.TB, reg *prometheus.Registry) int {
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				n += len(m.GetHistogram().GetBucket()) + 3
			} else {
				n++
			}
		}
	}
	return n
}

// BenchmarkFleet1000: one agent of a fleet of 1,000 nodes in 25 groups of
// 40 (the deploy/ pinglist's defaults: every node of its group and 16 of
// other groups at 10 probes/s), its heap and the series it exposes once
// 30 s of results for every target are in, with histograms per target
// group (the default) and per target (pair_histograms: true, as before:
// the baseline in the same run).
func BenchmarkFleet1000(b *testing.B) {
	for _, pairHist := range []bool{false, true} {
		b.Run(fmt.Sprintf("pair_histograms=%v", pairHist), func(b *testing.B) { benchAgent1000(b, pairHist) })
	}
}

func benchAgent1000(b *testing.B, pairHist bool) {
	dir := b.TempDir()
	path := filepath.Join(dir, "pinglist.yaml")
	port := freePort(b, 1)
	const groups, perGroup = 25, 40
	cfg := bigPinglist(port, groups, perGroup)
	cfg = strings.Replace(cfg, "  max_pairs: 100000\n", fmt.Sprintf("  max_pairs: 100000\n  pair_histograms: %v\n", pairHist), 1)
	write(b, path, cfg)
	var heap, series, targets float64
	for range b.N {
		dev := softContext(b, addr(0))
		base := heapInUse()
		ln, err := net.Listen("tcp", netip.AddrPortFrom(addr(0), uint16(port)).String())
		if err != nil {
			b.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		a, err := agent.New(agent.Options{Device: dev, Pinglist: path, Self: addr(0), Listener: ln, Registry: reg, FetchTimeout: 100 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		ts := a.Targets()
		now := time.Now()
		for s := 0; s < 30; s++ {
			for _, t := range ts {
				a.Feed(probe.Result{Peer: probe.Peer{Name: t.Node.Name, Group: t.Node.Group, Addr: t.Node.Addr},
					Class: t.Class, FlowLabel: uint32(s + 1), Sent: now.Add(time.Duration(s-30) * time.Second),
					NetworkRTT: time.Duration(100+s) * time.Microsecond, Outcome: probe.OutcomeOK})
			}
		}
		time.Sleep(3 * time.Second)
		heap = float64(heapInUse() - base)
		series = float64(scrapeSeries(b, reg))
		targets = float64(len(ts))
		cancel()
		<-done
	}
	b.ReportMetric(heap/(1<<20), "MiB/agent")
	b.ReportMetric(series, "series/agent")
	b.ReportMetric(series*groups*perGroup/1e6, "M-series/fleet")
	b.ReportMetric(targets, "targets")
}

// BenchmarkFleetDoc1000: the fleet view an exporter makes of the reports
// of 1,000 agents in 25 groups of 40 (the deploy/ pinglist's defaults),
// one host losing 10 %: the size of its document, and the time merging
// and diagnosing them takes.
func BenchmarkFleetDoc1000(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "pinglist.yaml")
	write(b, path, bigPinglist(9478, 25, 40))
	list, err := pl.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	// The fleet view: every node's report (300 probes a path, one lossy
	// host), merged and diagnosed, and the document's JSON.
	hosts := map[string]string{}
	for _, n := range list.Nodes {
		hosts[n.Name] = n.Group
	}
	var reports [][]analysis.PathStat
	for _, n := range list.Nodes {
		var ps []analysis.PathStat
		for _, t := range list.Targets(n) {
			p := analysis.PathStat{Src: n.Name, SrcGroup: n.Group, Dst: t.Node.Name, DstGroup: t.Node.Group, Class: t.Class,
				Sent: 300, Completed: 300, P50: 100 * time.Microsecond, P99: 200 * time.Microsecond, Labels: 115}
			if t.Node.Name == "node00042" {
				p.Lost, p.Completed, p.Loss, p.Degraded = 30, 270, 0.1, true
			}
			ps = append(ps, p)
		}
		reports = append(reports, ps)
	}
	b.ResetTimer()
	var paths []analysis.PathStat
	var vs []analysis.Verdict
	for range b.N {
		paths = analysis.Merge(reports...)
		vs = analysis.Diagnose(hosts, paths, analysis.DiagnoseOptions{})
	}
	b.StopTimer()
	doc := agent.FleetDoc{Paths: paths, Verdicts: vs, Groups: list.Groups()}
	for _, n := range list.Nodes {
		doc.Nodes = append(doc.Nodes, agent.FleetNode{Name: n.Name, Group: n.Group, Addr: n.Addr.String(), OK: true})
	}
	js, err := json.Marshal(doc)
	if err != nil {
		b.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Suspects[0].Name != "node00042" {
		b.Errorf("verdicts %v", vs)
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	zw.Write(js)
	zw.Close()
	b.ReportMetric(float64(len(js))/1e6, "MB/fleet-doc")
	b.ReportMetric(float64(gz.Len())/1e6, "MB/fleet-doc-gzip")
	b.ReportMetric(float64(len(paths)), "fleet-paths")
}
