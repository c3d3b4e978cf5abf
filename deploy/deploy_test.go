package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/goroce/goroce/internal/testenv"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/analysis"
	"github.com/goroce/goroce/probe/metrics"
	"github.com/goroce/goroce/probe/pinglist"
)

// docs decodes every YAML document of a file.
func docs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []map[string]any
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m != nil {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no YAML document", path)
	}
	return out
}

// get walks a decoded document: keys for maps, integers for lists.
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: not a map", path)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("at %v: not a list of %d", path, k+1)
			}
			v = l[k]
		}
	}
	return v
}

func str(t *testing.T, v any, path ...any) string {
	t.Helper()
	s, ok := get(t, v, path...).(string)
	if !ok {
		t.Fatalf("%v: not a string", path)
	}
	return s
}

func TestConfigMapIsThePinglist(t *testing.T) {
	want, err := os.ReadFile("pinglist.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cm := docs(t, filepath.Join("kubernetes", "configmap.yaml"))[0]
	if k := str(t, cm, "kind"); k != "ConfigMap" {
		t.Fatalf("kind %s", k)
	}
	got := str(t, cm, "data", "pinglist.yaml")
	if got != string(want) {
		t.Errorf("the ConfigMap's pinglist.yaml differs from deploy/pinglist.yaml")
	}
	l, err := pinglist.Parse([]byte(got))
	if err != nil {
		t.Fatal(err)
	}
	if self, ok := l.Self(netip.MustParseAddr("10.0.1.1")); !ok || len(l.Targets(self)) == 0 {
		t.Error("the example pinglist gives host-a1 no target")
	}
}

func TestDaemonSet(t *testing.T) {
	ds := docs(t, filepath.Join("kubernetes", "daemonset.yaml"))[0]
	cm := docs(t, filepath.Join("kubernetes", "configmap.yaml"))[0]
	ns := docs(t, filepath.Join("kubernetes", "namespace.yaml"))[0]
	pm := docs(t, filepath.Join("kubernetes", "podmonitor.yaml"))[0]
	if str(t, ds, "apiVersion") != "apps/v1" || str(t, ds, "kind") != "DaemonSet" {
		t.Fatalf("not an apps/v1 DaemonSet")
	}
	namespace := str(t, ns, "metadata", "name")
	for _, d := range []map[string]any{ds, cm, pm} {
		if n := str(t, d, "metadata", "namespace"); n != namespace {
			t.Errorf("%s in namespace %s, not %s", str(t, d, "kind"), n, namespace)
		}
	}
	spec := get(t, ds, "spec", "template", "spec")
	if get(t, spec, "hostNetwork") != true {
		t.Error("hostNetwork is not true")
	}
	// The selector selects the pods, and the PodMonitor selects them too.
	labels := get(t, ds, "spec", "template", "metadata", "labels").(map[string]any)
	for _, sel := range []any{get(t, ds, "spec", "selector", "matchLabels"), get(t, pm, "spec", "selector", "matchLabels")} {
		for k, v := range sel.(map[string]any) {
			if labels[k] != v {
				t.Errorf("selector %s=%v does not match the pods' labels", k, v)
			}
		}
	}
	c := get(t, spec, "containers", 0)
	var args []string
	for _, a := range get(t, c, "args").([]any) {
		args = append(args, a.(string))
	}
	if len(args) < 2 || args[0] != "probe" || args[1] != "agent" {
		t.Errorf("args %v do not run the probe agent", args)
	}
	// The pinglist is mounted where --config reads it.
	var config string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			config = v
		}
	}
	mount := get(t, c, "volumeMounts", 0)
	vol := get(t, spec, "volumes", 0)
	if str(t, mount, "name") != str(t, vol, "name") || filepath.Dir(config) != str(t, mount, "mountPath") {
		t.Errorf("--config=%s is not in the mounted volume %v", config, mount)
	}
	if str(t, vol, "configMap", "name") != str(t, cm, "metadata", "name") {
		t.Errorf("the volume mounts ConfigMap %s, not %s", str(t, vol, "configMap", "name"), str(t, cm, "metadata", "name"))
	}
	if filepath.Base(config) != "pinglist.yaml" {
		t.Errorf("--config=%s is not the ConfigMap's key", config)
	}
	if !slices.Contains(args, "--addr=$(HOST_IP)") || str(t, c, "env", 0, "valueFrom", "fieldRef", "fieldPath") != "status.hostIP" {
		t.Error("the agent is not given its node's address")
	}
	// The port is the pinglist's http_port.
	l, err := pinglist.Load("pinglist.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p := get(t, c, "ports", 0, "containerPort"); p != l.Settings.HTTPPort {
		t.Errorf("metrics port %v, the pinglist's http_port %d", p, l.Settings.HTTPPort)
	}
	if !slices.Contains(args, "--listen=:"+strconv.Itoa(l.Settings.HTTPPort)) {
		t.Errorf("args %v do not listen on the pinglist's http_port", args)
	}
	if a := get(t, ds, "spec", "template", "metadata", "annotations", "prometheus.io/port"); a != strconv.Itoa(l.Settings.HTTPPort) {
		t.Errorf("prometheus.io/port %v", a)
	}
	// AF_XDP's capabilities and no others; nothing privileged.
	var caps []string
	for _, x := range get(t, c, "securityContext", "capabilities", "add").([]any) {
		caps = append(caps, x.(string))
	}
	slices.Sort(caps)
	if want := []string{"BPF", "IPC_LOCK", "NET_ADMIN", "NET_RAW"}; !slices.Equal(caps, want) {
		t.Errorf("capabilities %v, want %v", caps, want)
	}
	if d := get(t, c, "securityContext", "capabilities", "drop"); len(d.([]any)) != 1 || d.([]any)[0] != "ALL" {
		t.Errorf("capabilities not dropped first: %v", d)
	}
	if p := get(t, c, "securityContext", "privileged"); p == true {
		t.Error("privileged")
	}
	// probe.SelfPath, where an agent serves itself.
	if p := str(t, c, "readinessProbe", "httpGet", "path"); p != "/probe/v1/self" {
		t.Errorf("readiness probe on %s", p)
	}
}

func TestPrometheusConfig(t *testing.T) {
	ds := docs(t, filepath.Join("kubernetes", "daemonset.yaml"))[0]
	ns := docs(t, filepath.Join("kubernetes", "namespace.yaml"))[0]
	for _, f := range []string{"prometheus.yml", "prometheus-static.yml"} {
		c := docs(t, filepath.Join("prometheus", f))[0]
		if r := str(t, c, "rule_files", 0); r != "rules.yml" {
			t.Errorf("%s: rule file %s", f, r)
		}
		if j := str(t, c, "scrape_configs", 0, "job_name"); j != "goroce-probe" {
			t.Errorf("%s: job %s, the rules expect goroce-probe", f, j)
		}
	}
	c := docs(t, filepath.Join("prometheus", "prometheus.yml"))[0]
	sd := get(t, c, "scrape_configs", 0, "kubernetes_sd_configs", 0)
	if str(t, sd, "role") != "pod" || str(t, sd, "namespaces", "names", 0) != str(t, ns, "metadata", "name") {
		t.Errorf("kubernetes_sd %v", sd)
	}
	keep := get(t, c, "scrape_configs", 0, "relabel_configs", 0)
	if str(t, keep, "action") != "keep" || str(t, keep, "regex") != get(t, ds, "spec", "template", "metadata", "labels", "app.kubernetes.io/name") {
		t.Errorf("the pod filter %v does not keep the DaemonSet's pods", keep)
	}
}

// promtool runs promtool in dir, skipping the test when it is missing.
func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Skip(t, testenv.Prometheus, "promtool not installed (Debian package prometheus): ", err)
	}
	cmd := exec.Command(p, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestPromtool(t *testing.T) {
	dir := "prometheus"
	t.Run("check rules", func(t *testing.T) {
		if out, err := promtool(t, dir, "check", "rules", "rules.yml"); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	})
	t.Run("test rules", func(t *testing.T) {
		if out, err := promtool(t, dir, "test", "rules", "rules_test.yml"); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	})
	t.Run("check static config", func(t *testing.T) {
		if out, err := promtool(t, dir, "check", "config", "prometheus-static.yml"); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	})
	t.Run("check kubernetes config", func(t *testing.T) {
		out, err := promtool(t, dir, "check", "config", "prometheus.yml")
		if err != nil && strings.Contains(out, "field kubernetes_sd_configs not found") {
			t.Skip("this promtool was built without Kubernetes service discovery (Debian's is); TestPrometheusConfig checks the file's structure")
		}
		if err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	})
	// A rule file that is wrong must fail: the checks above can fail.
	t.Run("a broken rule fails", func(t *testing.T) {
		tmp := t.TempDir()
		if err := os.WriteFile(filepath.Join(tmp, "bad.yml"), []byte("groups:\n- name: x\n  rules:\n  - record: a:b\n    expr: sum(rate(x[1m])\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := promtool(t, tmp, "check", "rules", "bad.yml"); err == nil {
			t.Errorf("promtool accepted a broken rule:\n%s", out)
		}
	})
}

type rulesFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		Title      string `json:"title"`
		Type       string `json:"type"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
		Transformations []struct {
			ID string `json:"id"`
		} `json:"transformations"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
		} `json:"list"`
	} `json:"templating"`
}

// exposed returns the metric names probe/metrics exposes, with the
// series names of its histograms.
func exposed(t *testing.T) map[string]bool {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{Source: "a1", SourceGroup: "tor-a"})
	if err != nil {
		t.Fatal(err)
	}
	p := probe.Peer{Name: "b1", Group: "tor-b"}
	for _, o := range []probe.Outcome{probe.OutcomeOK, probe.OutcomeLost, probe.OutcomeLate, probe.OutcomeError} {
		m.Observe(probe.Result{Peer: p, Outcome: o, NetworkRTT: time.Microsecond, Reason: "post"})
	}
	m.SetAnalysis([]analysis.PathStat{{Src: "a1", Dst: "b1"}}, []analysis.Component{{Kind: analysis.KindHost, Name: "b1"}})
	m.SetFleet(true, []analysis.Verdict{{Symptom: analysis.SymptomLoss, Suspects: []analysis.Suspect{{Kind: analysis.KindHost, Name: "b1"}}, Confidence: 1}})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		names[n] = true
		if mf.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[n+s] = true
			}
		}
	}
	// The agent's own metrics (package agent registers them; its tests
	// gather them from a running agent).
	for _, n := range []string{"goroce_probe_agent_reloads_total", "goroce_probe_agent_targets_unresolved", "goroce_probe_agent_listed"} {
		names[n] = true
	}
	return names
}

var metricName = regexp.MustCompile(`\b[a-z_:]*goroce_[a-z0-9_:]+`)

func TestDashboardAndRulesUseRealNames(t *testing.T) {
	names := exposed(t)
	var rf rulesFile
	b, err := os.ReadFile(filepath.Join("prometheus", "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	var exprs []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				names[r.Record] = true
			}
			if r.Alert != "" {
				alerts[r.Alert] = true
			}
			exprs = append(exprs, r.Expr)
		}
	}
	for _, a := range []string{"GoroceProbePairLoss", "GoroceProbeHostRTTHigh", "GoroceProbeAgentDown", "GoroceProbeFault",
		"GoroceProbeReloadFailed", "GoroceProbeDiscoveryFailing", "GoroceProbeErrors", "GoroceProbeNoFleetExporter"} {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}

	b, err = os.ReadFile(filepath.Join("grafana", "goroce-probe.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard without uid or title")
	}
	types := map[string]string{}
	for _, p := range d.Panels {
		types[p.Title] = p.Type
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %q, not the dashboard's variable", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if q.Expr == "" || q.RefID == "" {
				t.Errorf("panel %q: empty query or refId", p.Title)
			}
			exprs = append(exprs, q.Expr)
		}
		if p.Title == "Loss ratio, group × group" && (len(p.Transformations) == 0 || p.Transformations[0].ID != "groupingToMatrix") {
			t.Errorf("the group matrix is not grouped to a matrix")
		}
	}
	for title, typ := range map[string]string{
		"Loss ratio, group × group":      "table",
		"Worst pairs":                    "table",
		"Network RTT heat map":           "heatmap",
		"Network RTT p50 and p99":        "timeseries",
		"Prober and responder delay p99": "timeseries",
	} {
		if types[title] != typ {
			t.Errorf("panel %q: type %q, want %q", title, types[title], typ)
		}
	}
	for _, v := range []string{"datasource", "job", "instance", "target_group"} {
		if !slices.ContainsFunc(d.Templating.List, func(x struct {
			Name string `json:"name"`
		}) bool {
			return x.Name == v
		}) {
			t.Errorf("no $%s variable", v)
		}
	}
	// Every goroce name a rule or a panel queries exists.
	used := 0
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			used++
			if !names[n] {
				t.Errorf("%q queries %s, which neither probe/metrics nor a recording rule provides", e, n)
			}
		}
	}
	if used < 20 {
		t.Errorf("only %d names found in the queries", used)
	}
	// Loss divides by (rate(sent) > 0), never clamp_min.
	for _, e := range exprs {
		if strings.Contains(e, "clamp_min") {
			t.Errorf("%q uses clamp_min", e)
		}
	}
}
