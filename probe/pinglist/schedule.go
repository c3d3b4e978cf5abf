package pinglist

import (
	"time"
)

// Schedule spreads the probes of a set of targets evenly in time: target i
// is due every 1/Rate seconds, and the targets' first probes are staggered
// over their periods so that they do not all fall on the same instant. It
// holds one entry per target in a binary heap (no goroutine, no timer per
// target): one goroutine asks Next for the next due target, waits until its
// time, probes it, and asks again. A Schedule is not safe for concurrent
// use.
//
// Rates are those of the targets (already capped per class by
// List.Targets); a target with a rate <= 0 is never due.
type Schedule struct {
	period []time.Duration
	due    []time.Time
	heap   []int32
}

// NewSchedule returns a schedule of targets whose first probes fall in
// [start, start + period).
func NewSchedule(targets []Target, start time.Time) *Schedule {
	s := &Schedule{
		period: make([]time.Duration, 0, len(targets)),
		due:    make([]time.Time, 0, len(targets)),
		heap:   make([]int32, 0, len(targets)),
	}
	n := len(targets)
	for i, t := range targets {
		if !(t.Rate > 0) || !validRate(t.Rate) {
			s.period = append(s.period, 0)
			s.due = append(s.due, time.Time{})
			continue
		}
		p := time.Duration(float64(time.Second) / t.Rate)
		if p <= 0 {
			p = 1
		}
		// Stagger: target i starts at i/n of its period.
		off := time.Duration(float64(p) * float64(i) / float64(n))
		s.period = append(s.period, p)
		s.due = append(s.due, start.Add(off))
		s.push(int32(i))
	}
	return s
}

// Len returns the number of targets that are ever due.
func (s *Schedule) Len() int { return len(s.heap) }

// Next returns the index (into the targets given to NewSchedule) of the
// target due first and when it is due, and moves that target's next probe
// one period on. ok is false when no target is ever due. It does not
// allocate.
func (s *Schedule) Next() (i int, at time.Time, ok bool) {
	if len(s.heap) == 0 {
		return 0, time.Time{}, false
	}
	top := s.heap[0]
	at = s.due[top]
	s.due[top] = at.Add(s.period[top])
	s.down(0)
	return int(top), at, true
}

// Peek returns when the next target is due, without moving it.
func (s *Schedule) Peek() (at time.Time, ok bool) {
	if len(s.heap) == 0 {
		return time.Time{}, false
	}
	return s.due[s.heap[0]], true
}

// Skip moves every target whose next probe is due before now to its first
// due time at or after now, so that a loop that fell behind (a stalled
// host) does not burst to catch up. It returns the number of probes
// skipped.
func (s *Schedule) Skip(now time.Time) int {
	skipped := 0
	for len(s.heap) > 0 {
		top := s.heap[0]
		if !s.due[top].Before(now) {
			break
		}
		p := s.period[top]
		k := int(now.Sub(s.due[top])/p) + 1
		skipped += k
		s.due[top] = s.due[top].Add(time.Duration(k) * p)
		s.down(0)
	}
	return skipped
}

func (s *Schedule) less(a, b int32) bool {
	if !s.due[a].Equal(s.due[b]) {
		return s.due[a].Before(s.due[b])
	}
	return a < b
}

func (s *Schedule) push(i int32) {
	s.heap = append(s.heap, i)
	j := len(s.heap) - 1
	for j > 0 {
		p := (j - 1) / 2
		if !s.less(s.heap[j], s.heap[p]) {
			break
		}
		s.heap[j], s.heap[p] = s.heap[p], s.heap[j]
		j = p
	}
}

func (s *Schedule) down(j int) {
	n := len(s.heap)
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.less(s.heap[r], s.heap[l]) {
			m = r
		}
		if !s.less(s.heap[m], s.heap[j]) {
			return
		}
		s.heap[j], s.heap[m] = s.heap[m], s.heap[j]
		j = m
	}
}
