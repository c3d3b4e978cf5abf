package agent

import (
	"slices"
	"sync"
	"time"

	"github.com/goroce/goroce/probe"
)

// slotSamples bounds the RTT samples one history slot keeps for its
// median (reservoir sampling beyond).
const slotSamples = 64

// Point is one slot of a path's history: the probes whose T1 fell in
// [Start, Start+slot) and what became of them.
type Point struct {
	// Start is the slot's start, in Unix milliseconds.
	Start int64 `json:"t"`
	// Sent, OK and Lost count the slot's probes by outcome (Sent counts
	// every outcome but late ACKs).
	Sent uint32 `json:"sent"`
	OK   uint32 `json:"ok"`
	Lost uint32 `json:"lost"`
	// P50 and Max are the median and the largest network RTT of the
	// slot's completed probes, in microseconds (0 when none completed).
	P50 float64 `json:"p50_us"`
	Max float64 `json:"max_us"`
}

// pathHistory is the bounded history of one path: a ring of points plus
// the slot being filled.
type pathHistory struct {
	ring    []Point
	head    int // next write position
	full    bool
	cur     Point
	samples [slotSamples]float64
	ns      int    // samples kept in the current slot
	seen    uint64 // completed probes seen in the current slot
	rng     uint64
}

// history holds the pathHistory of every target the agent probes.
type history struct {
	mu    sync.Mutex
	slot  time.Duration
	size  int
	paths map[string]*pathHistory
}

func newHistory(slot time.Duration, size int) *history {
	return &history{slot: slot, size: size, paths: map[string]*pathHistory{}}
}

// add records r (on the prober's goroutine).
func (h *history) add(r *probe.Result) {
	if r.Outcome == probe.OutcomeLate {
		return
	}
	start := r.Sent.Truncate(h.slot).UnixMilli()
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.paths[r.Peer.Name]
	if p == nil {
		p = &pathHistory{ring: make([]Point, h.size), rng: uint64(len(h.paths))*0x9E3779B97F4A7C15 + 1}
		h.paths[r.Peer.Name] = p
	}
	if start < p.cur.Start {
		// A result of an older slot (its timeout ran out after a newer
		// probe completed): count it in the current slot.
		start = p.cur.Start
	}
	if start != p.cur.Start {
		p.close()
		p.cur = Point{Start: start}
	}
	p.cur.Sent++
	switch r.Outcome {
	case probe.OutcomeOK:
		p.cur.OK++
		us := float64(r.NetworkRTT) / float64(time.Microsecond)
		p.cur.Max = max(p.cur.Max, us)
		p.seen++
		if p.ns < slotSamples {
			p.samples[p.ns] = us
			p.ns++
		} else {
			p.rng ^= p.rng << 13
			p.rng ^= p.rng >> 7
			p.rng ^= p.rng << 17
			if j := p.rng % p.seen; j < slotSamples {
				p.samples[j] = us
			}
		}
	case probe.OutcomeLost:
		p.cur.Lost++
	}
}

// close moves the current slot into the ring.
func (p *pathHistory) close() {
	if p.cur.Sent == 0 {
		return
	}
	if p.ns > 0 {
		s := p.samples[:p.ns]
		slices.Sort(s)
		p.cur.P50 = s[len(s)/2]
	}
	p.ring[p.head] = p.cur
	p.head++
	if p.head == len(p.ring) {
		p.head, p.full = 0, true
	}
	p.ns, p.seen = 0, 0
}

// get returns the closed points of the path to dst, oldest first.
func (h *history) get(dst string) []Point {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.paths[dst]
	if p == nil {
		return []Point{}
	}
	now := time.Now().Truncate(h.slot).UnixMilli()
	if p.cur.Start < now {
		p.close()
		p.cur = Point{Start: now}
	}
	var out []Point
	if p.full {
		out = append(out, p.ring[p.head:]...)
	}
	return append(out, p.ring[:p.head]...)
}

// keep drops the histories of paths not in names (after a reload).
func (h *history) keep(names map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for n := range h.paths {
		if !names[n] {
			delete(h.paths, n)
		}
	}
}
