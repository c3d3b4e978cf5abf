package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// runProbe is `goroce probe`: the fabric prober's subcommands.
func runProbe(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		probeUsage(stderr)
		return 2
	}
	switch args[0] {
	case "once":
		return runProbeOnce(context.Background(), args[1:], stdout, stderr)
	case "responder":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runProbeResponder(ctx, args[1:], stdout, stderr)
	case "agent":
		return runProbeAgent(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		probeUsage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "goroce probe: unknown subcommand %q\n", args[0])
	probeUsage(stderr)
	return 2
}

func probeUsage(w io.Writer) {
	fmt.Fprint(w, `usage: goroce probe once [flags] HOST...   probe responders, print each probe and a summary
       goroce probe responder [flags]      answer probes and serve `+probe.SelfPath+`
       goroce probe agent [flags]          probe a pinglist continuously, export metrics

Probes are RoCEv2 UD SENDs in rpingmesh's v1 format (Q_Key 0x11111111), answered with
two ACKs; each result splits the round trip into the network RTT, the prober's delay and
the responder's. Run "goroce probe SUBCOMMAND -h" for the flags.
`)
}

// deviceFlags selects the device of a probe subcommand: a libibverbs
// device by -d in an ibverbs build, else the soft device on --addr.
type deviceFlags struct {
	dev  string
	soft softConfig
}

func (d *deviceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.dev, "d", "", "RDMA device `dev` (default: the soft device "+softName+"; a libibverbs device such as rxe0 in an ibverbs build)")
	fs.StringVar(&d.dev, "ib-dev", "", "same as -d")
	d.soft.register(fs)
}

// probeDevice is an open device.
type probeDevice struct {
	ctx      verbs.Context
	sdev     *soft.Device // nil for a libibverbs device
	name     string
	provider string
}

func (d *probeDevice) close() {
	d.ctx.Close()
	if d.sdev != nil {
		d.sdev.Close()
	}
}

// open opens the device the flags name.
func (d *deviceFlags) open() (*probeDevice, error) {
	if hw, ok := openHW(d.dev); ok {
		ctx, err := hw.Open()
		if err != nil {
			return nil, fmt.Errorf("couldn't get context for %s: %w", hw.Name(), err)
		}
		return &probeDevice{ctx: ctx, name: hw.Name(), provider: "ibverbs"}, nil
	}
	if d.dev != "" && d.dev != softName {
		return nil, fmt.Errorf("IB device %s not found", d.dev)
	}
	sdev, err := d.soft.open(true)
	if err != nil {
		return nil, err
	}
	ctx, err := sdev.Open()
	if err != nil {
		sdev.Close()
		return nil, err
	}
	return &probeDevice{ctx: ctx, sdev: sdev, name: sdev.Name(), provider: "soft"}, nil
}

// secondsFlag is a duration given as seconds ("0.2", as ping takes it) or
// with a unit ("200ms").
type secondsFlag struct{ d *time.Duration }

func (s secondsFlag) String() string {
	if s.d == nil {
		return ""
	}
	return s.d.String()
}

func (s secondsFlag) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f < 0 || f > 1e6 {
			return errors.New("out of range")
		}
		*s.d = time.Duration(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return errors.New("not a duration (seconds, or with a unit: 200ms)")
	}
	*s.d = d
	return nil
}

// onceConfig holds the flags of goroce probe once.
type onceConfig struct {
	dev      deviceFlags
	count    int
	interval time.Duration
	timeout  time.Duration
	labels   int
	paths    int
	prob     float64
	seed     uint64
	qpn      uint
	httpPort int
	json     bool
}

// onceHost is one HOST of goroce probe once and what became of its probes.
type onceHost struct {
	arg       string
	peer      probe.Peer // the responder's first QP
	qpns      []uint32   // all its QPs: probes rotate over them
	sent      int
	notSent   int
	results   []probe.Result // OK, lost and error outcomes, in arrival order
	late      int
	stamps    probe.Timestamps
	sendError string
}

func runProbeOnce(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe once", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c onceConfig
	c.dev.register(fs)
	c.interval, c.timeout = time.Second, time.Second
	fs.IntVar(&c.count, "c", 0, "probes per host (default 5, or one per label with --labels or --paths)")
	fs.IntVar(&c.count, "count", 0, "same as -c")
	fs.Var(secondsFlag{&c.interval}, "i", "interval between rounds of probes, in seconds or with a unit (default 1)")
	fs.Var(secondsFlag{&c.interval}, "interval", "same as -i")
	fs.Var(secondsFlag{&c.timeout}, "W", "time to wait for a probe's ACKs before it is lost, in seconds or with a unit (default 1)")
	fs.Var(secondsFlag{&c.timeout}, "timeout", "same as -W")
	fs.IntVar(&c.labels, "labels", 0, "number of distinct flow labels (UDP source ports, ECMP paths) the probes rotate over (default 1)")
	fs.IntVar(&c.paths, "paths", 0, "number of equal-cost paths to cover: as many labels as cover them with probability --prob")
	fs.Float64Var(&c.prob, "prob", 0.99, "with --paths: the probability that every path is taken")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the flow labels")
	fs.UintVar(&c.qpn, "qpn", 0, "the responders' UD QPN: skip discovery over HTTP (the GID is the IPv4-mapped address of HOST, the Q_Key 0x11111111)")
	fs.IntVar(&c.httpPort, "http-port", probe.DefaultHTTPPort, "TCP port of the responders' "+probe.SelfPath)
	fs.BoolVar(&c.json, "json", false, "print one JSON document (every probe and the summaries) instead of text")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: goroce probe once [-c count] [-i interval] [-W timeout] [-d dev] [--path P] [--addr A]
                        [--labels N | --paths N --prob P] [--qpn Q] [--http-port N] [--json] HOST...

Probes the responder of each HOST (goroce probe responder, goroce probe agent or rpingmesh's),
found at http://HOST:PORT`+probe.SelfPath+` unless --qpn is given (probes rotate over its QPs and
the flow labels); prints a line per probe and a
summary per host. Exit status 1 when a probe was lost or failed, 2 on usage or setup errors.

flags:`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	hosts := fs.Args()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case len(hosts) == 0:
		fs.Usage()
		return 2
	case c.labels != 0 && c.paths != 0:
		fmt.Fprintln(stderr, "goroce probe once: --labels and --paths exclude each other")
		return 2
	case c.labels < 0 || c.paths < 0 || c.count < 0 || c.qpn > 0xFFFFFF || c.httpPort < 0 || c.httpPort > 0xFFFF:
		fmt.Fprintln(stderr, "goroce probe once: a count, label count, path count, QPN or port out of range")
		return 2
	case c.prob <= 0 || c.prob >= 1:
		fmt.Fprintln(stderr, "goroce probe once: --prob must be in (0, 1)")
		return 2
	case c.timeout <= 0:
		fmt.Fprintln(stderr, "goroce probe once: -W must be positive")
		return 2
	}
	nLabels := 1
	if c.paths > 0 {
		nLabels = probe.LabelCount(c.paths, c.prob)
	} else if c.labels > 0 {
		nLabels = c.labels
	}
	nLabels = min(nLabels, probe.MaxLabels)
	if !set["c"] && !set["count"] {
		c.count = 5
		if c.paths > 0 || c.labels > 0 {
			c.count = nLabels
		}
	}
	labels := probe.FlowLabels(c.seed, nLabels)

	dev, err := c.dev.open()
	if err != nil {
		fmt.Fprintln(stderr, "goroce probe once:", err)
		return 2
	}
	defer dev.close()

	hs := make([]*onceHost, len(hosts))
	for i, h := range hosts {
		hs[i] = &onceHost{arg: h}
		if err := c.resolve(ctx, hs[i]); err != nil {
			fmt.Fprintf(stderr, "goroce probe once: %s: %v\n", h, err)
			return 2
		}
	}
	results := make(chan probe.Result, 1024)
	p, err := probe.NewProber(dev.ctx, probe.ProberOptions{Timeout: c.timeout, MaxInFlight: max(4096, 2*len(hs)),
		OnResult: func(r probe.Result) { results <- r }})
	if err != nil {
		fmt.Fprintln(stderr, "goroce probe once:", err)
		return 2
	}
	defer p.Close()
	if !c.json {
		for _, h := range hs {
			qs := make([]string, len(h.qpns))
			for i, q := range h.qpns {
				qs[i] = fmt.Sprintf("0x%06x", q)
			}
			fmt.Fprintf(stdout, "PROBE %s (%s) GID %s QPN %s: %d probes over %d flow labels, from %s (%s) GID %s QPN 0x%06x\n",
				h.arg, h.peer.Addr, h.peer.GID, strings.Join(qs, ","), c.count, len(labels), dev.name, dev.provider, p.GID(), p.QPN())
		}
	}

	// The probes and their results: each seq maps to its host and index.
	type sentProbe struct {
		h *onceHost
		i int
	}
	bySeq := map[uint64]sentProbe{}
	pending := 0
	handle := func(r probe.Result) {
		sp, ok := bySeq[r.Seq]
		if !ok {
			return
		}
		if r.Outcome == probe.OutcomeLate {
			sp.h.late++
		} else {
			sp.h.results = append(sp.h.results, r)
			pending--
			if r.Outcome == probe.OutcomeOK {
				sp.h.stamps = r.Timestamps
			}
		}
		if !c.json {
			printProbe(stdout, sp.h, sp.i, r)
		}
	}
	tick := time.NewTimer(0)
	defer tick.Stop()
	for i := 0; i < c.count; i++ {
		if i > 0 {
			tick.Reset(c.interval)
		wait:
			for {
				select {
				case r := <-results:
					handle(r)
				case <-tick.C:
					break wait
				case <-ctx.Done():
					return 2
				}
			}
		}
		for _, h := range hs {
			peer := h.peer
			peer.QPN = h.qpns[i%len(h.qpns)]
			seq, err := p.ProbeSeq(peer, labels[i%len(labels)], "")
			if err != nil {
				h.notSent++
				h.sendError = err.Error()
				if !c.json {
					fmt.Fprintf(stdout, "%s: probe %d not sent: %v\n", h.arg, i, err)
				}
				continue
			}
			h.sent++
			pending++
			bySeq[seq] = sentProbe{h, i}
		}
	}
	deadline := time.NewTimer(c.timeout + 500*time.Millisecond)
	defer deadline.Stop()
drain:
	for pending > 0 {
		select {
		case r := <-results:
			handle(r)
		case <-deadline.C:
			break drain
		case <-ctx.Done():
			return 2
		}
	}
	// Late ACKs of lost probes come within a moment, if at all.
	grace := time.NewTimer(50 * time.Millisecond)
	defer grace.Stop()
late:
	for {
		select {
		case r := <-results:
			handle(r)
		case <-grace.C:
			break late
		}
	}
	code := 0
	var docs []onceSummary
	for _, h := range hs {
		s := summarize(h, dev.provider, p.Timestamps())
		if s.Lost+s.Errors+s.NotSent > 0 {
			code = 1
		}
		if c.json {
			docs = append(docs, s)
		} else {
			printSummary(stdout, h, s)
		}
	}
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Hosts []onceSummary `json:"hosts"`
		}{docs}); err != nil {
			fmt.Fprintln(stderr, "goroce probe once:", err)
			return 2
		}
	}
	return code
}

// resolve finds h's responder: from its self document, or from --qpn.
func (c *onceConfig) resolve(ctx context.Context, h *onceHost) error {
	if c.qpn != 0 {
		a, err := resolveIPv4(ctx, h.arg)
		if err != nil {
			return err
		}
		g := verbs.GIDFromAddr(a)
		h.peer = probe.Peer{Name: h.arg, Addr: a, GID: g, QPN: uint32(c.qpn), QKey: probe.QKey}
		h.qpns = []uint32{h.peer.QPN}
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	base := "http://" + net.JoinHostPort(h.arg, strconv.Itoa(c.httpPort))
	s, err := probe.FetchSelf(fctx, nil, base)
	if err != nil {
		return fmt.Errorf("finding the responder (give --qpn to skip it): %w", err)
	}
	if h.peer, err = s.Peer(); err != nil {
		return err
	}
	h.peer.Name = h.arg
	for _, q := range s.QPNs {
		if q != 0 && q <= 0xFFFFFF {
			h.qpns = append(h.qpns, q)
		}
	}
	if len(h.qpns) == 0 {
		h.qpns = []uint32{h.peer.QPN}
	}
	return nil
}

// resolveIPv4 returns host's IPv4 address.
func resolveIPv4(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if a = a.Unmap(); !a.Is4() {
			return netip.Addr{}, fmt.Errorf("%v: RoCE GIDs from --qpn need an IPv4 address", a)
		}
		return a, nil
	}
	as, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(as) == 0 {
		return netip.Addr{}, fmt.Errorf("%s: no IPv4 address", host)
	}
	return as[0].Unmap(), nil
}

func us(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) }

// printProbe prints the ping-like line of one result.
func printProbe(w io.Writer, h *onceHost, i int, r probe.Result) {
	switch r.Outcome {
	case probe.OutcomeOK:
		fmt.Fprintf(w, "%d bytes from %s: probe=%d label=0x%05x sport=%d rtt=%s us prober=%s us responder=%s us\n",
			probe.PayloadLen, h.arg, i, r.FlowLabel, r.SrcPort, us(r.NetworkRTT), us(r.ProberDelay), us(r.ResponderDelay))
	case probe.OutcomeLost:
		fmt.Fprintf(w, "%s: probe=%d label=0x%05x sport=%d lost (no ACKs within the timeout)\n", h.arg, i, r.FlowLabel, r.SrcPort)
	case probe.OutcomeLate:
		fmt.Fprintf(w, "%s: probe=%d label=0x%05x sport=%d late ACK (after the timeout)\n", h.arg, i, r.FlowLabel, r.SrcPort)
	default:
		fmt.Fprintf(w, "%s: probe=%d label=0x%05x sport=%d error: %s\n", h.arg, i, r.FlowLabel, r.SrcPort, r.Reason)
	}
}

// onceSummary is the summary of one host's probes (also the --json form).
type onceSummary struct {
	Host       string        `json:"host"`
	Addr       string        `json:"addr"`
	GID        string        `json:"gid"`
	QPN        uint32        `json:"qpn"`
	Sent       int           `json:"sent"`
	NotSent    int           `json:"not_sent"`
	Completed  int           `json:"completed"`
	Lost       int           `json:"lost"`
	Late       int           `json:"late"`
	Errors     int           `json:"errors"`
	Loss       float64       `json:"loss"` // lost / sent
	NetworkRTT *quantiles    `json:"network_rtt_ns,omitempty"`
	Prober     *quantiles    `json:"prober_delay_ns,omitempty"`
	Responder  *quantiles    `json:"responder_delay_ns,omitempty"`
	Timestamps string        `json:"timestamps"`
	Provider   string        `json:"provider"`
	Probes     []probeRecord `json:"probes"`
}

type quantiles struct {
	Min, P50, P99, Max time.Duration
}

func (q *quantiles) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`{"min":%d,"p50":%d,"p99":%d,"max":%d}`, q.Min, q.P50, q.P99, q.Max)), nil
}

type probeRecord struct {
	Seq            uint64   `json:"seq"`
	ResponderQPN   uint32   `json:"responder_qpn"`
	Outcome        string   `json:"outcome"`
	Reason         string   `json:"reason,omitempty"`
	FlowLabel      uint32   `json:"flow_label"`
	SrcPort        uint16   `json:"src_port"`
	NetworkRTT     int64    `json:"network_rtt_ns"`
	ProberDelay    int64    `json:"prober_delay_ns"`
	ResponderDelay int64    `json:"responder_delay_ns"`
	T              [6]int64 `json:"t_ns"` // T1..T6
}

// quantile returns the q-quantile of sorted v (nearest rank).
func quantile(v []time.Duration, q float64) time.Duration {
	i := int(float64(len(v))*q+0.999999) - 1
	return v[min(max(i, 0), len(v)-1)]
}

func quants(v []time.Duration) *quantiles {
	if len(v) == 0 {
		return nil
	}
	slices.Sort(v)
	return &quantiles{Min: v[0], P50: quantile(v, 0.5), P99: quantile(v, 0.99), Max: v[len(v)-1]}
}

func summarize(h *onceHost, provider string, local probe.Timestamps) onceSummary {
	s := onceSummary{Host: h.arg, Addr: h.peer.Addr.String(), GID: h.peer.GID.String(), QPN: h.peer.QPN,
		Sent: h.sent, NotSent: h.notSent, Late: h.late, Provider: provider, Timestamps: local.String(), Probes: []probeRecord{}}
	var rtt, pd, rd []time.Duration
	kind := local
	for _, r := range h.results {
		s.Probes = append(s.Probes, probeRecord{Seq: r.Seq, ResponderQPN: r.ResponderQPN, Outcome: r.Outcome.String(), Reason: r.Reason, FlowLabel: r.FlowLabel,
			SrcPort: r.SrcPort, NetworkRTT: int64(r.NetworkRTT), ProberDelay: int64(r.ProberDelay), ResponderDelay: int64(r.ResponderDelay),
			T: [6]int64{r.T1, r.T2, r.T3, r.T4, r.T5, r.T6}})
		switch r.Outcome {
		case probe.OutcomeOK:
			s.Completed++
			rtt, pd, rd = append(rtt, r.NetworkRTT), append(pd, r.ProberDelay), append(rd, r.ResponderDelay)
			if r.Timestamps != probe.TimestampsHardware {
				kind = probe.TimestampsSoftware
			}
		case probe.OutcomeLost:
			s.Lost++
		default:
			s.Errors++
		}
	}
	s.Lost += h.sent - len(h.results) // no outcome by the end: lost
	if s.Completed > 0 {
		s.Timestamps = kind.String()
	}
	if h.sent > 0 {
		s.Loss = float64(s.Lost) / float64(h.sent)
	}
	s.NetworkRTT, s.Prober, s.Responder = quants(rtt), quants(pd), quants(rd)
	return s
}

func printSummary(w io.Writer, h *onceHost, s onceSummary) {
	fmt.Fprintf(w, "\n--- %s goroce probe statistics ---\n", h.arg)
	fmt.Fprintf(w, "%d probes sent, %d completed, %d lost, %d late, %d errors", s.Sent, s.Completed, s.Lost, s.Late, s.Errors)
	if s.NotSent > 0 {
		fmt.Fprintf(w, ", %d not sent (%s)", s.NotSent, h.sendError)
	}
	fmt.Fprintf(w, ", %s%% loss, %s timestamps\n", strconv.FormatFloat(100*s.Loss, 'f', -1, 64), s.Timestamps)
	for _, q := range []struct {
		name string
		q    *quantiles
	}{{"network rtt", s.NetworkRTT}, {"prober delay", s.Prober}, {"responder delay", s.Responder}} {
		if q.q == nil {
			continue
		}
		fmt.Fprintf(w, "%s min/p50/p99/max = %s/%s/%s/%s us\n", q.name, us(q.q.Min), us(q.q.P50), us(q.q.P99), us(q.q.Max))
	}
}

// runProbeResponder is `goroce probe responder`: it answers probes and
// serves its self document until ctx ends.
func runProbeResponder(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe responder", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var df deviceFlags
	df.register(fs)
	var qps, httpPort int
	fs.IntVar(&qps, "qps", 1, "number of responder UD QPs (several for fabrics that hash on the destination QPN)")
	fs.IntVar(&httpPort, "http-port", probe.DefaultHTTPPort, "TCP port of "+probe.SelfPath+" (0: any free port)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: goroce probe responder [-d dev] [--path P] [--addr A] [--qps N] [--http-port N]

Answers probes (rpingmesh v1, Q_Key 0x11111111) on its UD QPs and serves their GID and QPNs as
JSON at http://ADDR:PORT`+probe.SelfPath+`, until SIGINT or SIGTERM.

flags:`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || qps < 1 || qps > 64 || httpPort < 0 || httpPort > 0xFFFF {
		fs.Usage()
		return 2
	}
	dev, err := df.open()
	if err != nil {
		fmt.Fprintln(stderr, "goroce probe responder:", err)
		return 2
	}
	defer dev.close()
	r, err := probe.NewResponder(dev.ctx, probe.ResponderOptions{QPs: qps})
	if err != nil {
		fmt.Fprintln(stderr, "goroce probe responder:", err)
		return 2
	}
	defer r.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(httpPort)))
	if err != nil {
		fmt.Fprintln(stderr, "goroce probe responder:", err)
		return 2
	}
	name, _ := os.Hostname()
	self := probe.Self{Name: name, Addr: r.GID().Addr().String(), GID: r.GID().String(), QPNs: r.QPNs(), QKey: probe.QKey,
		Provider: dev.provider, Device: dev.name, Timestamps: r.Timestamps().String(), Started: time.Now().UTC()}
	mux := http.NewServeMux()
	mux.Handle(probe.SelfPath, probe.SelfHandler(func() probe.Self { return self }))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	qs := make([]string, len(self.QPNs))
	for i, q := range self.QPNs {
		qs[i] = fmt.Sprintf("0x%06x", q)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	fmt.Fprintf(stdout, "goroce probe responder: %s (%s) GID %s QPNs %s Q_Key 0x%08x, %s timestamps; self at http://%s%s\n",
		dev.name, dev.provider, self.GID, strings.Join(qs, ","), probe.QKey, self.Timestamps,
		net.JoinHostPort(self.Addr, strconv.Itoa(port)), probe.SelfPath)
	<-ctx.Done()
	s := r.Stats()
	fmt.Fprintf(stdout, "goroce probe responder: %d received, %d answered, %d invalid, %d dropped\n", s.Received, s.Answered, s.Invalid, s.Dropped)
	return 0
}
