package agent

import (
	"compress/gzip"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/analysis"
	"github.com/goroce/goroce/probe/pinglist"
)

// HTTP paths the agent serves besides probe.SelfPath.
const (
	MetricsPath      = "/metrics"
	PathsPath        = "/probe/v1/paths"
	HistoryPath      = "/probe/v1/history"
	FleetPath        = "/probe/v1/fleet"
	FleetHistoryPath = "/probe/v1/fleet/history"
)

// maxPathsBody bounds a peer's /probe/v1/paths document the fleet view
// reads.
const maxPathsBody = 16 << 20

//go:embed web/index.html
var web embed.FS

// PathsDoc is the document at PathsPath: one agent's view of its paths.
// It reads as an analysis.Report.
type PathsDoc struct {
	// Source, Group and Addr are this node's name, group and address.
	Source string `json:"source"`
	Group  string `json:"group"`
	Addr   string `json:"addr"`
	// Timestamps is the kind of this node's completion timestamps.
	Timestamps string `json:"timestamps"`
	// Generated is when the document was made; Window the analysis
	// window the statistics cover.
	Generated time.Time `json:"generated"`
	Window    float64   `json:"window_seconds"`
	// Paths are this agent's paths, Faulty what analysis.Localize makes
	// of them alone (the fleet view localises over every agent's paths).
	Paths  []analysis.PathStat  `json:"paths"`
	Faulty []analysis.Component `json:"faulty"`
}

// FleetNode is one node of the fleet view and whether its paths could be
// fetched.
type FleetNode struct {
	// Name, Group and Addr are as the pinglist gives them.
	Name  string `json:"name"`
	Group string `json:"group"`
	Addr  string `json:"addr"`
	// Host and Rail are a rail's (a node of several rails is one
	// FleetNode a rail, named "<host>/<rail>").
	Host string `json:"host,omitempty"`
	Rail string `json:"rail,omitempty"`
	// OK says its paths were fetched; Error why not.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// FleetDoc is the document at FleetPath: every agent's paths merged, and
// the components the analysis finds faulty.
type FleetDoc struct {
	// Served is the node that answered.
	Served string `json:"served_by"`
	// Generated is when the view was made (it is reused for FleetTTL).
	Generated time.Time `json:"generated"`
	// Groups are the pinglist's groups, sorted; Nodes its nodes.
	Groups []string    `json:"groups"`
	Nodes  []FleetNode `json:"nodes"`
	// MaxLoss and MaxP99 are the pinglist's thresholds (the page's
	// colours).
	MaxLoss   float64       `json:"max_loss"`
	MaxP99    time.Duration `json:"max_p99_ns"`
	MinProbes int           `json:"min_probes"`
	// Paths are every agent's paths (analysis.Merge). Verdicts are what
	// analysis.Diagnose makes of them over the pinglist's topology: each
	// a component, or an ambiguity set, with its confidence. Faulty lists
	// the verdicts' suspects as components (every suspect of an ambiguous
	// verdict).
	Paths    []analysis.PathStat  `json:"paths"`
	Verdicts []analysis.Verdict   `json:"verdicts"`
	Faulty   []analysis.Component `json:"faulty"`
	// History is the verdicts this agent has given over time (with start
	// and end), newest first: the exporter's is complete, another agent's
	// holds the views it was asked for.
	History []analysis.Record `json:"history"`
	// Exporter is the node that exports the fleet verdicts to Prometheus
	// (the first live node by name), as this agent last found it.
	Exporter string `json:"exporter"`
}

// Handler returns the agent's HTTP handler: the page at /, MetricsPath,
// probe.SelfPath, PathsPath, HistoryPath (?dst=NAME), FleetPath and
// FleetHistoryPath (?src=NAME&dst=NAME).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+MetricsPath, promhttp.HandlerFor(a.opts.Registry, promhttp.HandlerOpts{
		EnableOpenMetrics: true, Registry: a.opts.Registry,
	}))
	mux.Handle(probe.SelfPath, probe.SelfHandler(a.Self))
	mux.HandleFunc("GET "+PathsPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSONGzip(w, r, a.pathsDoc())
	})
	mux.HandleFunc("GET "+HistoryPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, a.hist.get(r.URL.Query().Get("dst")))
	})
	mux.HandleFunc("GET "+FleetPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSONGzip(w, r, a.Fleet(r.Context()))
	})
	mux.HandleFunc("GET "+FleetHistoryPath, a.fleetHistory)
	mux.HandleFunc("GET "+SeparatePath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, a.separateDoc())
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := web.ReadFile("web/index.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(b)
	})
	return mux
}

// writeJSONGzip is writeJSON, gzipped when the client accepts it (peers'
// Go clients and browsers do): the fleet document of 1,000 nodes is
// about 12 MB of JSON, a tenth of it gzipped.
func writeJSONGzip(w http.ResponseWriter, r *http.Request, v any) {
	if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		writeJSON(w, v)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Encoding", "gzip")
	w.Header().Set("Vary", "Accept-Encoding")
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	zw.Write(append(b, '\n'))
	zw.Close()
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(b, '\n'))
}

func (a *Agent) pathsDoc() PathsDoc {
	c := a.cfg.Load()
	a.analysisMu.Lock()
	paths, faulty := a.paths, a.faulty
	a.analysisMu.Unlock()
	if paths == nil {
		paths = []analysis.PathStat{}
	}
	if faulty == nil {
		faulty = []analysis.Component{}
	}
	return PathsDoc{
		Source: c.self.Name, Group: c.self.Group, Addr: a.opts.Self.String(),
		Timestamps: a.responder.Timestamps().String(),
		Generated:  time.Now(), Window: c.list.Settings.Window.Seconds(),
		Paths: paths, Faulty: faulty,
	}
}

// fleetCache is the last fleet view and when it was made; mu is held
// while one is made, so that concurrent requests share one round of
// fetches.
type fleetCache struct {
	mu   sync.Mutex
	at   time.Time
	doc  FleetDoc
	hist *analysis.VerdictHistory
}

// Fleet returns the fleet view: this agent's paths and those every other
// node of the pinglist serves at PathsPath (fetched at most FleetWorkers at
// a time, reused for FleetTTL), merged, with the components
// analysis.Localize finds faulty on the merged paths.
func (a *Agent) Fleet(ctx context.Context) FleetDoc {
	a.fleet.mu.Lock()
	defer a.fleet.mu.Unlock()
	if time.Since(a.fleet.at) < a.opts.FleetTTL {
		return a.fleet.doc
	}
	c := a.cfg.Load()
	s := c.list.Settings
	doc := FleetDoc{
		Served: c.self.Name, Groups: c.list.Groups(),
		MaxLoss: s.MaxLoss, MaxP99: s.MaxP99RTT, MinProbes: s.MinProbes,
		Nodes: make([]FleetNode, len(c.list.Nodes)),
	}
	per := make([][]analysis.PathStat, len(c.list.Nodes))
	sem := make(chan struct{}, a.opts.FleetWorkers)
	var wg sync.WaitGroup
	for i, n := range c.list.Nodes {
		doc.Nodes[i] = FleetNode{Name: n.Name, Group: n.Group, Addr: n.Addr.String(), Host: n.Host, Rail: n.Rail}
		if n.Addr == a.opts.Self {
			per[i] = a.Paths()
			doc.Nodes[i].OK = true
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(i int, n pinglist.Node) {
			defer func() { <-sem; wg.Done() }()
			pd, err := a.fetchPaths(ctx, n)
			if err != nil {
				doc.Nodes[i].Error = err.Error()
				return
			}
			doc.Nodes[i].OK = true
			per[i] = pd.Paths
		}(i, n)
	}
	wg.Wait()
	doc.Paths = analysis.Merge(per...)
	doc.Generated = time.Now()
	doc.Verdicts = analysis.Diagnose(c.hosts, doc.Paths, analysis.DiagnoseOptions{MaxLoss: lossThreshold(s.MaxLoss)})
	doc.Faulty = []analysis.Component{}
	for _, v := range doc.Verdicts {
		for _, x := range v.Suspects {
			doc.Faulty = append(doc.Faulty, analysis.Component{Kind: x.Kind, Name: x.Name, Paths: x.Paths})
		}
	}
	if doc.Verdicts == nil {
		doc.Verdicts = []analysis.Verdict{}
	}
	a.fleet.hist.Update(doc.Generated, doc.Verdicts)
	doc.History = a.fleet.hist.Records()
	if doc.History == nil {
		doc.History = []analysis.Record{}
	}
	doc.Exporter = a.exporterName()
	a.fleet.doc, a.fleet.at = doc, doc.Generated
	return doc
}

// fetchPaths gets node n's paths, checked by analysis.DecodeReport: they
// must all be n's own.
func (a *Agent) fetchPaths(ctx context.Context, n pinglist.Node) (analysis.Report, error) {
	b, err := a.get(ctx, a.baseURL(n.Addr)+PathsPath)
	if err != nil {
		return analysis.Report{}, err
	}
	r, err := analysis.DecodeReport(b)
	if err == nil && r.Source != n.Name {
		err = fmt.Errorf("%s: the paths of %q, not of %q", n.Addr, r.Source, n.Name)
	}
	return r, err
}

func (a *Agent) getJSON(ctx context.Context, url string, v any) error {
	b, err := a.get(ctx, url)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	return nil
}

func (a *Agent) get(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPathsBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxPathsBody {
		return nil, fmt.Errorf("%s: longer than %d bytes", url, maxPathsBody)
	}
	return b, nil
}

// fleetHistory serves the history of the path src->dst: this agent's own,
// or fetched from src's agent (src must be a node of the pinglist).
func (a *Agent) fleetHistory(w http.ResponseWriter, r *http.Request) {
	src, dst := r.URL.Query().Get("src"), r.URL.Query().Get("dst")
	c := a.cfg.Load()
	if src == "" || src == c.self.Name {
		writeJSON(w, a.hist.get(dst))
		return
	}
	n, ok := c.list.Node(src)
	if !ok {
		http.Error(w, "unknown node "+src, http.StatusNotFound)
		return
	}
	var pts []Point
	if err := a.getJSON(r.Context(), a.baseURL(n.Addr)+HistoryPath+"?dst="+url.QueryEscape(dst), &pts); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	writeJSON(w, pts)
}
