package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/goroce/goroce/internal/testenv"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/metrics"
)

// TestRealPrometheus runs the Prometheus server with rules.yml, scraping a
// real HTTP endpoint of probe/metrics fed with a lossy pair (10 % lost) and
// a healthy one, and reads back what the recording rules compute and which
// alert goes pending: the rules work on what the code really exposes.
func TestRealPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		testenv.Skip(t, testenv.Prometheus, "prometheus not installed (Debian package prometheus): ", err)
	}
	if testing.Short() {
		t.Skip("runs a Prometheus server for about 20 s")
	}

	// The agent side: metrics over HTTP on loopback.
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{Source: "a1", SourceGroup: "tor-a"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	feedDone := make(chan struct{})
	go func() {
		defer close(feedDone)
		b1 := probe.Peer{Name: "b1", Group: "tor-b"}
		b2 := probe.Peer{Name: "b2", Group: "tor-b"}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for i := 0; i < 10; i++ {
				o := probe.OutcomeOK
				if i == 0 {
					o = probe.OutcomeLost
				}
				m.Observe(probe.Result{Peer: b1, Class: "inter_tor", Outcome: o, NetworkRTT: 20 * time.Microsecond})
				m.Observe(probe.Result{Peer: b2, Class: "inter_tor", Outcome: probe.OutcomeOK, NetworkRTT: 20 * time.Microsecond})
			}
		}
	}()
	defer func() { cancel(); <-feedDone }()

	// The Prometheus side: rules.yml, a static target, 1 s intervals.
	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join("prometheus", "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: goroce-probe
    static_configs:
      - targets: [%q]
`, ln.Addr().String())
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	promAddr := pl.Addr().String()
	pl.Close()
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr,
		"--log.level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	}()

	query := func(q string) (map[string]float64, error) {
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var r struct {
			Status string
			Data   struct {
				Result []struct {
					Metric map[string]string
					Value  [2]any
				}
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return nil, err
		}
		out := map[string]float64{}
		for _, s := range r.Data.Result {
			var v float64
			fmt.Sscan(s.Value[1].(string), &v)
			out[s.Metric["target"]+s.Metric["source_group"]+"/"+s.Metric["target_group"]] = v
		}
		return out, nil
	}
	// Wait for the rules to have values.
	deadline := time.Now().Add(40 * time.Second)
	var pair, group map[string]float64
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		pair, _ = query("instance_target:goroce_probe_loss:ratio1m")
		group, _ = query("group_pair:goroce_probe_loss:ratio5m")
		if len(pair) == 2 && len(group) == 1 {
			break
		}
	}
	t.Logf("pair loss %v, group loss %v", pair, group)
	near := func(got, want float64) bool { return got > want-0.02 && got < want+0.02 }
	if v, ok := pair["b1/tor-b"]; !ok || !near(v, 0.1) {
		t.Errorf("loss a1->b1 = %v (%v), want about 0.1", v, ok)
	}
	if v, ok := pair["b2/tor-b"]; !ok || v != 0 {
		t.Errorf("loss a1->b2 = %v (%v), want 0", v, ok)
	}
	if v, ok := group["tor-a/tor-b"]; !ok || !near(v, 0.05) {
		t.Errorf("loss tor-a -> tor-b = %v (%v), want about 0.05", v, ok)
	}
	p99, _ := query("target:goroce_probe_network_rtt_seconds:p99_5m")
	// Histograms are per target group by default: no target label.
	if v := p99["/tor-b"]; v < 16e-6 || v > 32e-6 {
		t.Errorf("RTT p99 to tor-b = %v (%v), want within the 20 µs bucket (16-32 µs)", v, p99)
	}

	// The loss alert is pending for the lossy pair only.
	deadline = time.Now().Add(20 * time.Second)
	var alerts struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
	}
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + promAddr + "/api/v1/alerts")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&alerts)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(alerts.Data.Alerts, func(a struct {
			Labels map[string]string
			State  string
		}) bool {
			return a.Labels["alertname"] == "GoroceProbePairLoss"
		}) {
			break
		}
		time.Sleep(time.Second)
	}
	var loss []string
	for _, a := range alerts.Data.Alerts {
		if a.Labels["alertname"] == "GoroceProbePairLoss" {
			loss = append(loss, a.Labels["target"])
		}
	}
	// Pending, or firing already (its for: is 30 s): no fleet verdict
	// stands here, so nothing explains the loss away.
	if len(loss) != 1 || loss[0] != "b1" {
		t.Errorf("GoroceProbePairLoss alerts for %v, want [b1]", loss)
	}
}
