package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/analysis"
	"github.com/goroce/goroce/probe/metrics"
	"github.com/goroce/goroce/probe/pinglist"
	"github.com/goroce/goroce/verbs"
)

// Defaults of Options.
const (
	DefaultDiscoveryWorkers = 8
	DefaultRetryMin         = time.Second
	DefaultRetryMax         = 30 * time.Second
	DefaultRefresh          = time.Minute
	DefaultFetchTimeout     = 2 * time.Second
	DefaultWatchInterval    = time.Second
	DefaultAnalysisInterval = 2 * time.Second
	DefaultHistorySlot      = 2 * time.Second
	DefaultHistoryLen       = 150
	DefaultFleetTTL         = 3 * time.Second
	DefaultFleetWorkers     = 16
	DefaultFleetInterval    = 5 * time.Second
	// RediscoverAfter is the run of consecutive lost probes after which a
	// target's responder is looked up again (it may have restarted with
	// other QPNs), at most once per RetryMin.
	RediscoverAfter = 5
)

// Errors.
var (
	// ErrOptions: a required option is missing or out of range.
	ErrOptions = errors.New("agent: bad options")
	// ErrNotInPinglist: the agent's address is not a node of the pinglist.
	// New and Reload do not fail with it: an unlisted node runs as a
	// responder only (see Agent.Listed); it is the warning they log.
	ErrNotInPinglist = errors.New("agent: this node's address is not in the pinglist")
)

// Options configure an Agent. Device, Pinglist and Self are required;
// zero values of the others take the defaults.
type Options struct {
	// Device is the opened RDMA device the responder and the prober use.
	Device verbs.Context
	// Provider names the device's provider in the agent's self
	// description ("soft", "ibverbs"); default "".
	Provider string
	// Pinglist is the path of the pinglist file (package pinglist).
	Pinglist string
	// Self is this node's address: the agent is the pinglist's node with
	// that address.
	Self netip.Addr
	// Listen is the HTTP server's address for Run (default ":<the
	// pinglist's http_port>"). Listener, when set, is used instead.
	Listen   string
	Listener net.Listener
	// Logger receives the agent's log (default: discarded).
	Logger *slog.Logger
	// JSONL, when set, receives every probe result as one JSON object a
	// line (see the package documentation for the fields). The agent does
	// not close it.
	JSONL io.Writer
	// Registry is where the agent registers its metrics (default a new
	// registry with the Go and process collectors); Run serves it at
	// /metrics.
	Registry *prometheus.Registry
	// HTTPClient fetches peers' self descriptions and paths (default a
	// client with no proxy, FetchTimeout, PeerTLS and PeerUser).
	HTTPClient *http.Client
	// WebConfig is the path of a Prometheus exporter toolkit web
	// configuration file (tls_server_config, basic_auth_users, ...): the
	// HTTP server then serves as it says, TLS and basic authentication
	// included. "" serves plain HTTP.
	WebConfig string
	// PeerTLS, when set, is the TLS configuration of the fetches from
	// peers, which are then made over HTTPS (the fleet's agents all serve
	// TLS); PeerUser and PeerPassword, when PeerUser is set, authenticate
	// them.
	PeerTLS      *tls.Config
	PeerUser     string
	PeerPassword string
	// DiscoveryWorkers bounds the concurrent fetches of peers' self
	// descriptions (default 8). RetryMin and RetryMax bound the backoff
	// between attempts for an unreachable peer (default 1 s and 30 s);
	// Refresh is how often a known peer is fetched again (default 1 min);
	// FetchTimeout bounds one fetch (default 2 s).
	DiscoveryWorkers int
	RetryMin         time.Duration
	RetryMax         time.Duration
	Refresh          time.Duration
	FetchTimeout     time.Duration
	// WatchInterval is how often the pinglist file is checked for a change
	// (default 1 s); negative turns watching off (Reload still works).
	WatchInterval time.Duration
	// AnalysisInterval is how often the window's path statistics and the
	// local fault analysis are recomputed for metrics and HTTP (default
	// 2 s).
	AnalysisInterval time.Duration
	// HistorySlot and HistoryLen shape each path's RTT history: points of
	// HistorySlot (default 2 s), the last HistoryLen kept (default 150).
	HistorySlot time.Duration
	HistoryLen  int
	// FleetTTL is how long /probe/v1/fleet reuses what it fetched (default
	// 3 s); FleetWorkers bounds its concurrent fetches (default 16).
	FleetTTL     time.Duration
	FleetWorkers int
	// FleetInterval is how often the agent looks for the fleet's exporter
	// (the first live node of the pinglist by name) and, when it is the
	// one, computes the fleet verdicts for Prometheus (default 5 s).
	FleetInterval time.Duration
}

func (o *Options) defaults() error {
	if o.Device == nil {
		return fmt.Errorf("%w: no device", ErrOptions)
	}
	if o.Pinglist == "" {
		return fmt.Errorf("%w: no pinglist", ErrOptions)
	}
	if !o.Self.IsValid() {
		return fmt.Errorf("%w: no self address", ErrOptions)
	}
	o.Self = o.Self.Unmap()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
		o.Registry.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	}
	set := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	set(&o.RetryMin, DefaultRetryMin)
	set(&o.RetryMax, DefaultRetryMax)
	set(&o.Refresh, DefaultRefresh)
	set(&o.FetchTimeout, DefaultFetchTimeout)
	set(&o.AnalysisInterval, DefaultAnalysisInterval)
	set(&o.HistorySlot, DefaultHistorySlot)
	set(&o.FleetTTL, DefaultFleetTTL)
	set(&o.FleetInterval, DefaultFleetInterval)
	if o.WatchInterval == 0 {
		o.WatchInterval = DefaultWatchInterval
	}
	if o.DiscoveryWorkers <= 0 {
		o.DiscoveryWorkers = DefaultDiscoveryWorkers
	}
	if o.FleetWorkers <= 0 {
		o.FleetWorkers = DefaultFleetWorkers
	}
	if o.HistoryLen <= 0 {
		o.HistoryLen = DefaultHistoryLen
	}
	if o.HTTPClient == nil {
		o.HTTPClient = o.peerClient()
	}
	return nil
}

// config is one loaded pinglist and what the agent derived from it.
type config struct {
	list *pinglist.List
	self pinglist.Node
	// listed: the pinglist names this node. An unlisted node runs as a
	// responder only (no targets), named by its address, until a reload
	// lists it.
	listed  bool
	targets []pinglist.Target
	labels  []uint32
	hash    [32]byte
	// hosts is the topology: every node's group, by name.
	hosts map[string]string
	// tc is the traffic class (TOS byte) of each class's probes.
	tc map[string]uint8
}

// Agent is a running prober, responder and HTTP server for one node of a
// pinglist. Create it with New, run it with Run.
type Agent struct {
	opts Options
	log  *slog.Logger

	responder *probe.Responder
	prober    *probe.Prober
	metrics   *metrics.Metrics
	window    *analysis.Window
	hist      *history
	started   time.Time

	httpPort atomic.Int32
	cfg      atomic.Pointer[config]

	mu    sync.Mutex // serialises reloads; guards peers and extra
	peers map[netip.Addr]*peer
	// extra are the separating targets: pairs the fleet's exporter asks
	// this node to probe to settle an ambiguous verdict (class
	// ClassSeparate).
	extra []pinglist.Target
	// separating is the exporter's list of separating pairs, served at
	// SeparatePath.
	separating atomic.Pointer[SeparateDoc]

	// Channels to the scheduling and discovery goroutines.
	targetSet  chan struct{}
	peerSet    chan map[netip.Addr]*peer
	rediscover chan *peer

	jsonl chan probe.Result

	analysisMu sync.Mutex
	paths      []analysis.PathStat
	faulty     []analysis.Component

	fleet    fleetCache
	exporter atomic.Pointer[string] // the fleet's exporter as last found

	// The agent's own metrics.
	targetsGauge    prometheus.Gauge
	unresolved      prometheus.Gauge
	discoveryOK     prometheus.Counter
	discoveryErrors prometheus.Counter
	reloadOK        prometheus.Counter
	reloadErrors    prometheus.Counter
	reloadTime      prometheus.Gauge
	listedGauge     prometheus.Gauge
	scheduleErrors  prometheus.Counter
	jsonlDropped    prometheus.Counter
}

// New loads the pinglist, finds this node in it and starts the responder
// and the prober on the device. Probing starts with Run.
func New(o Options) (*Agent, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	cfg, err := load(o.Pinglist, o.Self)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		opts:       o,
		log:        o.Logger,
		hist:       newHistory(o.HistorySlot, o.HistoryLen),
		fleet:      fleetCache{hist: analysis.NewVerdictHistory(0)},
		started:    time.Now(),
		peers:      map[netip.Addr]*peer{},
		targetSet:  make(chan struct{}, 1),
		peerSet:    make(chan map[netip.Addr]*peer, 1),
		rediscover: make(chan *peer, 64),
	}
	// A rail of a multi-rail node labels every series of its own with
	// its rail.
	var reg prometheus.Registerer = o.Registry
	if cfg.self.Rail != "" {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"rail": cfg.self.Rail}, o.Registry)
	}
	if err := a.registerOwn(reg); err != nil {
		return nil, err
	}
	s := cfg.list.Settings
	a.httpPort.Store(int32(s.HTTPPort))
	a.window = analysis.NewWindow(analysis.Options{
		Source: cfg.self.Name, SourceGroup: cfg.self.Group,
		Window: s.Window, MaxLoss: lossThreshold(s.MaxLoss), MaxP99: s.MaxP99RTT, MinProbes: s.MinProbes,
	})
	a.metrics, err = metrics.New(reg, metrics.Options{MaxPairs: s.MaxPairs, PairHistograms: s.PairHistograms, Source: cfg.self.Name, SourceGroup: cfg.self.Group})
	if err != nil {
		return nil, fmt.Errorf("agent: metrics: %w", err)
	}
	if o.JSONL != nil {
		a.jsonl = make(chan probe.Result, jsonlQueue)
	}
	a.responder, err = probe.NewResponder(o.Device, probe.ResponderOptions{QPs: s.ResponderQPs, GIDIndex: cfg.self.GIDIndex,
		TrafficClass: uint8(cfg.list.Classes[pinglist.ClassToRMesh].DSCP << 2)})
	if err != nil {
		return nil, fmt.Errorf("agent: responder: %w", err)
	}
	a.prober, err = probe.NewProber(o.Device, probe.ProberOptions{Timeout: s.Timeout, OnResult: a.onResult, GIDIndex: cfg.self.GIDIndex,
		TrafficClass: func(class string) uint8 { return a.cfg.Load().tc[class] }})
	if err != nil {
		a.responder.Close()
		return nil, fmt.Errorf("agent: prober: %w", err)
	}
	a.install(cfg)
	a.log.Info("agent ready", "node", cfg.self.Name, "group", cfg.self.Group, "addr", o.Self,
		"targets", len(cfg.targets), "labels", len(cfg.labels), "qpns", a.responder.QPNs())
	return a, nil
}

// lossThreshold maps the pinglist's max_loss (0 meaning "any loss") to the
// analysis option (negative meaning "any loss").
func lossThreshold(v float64) float64 {
	if v == 0 {
		return -1
	}
	return v
}

// load reads the pinglist at path and derives this node's configuration.
func load(path string, self netip.Addr) (*config, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return parse(b, path, self)
}

func parse(b []byte, path string, self netip.Addr) (*config, error) {
	l, err := pinglist.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	me, listed := l.Self(self)
	var targets []pinglist.Target
	if listed {
		targets = l.Targets(me)
	} else {
		me = pinglist.Node{Name: self.String(), Addr: self}
	}
	h := fnv.New64a()
	h.Write([]byte(me.Name))
	hosts := make(map[string]string, len(l.Nodes))
	for _, n := range l.Nodes {
		hosts[n.Name] = n.Group
	}
	tc := make(map[string]uint8, len(l.Classes)+1)
	for name, c := range l.Classes {
		tc[name] = uint8(c.DSCP << 2)
	}
	tc[ClassSeparate] = tc[pinglist.ClassInterToR]
	return &config{
		tc:      tc,
		hosts:   hosts,
		list:    l,
		self:    me,
		listed:  listed,
		targets: targets,
		labels:  probe.FlowLabels(h.Sum64(), l.Settings.Labels),
		hash:    sum(b),
	}, nil
}

// install makes cfg the agent's configuration: the scheduler and the
// discovery loop take the new targets; peers that stay keep what was
// discovered of them.
func (a *Agent) install(cfg *config) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.cfg.Load()
	a.extra = keepExtra(cfg, a.extra)
	a.cfg.Store(cfg)
	a.httpPort.Store(int32(cfg.list.Settings.HTTPPort))
	a.setPeersLocked(cfg)
	a.listedGauge.Set(boolValue(cfg.listed))
	if old == nil || old.self != cfg.self {
		a.metrics.SetSource(cfg.self.Name, cfg.self.Group)
		a.window.SetSource(cfg.self.Name, cfg.self.Group)
	}
	switch {
	case !cfg.listed:
		a.log.Warn("this node is not in the pinglist: running as a responder only, probing nothing; it joins when the pinglist names it",
			"addr", a.opts.Self, "err", ErrNotInPinglist)
	case old != nil && !old.listed:
		a.log.Info("the pinglist names this node now: joining", "node", cfg.self.Name, "group", cfg.self.Group)
	}
	if old != nil {
		was, now := old.list.Settings, cfg.list.Settings
		if was.Timeout != now.Timeout || was.ResponderQPs != now.ResponderQPs || was.Window != now.Window || was.MaxPairs != now.MaxPairs ||
			was.MaxLoss != now.MaxLoss || was.MaxP99RTT != now.MaxP99RTT || was.MinProbes != now.MinProbes {
			a.log.Warn("pinglist settings timeout, responder_qps, window, sla and max_pairs take effect at the next start")
		}
	}
}

// setPeersLocked makes the targets of cfg and the separating targets
// (a.extra) the peers, and hands them to the discovery and scheduling
// goroutines. a.mu is held.
func (a *Agent) setPeersLocked(cfg *config) {
	all := a.targetsLocked(cfg)
	peers := make(map[netip.Addr]*peer, len(all))
	names := make(map[string]bool, len(all))
	for _, t := range all {
		addr := t.Node.Addr
		if _, ok := peers[addr]; ok {
			continue
		}
		p := a.peers[addr]
		if p == nil || p.node != t.Node {
			p = &peer{node: t.Node}
		}
		peers[addr] = p
		names[t.Node.Name] = true
	}
	a.peers = peers
	a.hist.keep(names)
	a.targetsGauge.Set(float64(len(cfg.targets)))
	// The goroutines take the newest set; an older one still queued is
	// replaced.
	select {
	case <-a.peerSet:
	default:
	}
	a.peerSet <- peers
	select {
	case a.targetSet <- struct{}{}:
	default:
	}
}

// targetsLocked is what the scheduler probes: cfg's targets and the
// separating ones. a.mu is held.
func (a *Agent) targetsLocked(cfg *config) []pinglist.Target {
	if len(a.extra) == 0 {
		return cfg.targets
	}
	return append(append(make([]pinglist.Target, 0, len(cfg.targets)+len(a.extra)), cfg.targets...), a.extra...)
}

// Reload reads the pinglist again and installs it. A list that does not
// name this node is installed too: the agent then runs as a responder
// only, and warns (Listed). On an error (the file cannot be read or
// parsed) the agent keeps
// its current configuration, logs the error, counts it in
// goroce_probe_agent_reloads_total{result="error"} and returns it.
func (a *Agent) Reload() error {
	b, err := readFile(a.opts.Pinglist)
	if err == nil {
		return a.reloadBytes(b)
	}
	a.reloadErrors.Inc()
	a.log.Error("pinglist reload failed; keeping the current pinglist", "err", err)
	return err
}

func (a *Agent) reloadBytes(b []byte) error {
	cfg, err := parse(b, a.opts.Pinglist, a.opts.Self)
	if err != nil {
		a.reloadErrors.Inc()
		a.log.Error("pinglist reload failed; keeping the current pinglist", "err", err)
		return err
	}
	a.install(cfg)
	a.reloadOK.Inc()
	a.reloadTime.SetToCurrentTime()
	a.log.Info("pinglist reloaded", "targets", len(cfg.targets), "labels", len(cfg.labels))
	return nil
}

// Targets returns the targets of the current pinglist.
func (a *Agent) Targets() []pinglist.Target {
	return append([]pinglist.Target(nil), a.cfg.Load().targets...)
}

// Node returns this node as the current pinglist names it (an unlisted
// node: named by its address, in no group).
func (a *Agent) Node() pinglist.Node { return a.cfg.Load().self }

// Listed reports whether the current pinglist names this node. An unlisted
// node answers probes (its responder runs and is served at
// /probe/v1/self) but probes nothing, and is gauged
// goroce_probe_agent_listed 0, until a reload lists it.
func (a *Agent) Listed() bool { return a.cfg.Load().listed }

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Self returns what the agent serves at probe.SelfPath.
func (a *Agent) Self() probe.Self {
	c := a.cfg.Load()
	return probe.Self{
		Name:       c.self.Name,
		Addr:       a.opts.Self.String(),
		GID:        a.responder.GID().Addr().String(),
		QPNs:       a.responder.QPNs(),
		QKey:       probe.QKey,
		Provider:   a.opts.Provider,
		Device:     a.opts.Device.Device().Name(),
		Timestamps: a.responder.Timestamps().String(),
		Started:    a.started,
	}
}

// onResult takes every result from the prober's goroutine: metrics,
// window, history, probe log. It never blocks.
func (a *Agent) onResult(r probe.Result) {
	a.metrics.Observe(r)
	a.window.Add(r)
	a.hist.add(&r)
	if a.jsonl != nil {
		select {
		case a.jsonl <- r:
		default:
			a.jsonlDropped.Inc()
		}
	}
	a.mu.Lock()
	p := a.peers[r.Peer.Addr]
	a.mu.Unlock()
	if p == nil {
		return
	}
	switch r.Outcome {
	case probe.OutcomeOK:
		p.lostRun.Store(0)
	case probe.OutcomeLost:
		if p.lostRun.Add(1) == RediscoverAfter {
			if info := p.info.Load(); info != nil && time.Since(info.fetched) > a.opts.RetryMin {
				select {
				case a.rediscover <- p:
				default:
				}
			}
			p.lostRun.Store(0)
		}
	}
}

// Run probes, serves HTTP and watches the pinglist until ctx ends, then
// stops everything, waits up to the timeout for the probes in flight, and
// closes the prober and the responder (not the device). It returns an
// error only when the HTTP server cannot listen or fails. Call it once.
func (a *Agent) Run(ctx context.Context) error {
	defer a.close()
	ln := a.opts.Listener
	if ln == nil {
		addr := a.opts.Listen
		if addr == "" {
			addr = fmt.Sprintf(":%d", a.cfg.Load().list.Settings.HTTPPort)
		}
		var err error
		ln, err = net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	jsonlDone := make(chan struct{})
	if a.jsonl != nil {
		go a.writeJSONL(a.opts.JSONL, jsonlDone)
	} else {
		close(jsonlDone)
	}
	wg.Add(5)
	go func() { defer wg.Done(); a.exportFleet(ctx) }()
	go func() { defer wg.Done(); a.schedule(ctx) }()
	go func() { defer wg.Done(); a.discover(ctx) }()
	go func() { defer wg.Done(); a.analyse(ctx) }()
	go func() { defer wg.Done(); a.watch(ctx) }()
	serveErr := make(chan error, 1)
	go func() { serveErr <- a.serve(srv, ln) }()
	a.log.Info("serving", "addr", ln.Addr().String())
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("agent: http: %w", err)
		cancel()
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	srv.Shutdown(sctx)
	scancel()
	wg.Wait()
	// Let the probes in flight finish (or time out) so that every probe
	// sent has its result, then stop the prober.
	deadline := time.Now().Add(a.cfg.Load().list.Settings.Timeout + 100*time.Millisecond)
	for a.prober.Stats().InFlight > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	a.prober.Close()
	if a.jsonl != nil {
		close(a.jsonl)
	}
	<-jsonlDone
	return err
}

// close releases the prober (unless Run closed it already) and the
// responder.
func (a *Agent) close() {
	a.prober.Close()
	a.responder.Close()
}

// schedule is the scheduling goroutine: one timer over a heap of targets.
func (a *Agent) schedule(ctx context.Context) {
	var s scheduler
	timer := time.NewTimer(0)
	defer timer.Stop()
	var labels []uint32
	var class string
	probeOne := func(e *entry) {
		info := e.peer.info.Load()
		if info == nil || len(labels) == 0 {
			return // not discovered yet: counted by the unresolved gauge
		}
		l := uint64(len(labels))
		label := labels[e.n%l]
		p := info.peers[(e.n/l)%uint64(len(info.peers))]
		e.n++
		class = e.target.Class
		if err := a.prober.Probe(p, label, class); err != nil {
			a.scheduleErrors.Inc()
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.targetSet:
			c := a.cfg.Load()
			labels = c.labels
			a.mu.Lock()
			peers := a.peers
			targets := a.targetsLocked(c)
			a.mu.Unlock()
			s.replace(time.Now(), targets, func(addr netip.Addr) *peer { return peers[addr] })
		case <-timer.C:
			s.due(time.Now().Add(s.slack), probeOne)
		}
		timer.Reset(s.wait(time.Now()))
	}
}

// analyse recomputes the path statistics and the local fault analysis
// every AnalysisInterval.
func (a *Agent) analyse(ctx context.Context) {
	t := time.NewTicker(a.opts.AnalysisInterval)
	defer t.Stop()
	for {
		paths := a.window.Stats(time.Now())
		faulty := analysis.Localize(paths)
		a.metrics.SetAnalysis(paths, faulty)
		a.analysisMu.Lock()
		a.paths, a.faulty = paths, faulty
		a.analysisMu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Paths returns this agent's path statistics over the analysis window, as
// of the last analysis (every AnalysisInterval).
func (a *Agent) Paths() []analysis.PathStat {
	a.analysisMu.Lock()
	defer a.analysisMu.Unlock()
	return append([]analysis.PathStat(nil), a.paths...)
}

// registerOwn creates and registers the agent's own metrics.
func (a *Agent) registerOwn(reg prometheus.Registerer) error {
	a.targetsGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "goroce_probe_agent_targets", Help: "Targets of this agent in the current pinglist."})
	a.unresolved = prometheus.NewGauge(prometheus.GaugeOpts{Name: "goroce_probe_agent_targets_unresolved", Help: "Target nodes whose responder has not been found yet (their /probe/v1/self not fetched); they are not probed."})
	disc := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "goroce_probe_agent_discoveries_total", Help: "Fetches of target nodes' /probe/v1/self, by result."}, []string{"result"})
	a.discoveryOK, a.discoveryErrors = disc.WithLabelValues("ok"), disc.WithLabelValues("error")
	rel := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "goroce_probe_agent_reloads_total", Help: "Pinglist reloads, by result (an error keeps the previous pinglist)."}, []string{"result"})
	a.reloadOK, a.reloadErrors = rel.WithLabelValues("ok"), rel.WithLabelValues("error")
	a.reloadTime = prometheus.NewGauge(prometheus.GaugeOpts{Name: "goroce_probe_agent_reload_success_timestamp_seconds", Help: "When the pinglist was last loaded successfully (Unix time)."})
	a.reloadTime.SetToCurrentTime()
	a.listedGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "goroce_probe_agent_listed", Help: "1 when the pinglist names this node; 0 when it runs as a responder only, probing nothing, until the pinglist lists it."})
	a.scheduleErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "goroce_probe_agent_schedule_errors_total", Help: "Scheduled probes the prober refused (too many in flight, closed)."})
	a.jsonlDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "goroce_probe_agent_jsonl_dropped_total", Help: "Results left out of the JSON-lines probe log because its writer fell behind."})
	for _, c := range []prometheus.Collector{a.targetsGauge, a.unresolved, disc, rel, a.reloadTime, a.listedGauge, a.scheduleErrors, a.jsonlDropped} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("agent: registering metrics: %w", err)
		}
	}
	return nil
}
