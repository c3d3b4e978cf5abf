package agent

import (
	"context"
	"sort"
	"time"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/analysis"
	"github.com/goroce/goroce/probe/pinglist"
)

// exportFleet is the fleet goroutine: every FleetInterval it finds the
// fleet's exporter, the first node of the pinglist by name whose agent
// answers (every agent finds the same one, with no controller; when it
// dies the next takes over within an interval and a fetch timeout). The
// exporter computes the fleet view and exports its verdicts as
// goroce_probe_fleet_fault; the others export none, so that one fault is
// one series fleet-wide. A verdict is exported once confirmed
// (analysis.Confirmer): one of its suspects' components was named by the
// previous view too, so that the first seconds of a fault, when one path's
// chance losses can pass the test before the whole component's do, export
// nothing rather than a wrong component, and a verdict that only refines
// (a host's direction) is exported throughout. A view with a verdict
// waiting for its confirmation is followed by the next as soon as it
// expires (FleetTTL), not a FleetInterval later.
//
// An ambiguous verdict names the host pairs whose probes would settle it:
// the exporter serves them at SeparatePath, every agent takes those it is
// the source of as targets of class ClassSeparate (bounded), and the next
// views judge with their paths too (separatingPairs, setSeparating).
func (a *Agent) exportFleet(ctx context.Context) {
	timer := time.NewTimer(a.opts.FleetInterval)
	defer timer.Stop()
	var confirm analysis.Confirmer
	var sep separation
	for {
		next := time.Now().Add(a.opts.FleetInterval)
		name, me := a.electExporter(ctx)
		if ctx.Err() != nil {
			return
		}
		a.exporter.Store(&name)
		var doc FleetDoc
		if me {
			doc = a.Fleet(ctx)
			confirmed := confirm.Confirm(doc.Verdicts)
			a.metrics.SetFleet(true, confirmed)
			if len(confirmed) < len(doc.Verdicts) {
				// A verdict waits for the next view to confirm it:
				// make that view as soon as this one expires.
				next = earliest(next, doc.Generated.Add(a.opts.FleetTTL+10*time.Millisecond))
			}
		} else {
			confirm.Reset()
			a.metrics.SetFleet(false, nil)
		}
		a.setSeparating(a.separatingPairs(ctx, name, me, &sep, &doc))
		timer.Reset(max(time.Until(next), time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// electExporter returns the exporter's name and whether it is this node:
// the nodes before this one by name are asked for their Self in order, and
// the first that answers is the exporter; none answering, this node is. An
// unlisted node is never the exporter.
func (a *Agent) electExporter(ctx context.Context) (string, bool) {
	c := a.cfg.Load()
	if !c.listed {
		return "", false
	}
	nodes := append([]pinglist.Node(nil), c.list.Nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for _, n := range nodes {
		if n.Name == c.self.Name {
			return n.Name, true
		}
		fctx, cancel := context.WithTimeout(ctx, a.opts.FetchTimeout)
		s, err := probe.FetchSelf(fctx, a.opts.HTTPClient, a.baseURL(n.Addr))
		cancel()
		if ctx.Err() != nil {
			return "", false
		}
		if err == nil && s.Name == n.Name {
			return n.Name, false
		}
	}
	return "", false
}

// exporterName is the fleet's exporter as last found ("" before the
// first search).
func (a *Agent) exporterName() string {
	if p := a.exporter.Load(); p != nil {
		return *p
	}
	return ""
}
