package agent

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/goroce/goroce/probe/analysis"
	"github.com/goroce/goroce/probe/pinglist"
)

// ClassSeparate is the class (label class="separate") of the separating
// probes: host pairs the pinglist does not probe that an ambiguous fleet
// verdict names as the ones that would tell its suspects apart. They go in
// the inter_tor class's DSCP, at its rate.
const ClassSeparate = "separate"

// SeparatePath serves the exporter's separating pairs (SeparateDoc).
const SeparatePath = "/probe/v1/separate"

// MaxSeparateTargets bounds the separating targets one agent probes at a
// time (at the inter_tor rate each: 80 probes/s at the default 10).
const MaxSeparateTargets = 8

// SeparateDoc is the document at SeparatePath.
type SeparateDoc struct {
	// Exporter is the node that computed the pairs (the fleet's
	// exporter); Pairs are "A->B": A's agent probes B.
	Exporter string   `json:"exporter"`
	Pairs    []string `json:"pairs"`
}

// separation is the exporter's record of the separating pairs: each
// pair, the suspects of the ambiguous verdict that asked for it, and when
// it was last wanted. A pair stays wanted while a verdict names one of
// those suspects (the ambiguity settled is kept settled by the same
// probes), and is dropped hold after that.
type separation struct {
	hold  time.Duration
	pairs map[string]*sepPair
}

type sepPair struct {
	suspects map[string]bool
	last     time.Time
}

// update takes a fleet view's verdicts at now and returns the pairs
// wanted, sorted.
func (s *separation) update(now time.Time, vs []analysis.Verdict) []string {
	if s.pairs == nil {
		s.pairs = map[string]*sepPair{}
	}
	for _, v := range vs {
		if !v.Ambiguous {
			continue
		}
		for _, p := range v.Separate {
			e := s.pairs[p]
			if e == nil {
				e = &sepPair{suspects: map[string]bool{}}
				s.pairs[p] = e
			}
			for _, x := range v.Suspects {
				e.suspects[v.Symptom+"|"+x.Label()] = true
			}
			e.last = now
		}
	}
	for _, v := range vs {
		for _, e := range s.pairs {
			for _, x := range v.Suspects {
				if e.suspects[v.Symptom+"|"+x.Label()] {
					e.last = now
				}
			}
		}
	}
	out := make([]string, 0, len(s.pairs))
	for p, e := range s.pairs {
		if now.Sub(e.last) > s.hold {
			delete(s.pairs, p)
			continue
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// separatingPairs returns the pairs the exporter wants probed: its own
// when this node is the exporter, else fetched from the exporter's
// agent (none when it cannot be).
func (a *Agent) separatingPairs(ctx context.Context, exporter string, me bool, sep *separation, doc *FleetDoc) []string {
	c := a.cfg.Load()
	if me {
		sep.hold = c.list.Settings.Window
		pairs := sep.update(time.Now(), doc.Verdicts)
		a.separating.Store(&SeparateDoc{Exporter: exporter, Pairs: pairs})
		return pairs
	}
	a.separating.Store(nil)
	n, ok := c.list.Node(exporter)
	if !ok {
		return nil
	}
	var d SeparateDoc
	if err := a.getJSON(ctx, a.baseURL(n.Addr)+SeparatePath, &d); err != nil || d.Exporter != exporter {
		return nil
	}
	return d.Pairs
}

// separateDoc is what SeparatePath serves: the pairs when this node is
// the exporter, none otherwise.
func (a *Agent) separateDoc() SeparateDoc {
	if d := a.separating.Load(); d != nil {
		return *d
	}
	return SeparateDoc{Exporter: a.exporterName(), Pairs: []string{}}
}

// setSeparating makes this node's pairs among pairs its separating
// targets (at most MaxSeparateTargets; pairs it probes already are left
// out), and hands them to the scheduler when they changed.
func (a *Agent) setSeparating(pairs []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.cfg.Load()
	probed := make(map[string]bool, len(c.targets))
	for _, t := range c.targets {
		probed[t.Node.Name] = true
	}
	rate := c.list.Classes[pinglist.ClassInterToR].Rate
	var extra []pinglist.Target
	for _, p := range pairs {
		src, dst, ok := strings.Cut(p, "->")
		if !ok || src != c.self.Name || !c.listed || probed[dst] || len(extra) >= MaxSeparateTargets {
			continue
		}
		if n, ok := c.list.Node(dst); ok {
			extra = append(extra, pinglist.Target{Node: n, Class: ClassSeparate, Rate: rate})
		}
	}
	if slices.Equal(extra, a.extra) {
		return
	}
	if len(extra) > 0 {
		a.log.Info("probing to separate an ambiguous verdict", "targets", len(extra))
	}
	a.extra = extra
	a.setPeersLocked(c)
}

// keepExtra keeps the separating targets a new configuration still has
// as nodes (unchanged), until the exporter says again.
func keepExtra(c *config, extra []pinglist.Target) []pinglist.Target {
	var out []pinglist.Target
	for _, t := range extra {
		if n, ok := c.list.Node(t.Node.Name); ok && n == t.Node && c.listed {
			out = append(out, t)
		}
	}
	return out
}
