package analysis

import (
	"sort"
	"time"
)

// DefaultHistoryLen bounds a VerdictHistory.
const DefaultHistoryLen = 256

// Record is one verdict's life: when it was first and last given, and when
// it ended (zero while it stands). A fault shorter than the analysis
// window stays in the history after its verdict is gone.
type Record struct {
	Verdict
	Start time.Time `json:"start"`
	Last  time.Time `json:"last"`
	End   time.Time `json:"end,omitzero"`
	// Peak is the highest confidence the verdict had.
	Peak float64 `json:"peak_confidence"`
}

// Active reports whether the verdict stands.
func (r Record) Active() bool { return r.End.IsZero() }

// VerdictHistory keeps the verdicts over time, by Key: a verdict given
// again extends its record, one no longer given ends it. It holds at most
// its length of records, dropping the oldest ended ones first. It is not
// safe for concurrent use.
type VerdictHistory struct {
	max     int
	records []Record
}

// NewVerdictHistory returns an empty history of at most n records
// (DefaultHistoryLen when n <= 0).
func NewVerdictHistory(n int) *VerdictHistory {
	if n <= 0 {
		n = DefaultHistoryLen
	}
	return &VerdictHistory{max: n}
}

// Update records the verdicts of an analysis at now. A standing record
// goes on with the verdict of the same Key or, failing one, with a
// verdict of the same components (ID) whose host directions the probes
// have refined since: one fault, one record.
func (h *VerdictHistory) Update(now time.Time, vs []Verdict) {
	taken := make([]bool, len(vs))
	next := make([]int, len(h.records))
	for k := range h.records {
		next[k] = -1
	}
	for _, key := range []func(Verdict) string{Verdict.Key, Verdict.id} {
		for k := range h.records {
			r := &h.records[k]
			if !r.Active() || next[k] >= 0 {
				continue
			}
			for i, v := range vs {
				if !taken[i] && key(v) == key(r.Verdict) {
					next[k], taken[i] = i, true
					break
				}
			}
		}
	}
	for k := range h.records {
		r := &h.records[k]
		if !r.Active() {
			continue
		}
		if next[k] < 0 {
			r.End = now
			continue
		}
		v := vs[next[k]]
		r.Verdict, r.Last = v, now
		r.Peak = max(r.Peak, v.Confidence)
	}
	for i, v := range vs {
		if !taken[i] {
			h.records = append(h.records, Record{Verdict: v, Start: now, Last: now, Peak: v.Confidence})
		}
	}
	for len(h.records) > h.max {
		drop := 0
		for k := range h.records {
			if !h.records[k].Active() {
				drop = k
				break
			}
		}
		h.records = append(h.records[:drop], h.records[drop+1:]...)
	}
}

// id is a verdict's symptom and its suspects' components, without their
// directions.
func (v Verdict) id() string { return v.join(Suspect.ID) }

// Records returns the history, newest start first.
func (h *VerdictHistory) Records() []Record {
	out := append([]Record(nil), h.records...)
	sort.SliceStable(out, func(a, b int) bool { return out[a].Start.After(out[b].Start) })
	return out
}

// Active returns the verdicts that stand, oldest first.
func (h *VerdictHistory) Active() []Record {
	var out []Record
	for _, r := range h.records {
		if r.Active() {
			out = append(out, r)
		}
	}
	return out
}
