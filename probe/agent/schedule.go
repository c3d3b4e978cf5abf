package agent

import (
	"container/heap"
	"net/netip"
	"time"

	"github.com/goroce/goroce/probe/pinglist"
)

// targetKey identifies a target across reloads: the same node probed for
// the same class keeps its place in the label cycle.
type targetKey struct {
	addr  netip.Addr
	class string
}

// entry is one target in the scheduler's heap. Only the scheduler's
// goroutine touches it.
type entry struct {
	target   pinglist.Target
	peer     *peer
	interval time.Duration
	next     time.Time
	// n counts the probes sent: probe n takes label n mod L and the
	// responder QPN (n / L) mod Q, so that every (label, QPN) pair is
	// covered every L*Q probes.
	n     uint64
	index int
}

// schedHeap is a min-heap of entries by next.
type schedHeap []*entry

func (h schedHeap) Len() int           { return len(h) }
func (h schedHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h schedHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *schedHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *schedHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// interval is the time between two probes at rate probes per second, at
// least a microsecond and at most an hour.
func interval(rate float64) time.Duration {
	if !(rate > 0) {
		return time.Hour
	}
	d := time.Duration(float64(time.Second) / rate)
	return min(max(d, time.Microsecond), time.Hour)
}

// phase spreads the first probes of targets over one interval, by a hash
// of the target, so that a fleet started at once does not probe in step.
func phase(k targetKey, iv time.Duration) time.Duration {
	h := uint64(14695981039346656037)
	for _, b := range k.addr.AsSlice() {
		h = (h ^ uint64(b)) * 1099511628211
	}
	for i := 0; i < len(k.class); i++ {
		h = (h ^ uint64(k.class[i])) * 1099511628211
	}
	return time.Duration(h % uint64(iv))
}

// scheduler is the state of the scheduling goroutine.
type scheduler struct {
	h       schedHeap
	entries map[targetKey]*entry
	// slack is how early a probe may go with others due: the goroutine
	// wakes at most once a slack and sends what is due by then, so that
	// 550 probes/s are a few hundred wakeups, not 550, and their packets
	// leave and come back in small batches. It is maxSlack, or an eighth
	// of the shortest interval when that is less (no target sends twice
	// in one batch).
	slack time.Duration
}

// maxSlack bounds the scheduler's slack.
const maxSlack = 5 * time.Millisecond

// replace installs a new target set at time now: targets that stay keep
// their entry (position in the label cycle and next time, adjusted to the
// new rate), new ones start at a phase within their interval, removed ones
// leave the heap.
func (s *scheduler) replace(now time.Time, targets []pinglist.Target, peers func(netip.Addr) *peer) {
	if s.entries == nil {
		s.entries = make(map[targetKey]*entry)
	}
	keep := make(map[targetKey]*entry, len(targets))
	h := make(schedHeap, 0, len(targets))
	s.slack = maxSlack
	for _, t := range targets {
		s.slack = min(s.slack, interval(t.Rate)/8)
		k := targetKey{t.Node.Addr, t.Class}
		if _, dup := keep[k]; dup {
			continue
		}
		iv := interval(t.Rate)
		e := s.entries[k]
		if e == nil {
			e = &entry{next: now.Add(phase(k, iv))}
		} else if e.next.Sub(now) > iv {
			e.next = now.Add(phase(k, iv))
		}
		e.target, e.interval, e.peer = t, iv, peers(t.Node.Addr)
		keep[k] = e
		e.index = len(h)
		h = append(h, e)
	}
	heap.Init(&h)
	s.h, s.entries = h, keep
}

// due pops the entries due at now, calling f for each, and puts them back
// at their next time. An entry that fell a whole interval behind (a stalled
// host) skips the probes it missed instead of bursting them, and keeps its
// phase: its next
// time is the first of its own grid (next + k·interval) after now, so that
// targets spread over an interval before a stall stay spread after it
// (moving every late entry to now+interval would have lined them all up).
func (s *scheduler) due(now time.Time, f func(*entry)) {
	for len(s.h) > 0 && !s.h[0].next.After(now) {
		e := s.h[0]
		if now.Sub(e.next) < e.interval {
			f(e)
		} // else a whole interval late: resuming from a stall, not a probe now
		e.next = e.next.Add(e.interval)
		if !e.next.After(now) {
			missed := now.Sub(e.next)/e.interval + 1
			e.next = e.next.Add(missed * e.interval)
		}
		heap.Fix(&s.h, 0)
	}
}

// wait is the time until the next entry is due (an hour when none is).
func (s *scheduler) wait(now time.Time) time.Duration {
	if len(s.h) == 0 {
		return time.Hour
	}
	return max(s.h[0].next.Sub(now), 0)
}
