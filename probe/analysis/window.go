package analysis

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/goroce/goroce/probe"
)

// Defaults of Options.
const (
	DefaultWindow    = 30 * time.Second
	DefaultBuckets   = 10
	DefaultMaxLoss   = 0.01
	DefaultMaxP99    = 5 * time.Millisecond
	DefaultMinProbes = 20
	DefaultMaxPaths  = 4096
	DefaultMaxLabels = 1024
)

// Options configure a Window. Zero values take the defaults.
type Options struct {
	// Source and SourceGroup name the prober whose results the window
	// takes: the Src and SrcGroup of every PathStat.
	Source, SourceGroup string
	// Window is the length of the sliding window (default 30 s), Buckets
	// the number of slices it is kept in (default 10): the window slides by
	// Window/Buckets.
	Window  time.Duration
	Buckets int
	// MaxLoss is the loss ratio above which a path is degraded (default
	// 0.01, use a negative value for 0: any loss), MaxP99 the network RTT
	// p99 above which it is (default 5 ms), MinProbes the resolved probes
	// a path needs in the window to be judged (default 20).
	MaxLoss   float64
	MaxP99    time.Duration
	MinProbes int
	// MaxPaths bounds the paths tracked (default 4096): results for more
	// targets are counted in Dropped and otherwise ignored. MaxLabels
	// bounds the flow labels tracked per path (default 1024).
	MaxPaths  int
	MaxLabels int
	// Now is the clock (default time.Now), read when a result has no
	// Sent time.
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Buckets <= 0 {
		o.Buckets = DefaultBuckets
	}
	if o.MaxLoss == 0 {
		o.MaxLoss = DefaultMaxLoss
	} else if o.MaxLoss < 0 {
		o.MaxLoss = 0
	}
	if o.MaxP99 <= 0 {
		o.MaxP99 = DefaultMaxP99
	}
	if o.MinProbes <= 0 {
		o.MinProbes = DefaultMinProbes
	}
	if o.MaxPaths <= 0 {
		o.MaxPaths = DefaultMaxPaths
	}
	if o.MaxLabels <= 0 {
		o.MaxLabels = DefaultMaxLabels
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// PathStat is what a window says of one path, prober to target, over the
// window. It is what agents exchange (as JSON) to localise faults fleet
// wide.
type PathStat struct {
	Src      string `json:"src"`
	Dst      string `json:"dst"`
	SrcGroup string `json:"src_group"`
	DstGroup string `json:"dst_group"`
	Class    string `json:"class,omitempty"`
	// Sent counts the probes resolved in the window (Completed + Lost);
	// Late the ACKs that came after their probe was counted lost; Errors
	// the probes that could not be sent or completed with an error (not in
	// Sent).
	Sent      uint64 `json:"sent"`
	Completed uint64 `json:"completed"`
	Lost      uint64 `json:"lost"`
	Late      uint64 `json:"late"`
	Errors    uint64 `json:"errors"`
	// ProberDelay and ResponderDelay are the mean host delays of the
	// completed probes ((T6-T1)-(T5-T2) on the prober, T4-T3 on the
	// responder), the Max ones their largest: a busy host shows here, not
	// in the network RTT.
	ProberDelay       time.Duration `json:"prober_delay_ns,omitempty"`
	ResponderDelay    time.Duration `json:"responder_delay_ns,omitempty"`
	ProberDelayMax    time.Duration `json:"prober_delay_max_ns,omitempty"`
	ResponderDelayMax time.Duration `json:"responder_delay_max_ns,omitempty"`
	// Slow counts the completed probes whose network RTT was above
	// MaxP99 (to within a histogram bucket, about 9 %).
	Slow uint64 `json:"slow,omitempty"`
	// Loss is Lost/Sent (0 when nothing was sent).
	Loss float64 `json:"loss"`
	// P50 and P99 are network RTT quantiles of the completed probes (0
	// when none), accurate to about 10 %.
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	// Degraded: Sent >= MinProbes and Loss > MaxLoss or P99 > MaxP99.
	// Insufficient: Sent < MinProbes, the path is not judged (neither
	// degraded nor healthy).
	Degraded     bool `json:"degraded"`
	Insufficient bool `json:"insufficient,omitempty"`
	// Labels is the number of flow labels probed on the path in the last
	// one to two half windows; LossyLabels those whose loss ratio there is
	// above MaxLoss, sorted: a lossy ECMP member shows as loss on some
	// labels only, a dead host on all.
	Labels      int      `json:"labels"`
	LossyLabels []uint32 `json:"lossy_labels,omitempty"`
}

// Healthy reports whether the path was judged and found not degraded.
func (p PathStat) Healthy() bool { return !p.Degraded && !p.Insufficient }

// RTT histogram: log-scale buckets, 8 per doubling (a ratio of 2^(1/8),
// about 9 %), from 1 µs to 2^(rttBuckets/8) µs (about 16 s).
const (
	rttPerDoubling = 8
	rttBuckets     = 24 * rttPerDoubling
)

func rttBucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	b := int(math.Log2(us)*rttPerDoubling) + 1
	if b >= rttBuckets {
		return rttBuckets - 1
	}
	return b
}

// rttUpper is the upper bound of bucket b.
func rttUpper(b int) time.Duration {
	return time.Duration(math.Exp2(float64(b)/rttPerDoubling) * float64(time.Microsecond))
}

type slice struct {
	epoch                             int64 // time/span of the slice; -1: empty
	sent, completed, lost, late, errs uint32
	rtt                               [rttBuckets]uint16
	rttCount                          uint32
	// Host delays of the completed probes: sums and maxima, ns.
	proberSum, responderSum, proberMax, responderMax int64
	rttSpill                                         []uint32 // used instead of rtt when a bucket would overflow uint16
}

type labelStat struct{ sent, lost [2]uint32 } // two half windows

type path struct {
	dst, dstGroup, class string
	slices               []slice
	labels               map[uint32]*labelStat
	labelEpoch           [2]int64
}

// Window keeps the recent results of one prober, per path, in a sliding
// window of bounded memory: per path, Buckets slices of counters and a
// fixed log-scale RTT histogram, and per-label counters over two half
// windows. It is safe for concurrent use.
type Window struct {
	o       Options
	span    int64 // ns per slice
	half    int64 // ns per label half window
	mu      sync.Mutex
	paths   map[string]*path
	dropped uint64
	latest  int64 // the newest slice epoch seen
}

// NewWindow returns an empty window.
func NewWindow(o Options) *Window {
	o.defaults()
	span := int64(o.Window) / int64(o.Buckets)
	if span <= 0 {
		span = 1
	}
	return &Window{o: o, span: span, half: int64(o.Window) / 2, paths: make(map[string]*path)}
}

// Options returns the window's options, defaults applied.
func (w *Window) Options() Options {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.o
}

// SetSource renames the window's prober (a node the pinglist came to name,
// or moved to another group): the Src and SrcGroup of the PathStats from
// now on.
func (w *Window) SetSource(name, group string) {
	w.mu.Lock()
	w.o.Source, w.o.SourceGroup = name, group
	w.mu.Unlock()
}

// Dropped returns the number of results ignored because MaxPaths paths were
// already tracked.
func (w *Window) Dropped() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

// Add takes one result. Its path is the window's source to r.Peer (by
// name, or address when the peer has no name); it falls in the slice of
// r.Sent (the clock's now when zero). Results older than the window are
// ignored.
func (w *Window) Add(r probe.Result) {
	t := r.Sent
	if t.IsZero() {
		t = w.o.Now()
	}
	ns := t.UnixNano()
	dst := r.Peer.Name
	if dst == "" && r.Peer.Addr.IsValid() {
		dst = r.Peer.Addr.String()
	}
	epoch := ns / w.span
	w.mu.Lock()
	defer w.mu.Unlock()
	if epoch > w.latest {
		w.latest = epoch
	} else if epoch <= w.latest-int64(w.o.Buckets) {
		return // older than the window
	}
	p := w.paths[dst]
	if p == nil {
		if len(w.paths) >= w.o.MaxPaths {
			w.dropped++
			return
		}
		p = w.newPath(dst, r.Peer.Group, r.Class)
	}
	if r.Class != "" {
		p.class = r.Class
	}
	if r.Peer.Group != "" {
		p.dstGroup = r.Peer.Group
	}
	s := &p.slices[int(epoch%int64(len(p.slices)))]
	if s.epoch != epoch {
		if s.epoch > epoch {
			return // older than the window
		}
		*s = slice{epoch: epoch, rttSpill: s.rttSpill[:0]}
	}
	switch r.Outcome {
	case probe.OutcomeOK:
		s.sent++
		s.completed++
		b := rttBucket(r.NetworkRTT)
		if s.rttSpill != nil && len(s.rttSpill) == rttBuckets {
			s.rttSpill[b]++
		} else if s.rtt[b] == math.MaxUint16 {
			s.spill(b)
		} else {
			s.rtt[b]++
		}
		s.rttCount++
		s.addDelays(int64(r.ProberDelay), int64(r.ResponderDelay))
	case probe.OutcomeLost:
		s.sent++
		s.lost++
	case probe.OutcomeLate:
		s.late++
	default:
		s.errs++
	}
	if r.Outcome != probe.OutcomeOK && r.Outcome != probe.OutcomeLost {
		return
	}
	w.addLabel(p, ns, r.FlowLabel, r.Outcome == probe.OutcomeLost)
}

// newPath starts tracking the path to dst, with empty slices and label
// half windows, and returns it. It is called with w.mu held, once per
// path.
func (w *Window) newPath(dst, dstGroup, class string) *path {
	p := &path{dst: dst, dstGroup: dstGroup, class: class, slices: make([]slice, w.o.Buckets), labels: make(map[uint32]*labelStat)}
	for i := range p.slices {
		p.slices[i].epoch = -1
	}
	p.labelEpoch = [2]int64{-1, -1}
	w.paths[dst] = p
	return p
}

// addDelays adds the host delays of a completed probe, prober pd and
// responder rd (ns), to the slice's sums and maxima. It is small enough to
// be inlined into Add.
func (s *slice) addDelays(pd, rd int64) {
	s.proberSum += pd
	s.responderSum += rd
	s.proberMax = max(s.proberMax, pd)
	s.responderMax = max(s.responderMax, rd)
}

// spill moves the slice's RTT histogram to rttSpill, counters of 32 bits,
// and counts one RTT in bucket b there. Add calls it when bucket b of the
// 16-bit histogram is full; the slice keeps counting in rttSpill until it
// is reused.
func (s *slice) spill(b int) {
	if cap(s.rttSpill) < rttBuckets {
		s.rttSpill = make([]uint32, rttBuckets)
	}
	s.rttSpill = s.rttSpill[:rttBuckets]
	for i, c := range s.rtt {
		s.rttSpill[i] = uint32(c)
	}
	s.rttSpill[b]++
}

// addLabel counts a resolved probe sent at ns (Unix nanoseconds) with flow
// label label, lost or not, in the path's per-label counters of its half
// window; the other half window keeps the previous one. Probes older than
// both half windows are ignored, and so are new labels when MaxLabels are
// tracked and none can be pruned. It is called with w.mu held.
func (w *Window) addLabel(p *path, ns int64, label uint32, lost bool) {
	he := ns / w.half
	hi := int(he % 2)
	if p.labelEpoch[hi] != he {
		if p.labelEpoch[hi] > he {
			return
		}
		p.labelEpoch[hi] = he
		for _, ls := range p.labels {
			ls.sent[hi], ls.lost[hi] = 0, 0
		}
	}
	ls := p.labels[label]
	if ls == nil {
		if len(p.labels) >= w.o.MaxLabels {
			w.pruneLabels(p)
			if len(p.labels) >= w.o.MaxLabels {
				return
			}
		}
		ls = &labelStat{}
		p.labels[label] = ls
	}
	ls.sent[hi]++
	if lost {
		ls.lost[hi]++
	}
}

// pruneLabels forgets labels with no probe in either half window.
func (w *Window) pruneLabels(p *path) {
	for l, ls := range p.labels {
		if ls.sent == [2]uint32{} {
			delete(p.labels, l)
		}
	}
}

// Stats returns the statistics of every path with something in the window
// ending at now, sorted by destination. Paths with nothing left in the
// window are forgotten.
func (w *Window) Stats(now time.Time) []PathStat {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur := now.UnixNano() / w.span
	oldest := cur - int64(w.o.Buckets) + 1
	he := now.UnixNano() / w.half
	out := make([]PathStat, 0, len(w.paths))
	var hist [rttBuckets]uint64
	for key, p := range w.paths {
		ps := PathStat{Src: w.o.Source, SrcGroup: w.o.SourceGroup, Dst: p.dst, DstGroup: p.dstGroup, Class: p.class}
		hist = [rttBuckets]uint64{}
		var n uint64
		var pSum, rSum int64
		for i := range p.slices {
			s := &p.slices[i]
			if s.epoch < oldest || s.epoch > cur {
				continue
			}
			ps.Sent += uint64(s.sent)
			ps.Completed += uint64(s.completed)
			ps.Lost += uint64(s.lost)
			ps.Late += uint64(s.late)
			ps.Errors += uint64(s.errs)
			if len(s.rttSpill) == rttBuckets {
				for b, c := range s.rttSpill {
					hist[b] += uint64(c)
				}
			} else {
				for b, c := range s.rtt {
					hist[b] += uint64(c)
				}
			}
			n += uint64(s.rttCount)
			pSum += s.proberSum
			rSum += s.responderSum
			ps.ProberDelayMax = max(ps.ProberDelayMax, time.Duration(s.proberMax))
			ps.ResponderDelayMax = max(ps.ResponderDelayMax, time.Duration(s.responderMax))
		}
		if ps.Sent == 0 && ps.Late == 0 && ps.Errors == 0 {
			delete(w.paths, key)
			continue
		}
		if ps.Sent > 0 {
			ps.Loss = float64(ps.Lost) / float64(ps.Sent)
		}
		if n > 0 {
			ps.P50 = quantile(&hist, n, 0.50)
			ps.P99 = quantile(&hist, n, 0.99)
			ps.ProberDelay = time.Duration(pSum / int64(n))
			ps.ResponderDelay = time.Duration(rSum / int64(n))
			for b := rttBucket(w.o.MaxP99) + 1; b < rttBuckets; b++ {
				ps.Slow += hist[b]
			}
		}
		for l, ls := range p.labels {
			var sent, lost uint32
			for h := 0; h < 2; h++ {
				if e := p.labelEpoch[h]; e == he || e == he-1 {
					sent += ls.sent[h]
					lost += ls.lost[h]
				}
			}
			if sent == 0 {
				continue
			}
			ps.Labels++
			if lost > 0 && float64(lost)/float64(sent) > w.o.MaxLoss {
				ps.LossyLabels = append(ps.LossyLabels, l)
			}
		}
		sort.Slice(ps.LossyLabels, func(a, b int) bool { return ps.LossyLabels[a] < ps.LossyLabels[b] })
		if ps.Sent < uint64(w.o.MinProbes) {
			ps.Insufficient = true
		} else {
			ps.Degraded = ps.Loss > w.o.MaxLoss || ps.P99 > w.o.MaxP99
		}
		out = append(out, ps)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Dst < out[b].Dst })
	return out
}

// quantile returns the q-quantile of the histogram of n values: the upper
// bound of the bucket holding the value of rank ceil(q*n).
func quantile(h *[rttBuckets]uint64, n uint64, q float64) time.Duration {
	rank := uint64(math.Ceil(q * float64(n)))
	if rank < 1 {
		rank = 1
	}
	var c uint64
	for b, v := range h {
		c += v
		if c >= rank {
			return rttUpper(b)
		}
	}
	return rttUpper(rttBuckets - 1)
}
