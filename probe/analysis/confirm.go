package analysis

// ID identifies the component a suspect names: its kind and name, without
// a host's or a rail's direction. The direction is what the probes refine
// while a fault lasts (a stalled host's own paths come back after its
// receiving paths have named it), the component is what failed.
func (s Suspect) ID() string { return s.Kind + " " + s.Name }

// Confirmer holds a verdict back until a second analysis in a row gives
// it, so that the first seconds of a fault, when one path's chance losses
// can pass the test before the whole component's do, report nothing rather
// than a wrong component. A verdict is confirmed when one of its suspects'
// components (ID: kind and name, in any direction) was a suspect of the
// previous analysis too. A verdict that only refines (a host's direction
// found, an ambiguity settled by separating probes) therefore stays
// confirmed throughout: the fault is never reported over while it lasts.
// The zero value is ready; it is not safe for concurrent use.
type Confirmer struct {
	prev map[string]bool
}

// Confirm returns the verdicts of vs that the previous call's confirm,
// and remembers vs's suspects for the next call.
func (c *Confirmer) Confirm(vs []Verdict) []Verdict {
	var out []Verdict
	now := make(map[string]bool, len(vs))
	for _, v := range vs {
		ok := false
		for _, s := range v.Suspects {
			ok = ok || c.prev[s.ID()]
			now[s.ID()] = true
		}
		if ok {
			out = append(out, v)
		}
	}
	c.prev = now
	return out
}

// Reset forgets the previous analysis (an agent that stopped exporting
// starts again from nothing).
func (c *Confirmer) Reset() { c.prev = nil }
