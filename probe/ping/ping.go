package ping

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/verbs"
)

// Config says how Run probes.
type Config struct {
	Count    int           // probes per host
	Interval time.Duration // between rounds of probes (one per host)
	Timeout  time.Duration // after it a probe is lost
	Labels   []uint32      // flow labels the probes rotate over (at least one)
	// Lines, if not nil, gets a ping-like line per probe.
	Lines io.Writer
	// Device and Provider name the prober's device in Main's report;
	// JSON makes Main print one JSON document instead of text.
	Device, Provider string
	JSON             bool
}

// Main is `goroce probe once` after its flags: it runs a prober on vctx,
// prints a header per host (text) or nothing until the end (JSON), runs the
// probes (Run) and prints each host's summary, or the JSON document of
// them all, to w. lossy reports whether a probe was lost, failed or not
// sent.
func Main(ctx context.Context, vctx verbs.Context, hs []*Host, c Config, w io.Writer) (lossy bool, err error) {
	results := make(chan probe.Result, 1024)
	p, err := probe.NewProber(vctx, probe.ProberOptions{Timeout: c.Timeout, MaxInFlight: max(4096, 2*len(hs)),
		OnResult: func(r probe.Result) { results <- r }})
	if err != nil {
		return false, err
	}
	defer p.Close()
	if !c.JSON {
		for _, h := range hs {
			fmt.Fprintf(w, "PROBE %s (%s) GID %s QPN %s: %d probes over %d flow labels, from %s (%s) GID %s QPN 0x%06x\n",
				h.Arg, h.Peer.Addr, h.Peer.GID, probe.FormatQPNs(h.QPNs), c.Count, len(c.Labels), c.Device, c.Provider, p.GID(), p.QPN())
		}
	}
	if err := Run(ctx, p, results, hs, c); err != nil {
		return false, err
	}
	docs := []Summary{}
	for _, h := range hs {
		s := Summarize(h, c.Provider, p.Timestamps())
		lossy = lossy || s.Lost+s.Errors+s.NotSent > 0
		if c.JSON {
			docs = append(docs, s)
		} else {
			WriteSummary(w, h, s)
		}
	}
	if c.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Hosts []Summary `json:"hosts"`
		}{docs}); err != nil {
			return lossy, err
		}
	}
	return lossy, nil
}

// Host is one host Run probes and what became of its probes.
type Host struct {
	Arg       string     // the host as given
	Peer      probe.Peer // its responder's first QP
	QPNs      []uint32   // all its QPs: probes rotate over them
	sent      int
	notSent   int
	results   []probe.Result // OK, lost and error outcomes, in arrival order
	late      int
	stamps    probe.Timestamps
	sendError string
}

// Run sends c.Count probes to each host through p, whose results arrive on
// results (the prober's OnResult sends them there), and waits for their
// outcomes: until each has one, c.Timeout plus half a second after the
// last was sent, or ctx ends (then it returns ctx's error).
func Run(ctx context.Context, p *probe.Prober, results <-chan probe.Result, hs []*Host, c Config) error {
	labels := c.Labels
	rn := &run{bySeq: map[uint64]sentProbe{}, lines: c.Lines}
	tick := time.NewTimer(0)
	defer tick.Stop()
	for i := 0; i < c.Count; i++ {
		if i > 0 {
			tick.Reset(c.Interval)
			if err := rn.wait(ctx, results, tick); err != nil {
				return err
			}
		}
		rn.send(p, hs, i, labels[i%len(labels)])
	}
	if err := rn.drain(ctx, results, c.Timeout+500*time.Millisecond); err != nil {
		return err
	}
	// Late ACKs of lost probes come within a moment, if at all.
	rn.late(results, 50*time.Millisecond)
	return nil
}

// sentProbe is a probe Run sent: its host and its index among the host's
// probes.
type sentProbe struct {
	h *Host
	i int
}

// run is the state of one Run: the probes sent, by sequence number, the
// number of them without an outcome yet, and where the ping-like lines go
// (nil for nowhere).
type run struct {
	bySeq   map[uint64]sentProbe
	pending int
	lines   io.Writer
}

// handle takes one result: a late ACK is counted apart, any other outcome
// is the probe's and resolves it. Results of probes the run did not send
// are ignored.
func (rn *run) handle(r probe.Result) {
	sp, ok := rn.bySeq[r.Seq]
	if !ok {
		return
	}
	if r.Outcome == probe.OutcomeLate {
		sp.h.late++
	} else {
		sp.h.results = append(sp.h.results, r)
		rn.pending--
		if r.Outcome == probe.OutcomeOK {
			sp.h.stamps = r.Timestamps
		}
	}
	if rn.lines != nil {
		printProbe(rn.lines, sp.h, sp.i, r)
	}
}

// send sends probe number i to every host through p, with flow label
// label and the next of the host's QPNs, and counts the probes sent and
// not sent.
func (rn *run) send(p *probe.Prober, hs []*Host, i int, label uint32) {
	for _, h := range hs {
		peer := h.Peer
		peer.QPN = h.QPNs[i%len(h.QPNs)]
		seq, err := p.ProbeSeq(peer, label, "")
		if err != nil {
			h.notSent++
			h.sendError = err.Error()
			if rn.lines != nil {
				fmt.Fprintf(rn.lines, "%s: probe %d not sent: %v\n", h.Arg, i, err)
			}
			continue
		}
		h.sent++
		rn.pending++
		rn.bySeq[seq] = sentProbe{h, i}
	}
}

// wait handles the results that arrive until t fires. It returns ctx's
// error if ctx ends first.
func (rn *run) wait(ctx context.Context, results <-chan probe.Result, t *time.Timer) error {
	for {
		select {
		case r := <-results:
			rn.handle(r)
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drain handles results until every probe sent has an outcome or d has
// passed. It returns ctx's error if ctx ends first.
func (rn *run) drain(ctx context.Context, results <-chan probe.Result, d time.Duration) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for rn.pending > 0 {
		select {
		case r := <-results:
			rn.handle(r)
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// late handles the results that arrive within d, the late ACKs of lost
// probes. It waits d whether or not ctx has ended: d is short.
func (rn *run) late(results <-chan probe.Result, d time.Duration) {
	grace := time.NewTimer(d)
	defer grace.Stop()
	for {
		select {
		case r := <-results:
			rn.handle(r)
		case <-grace.C:
			return
		}
	}
}

// Resolve finds the responder of host arg: from its self document at
// http://arg:httpPort/probe/v1/self, or, when qpn is not 0, at that QPN with
// the IPv4-mapped GID of arg's address and rpingmesh's Q_Key.
func Resolve(ctx context.Context, arg string, qpn uint32, httpPort int) (*Host, error) {
	h := &Host{Arg: arg}
	if err := resolveHost(ctx, h, qpn, httpPort); err != nil {
		return nil, err
	}
	return h, nil
}

func resolveHost(ctx context.Context, h *Host, qpn uint32, httpPort int) error {
	if qpn != 0 {
		a, err := resolveIPv4(ctx, h.Arg)
		if err != nil {
			return err
		}
		g := verbs.GIDFromAddr(a)
		h.Peer = probe.Peer{Name: h.Arg, Addr: a, GID: g, QPN: qpn, QKey: probe.QKey}
		h.QPNs = []uint32{h.Peer.QPN}
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	base := "http://" + net.JoinHostPort(h.Arg, strconv.Itoa(httpPort))
	s, err := probe.FetchSelf(fctx, nil, base)
	if err != nil {
		return fmt.Errorf("finding the responder (give --qpn to skip it): %w", err)
	}
	if h.Peer, err = s.Peer(); err != nil {
		return err
	}
	h.Peer.Name = h.Arg
	for _, q := range s.QPNs {
		if q != 0 && q <= 0xFFFFFF {
			h.QPNs = append(h.QPNs, q)
		}
	}
	if len(h.QPNs) == 0 {
		h.QPNs = []uint32{h.Peer.QPN}
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
func printProbe(w io.Writer, h *Host, i int, r probe.Result) {
	switch r.Outcome {
	case probe.OutcomeOK:
		fmt.Fprintf(w, "%d bytes from %s: probe=%d label=0x%05x sport=%d rtt=%s us prober=%s us responder=%s us\n",
			probe.PayloadLen, h.Arg, i, r.FlowLabel, r.SrcPort, us(r.NetworkRTT), us(r.ProberDelay), us(r.ResponderDelay))
	case probe.OutcomeLost:
		fmt.Fprintf(w, "%s: probe=%d label=0x%05x sport=%d lost (no ACKs within the timeout)\n", h.Arg, i, r.FlowLabel, r.SrcPort)
	case probe.OutcomeLate:
		fmt.Fprintf(w, "%s: probe=%d label=0x%05x sport=%d late ACK (after the timeout)\n", h.Arg, i, r.FlowLabel, r.SrcPort)
	default:
		fmt.Fprintf(w, "%s: probe=%d label=0x%05x sport=%d error: %s\n", h.Arg, i, r.FlowLabel, r.SrcPort, r.Reason)
	}
}

// Summary is the summary of one host's probes, and its JSON form.
type Summary struct {
	Host       string     `json:"host"`
	Addr       string     `json:"addr"`
	GID        string     `json:"gid"`
	QPN        uint32     `json:"qpn"`
	Sent       int        `json:"sent"`
	NotSent    int        `json:"not_sent"`
	Completed  int        `json:"completed"`
	Lost       int        `json:"lost"`
	Late       int        `json:"late"`
	Errors     int        `json:"errors"`
	Loss       float64    `json:"loss"` // lost / sent
	NetworkRTT *Quantiles `json:"network_rtt_ns,omitempty"`
	Prober     *Quantiles `json:"prober_delay_ns,omitempty"`
	Responder  *Quantiles `json:"responder_delay_ns,omitempty"`
	Timestamps string     `json:"timestamps"`
	Provider   string     `json:"provider"`
	Probes     []Record   `json:"probes"`
}

// Quantiles are the minimum, median, 99th percentile and maximum.
type Quantiles struct {
	Min, P50, P99, Max time.Duration
}

// MarshalJSON writes nanoseconds.
func (q *Quantiles) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`{"min":%d,"p50":%d,"p99":%d,"max":%d}`, q.Min, q.P50, q.P99, q.Max)), nil
}

// Record is one probe in a Summary.
type Record struct {
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

func quants(v []time.Duration) *Quantiles {
	if len(v) == 0 {
		return nil
	}
	slices.Sort(v)
	return &Quantiles{Min: v[0], P50: quantile(v, 0.5), P99: quantile(v, 0.99), Max: v[len(v)-1]}
}

// Summarize returns h's summary; provider names the prober's provider and
// local its timestamp kind.
func Summarize(h *Host, provider string, local probe.Timestamps) Summary {
	s := Summary{Host: h.Arg, Addr: h.Peer.Addr.String(), GID: h.Peer.GID.String(), QPN: h.Peer.QPN,
		Sent: h.sent, NotSent: h.notSent, Late: h.late, Provider: provider, Timestamps: local.String(), Probes: []Record{}}
	var rtt, pd, rd []time.Duration
	kind := local
	for _, r := range h.results {
		s.Probes = append(s.Probes, Record{Seq: r.Seq, ResponderQPN: r.ResponderQPN, Outcome: r.Outcome.String(), Reason: r.Reason, FlowLabel: r.FlowLabel,
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

// WriteSummary prints s as ping's statistics.
func WriteSummary(w io.Writer, h *Host, s Summary) {
	fmt.Fprintf(w, "\n--- %s goroce probe statistics ---\n", h.Arg)
	fmt.Fprintf(w, "%d probes sent, %d completed, %d lost, %d late, %d errors", s.Sent, s.Completed, s.Lost, s.Late, s.Errors)
	if s.NotSent > 0 {
		fmt.Fprintf(w, ", %d not sent (%s)", s.NotSent, h.sendError)
	}
	fmt.Fprintf(w, ", %s%% loss, %s timestamps\n", strconv.FormatFloat(100*s.Loss, 'f', -1, 64), s.Timestamps)
	for _, q := range []struct {
		name string
		q    *Quantiles
	}{{"network rtt", s.NetworkRTT}, {"prober delay", s.Prober}, {"responder delay", s.Responder}} {
		if q.q == nil {
			continue
		}
		fmt.Fprintf(w, "%s min/p50/p99/max = %s/%s/%s/%s us\n", q.name, us(q.q.Min), us(q.q.P50), us(q.q.P99), us(q.q.Max))
	}
}
