package agent

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/probe/pinglist"
)

// spread runs the scheduler from start to end in 1 ms ticks and returns the
// most probes sent within any 10 ms.
func spread(s *scheduler, start, end time.Time) (most, total int) {
	counts := map[int64]int{}
	for now := start; now.Before(end); now = now.Add(time.Millisecond) {
		s.due(now, func(*entry) {
			counts[now.UnixMilli()/10]++
			total++
		})
	}
	for _, c := range counts {
		most = max(most, c)
	}
	return most, total
}

// After a 5 s stall the schedule is as spread as before it: no burst of
// every target at once, neither at the resume nor in step afterwards.
func TestScheduleSpreadAfterStall(t *testing.T) {
	var targets []pinglist.Target
	for i := 0; i < 200; i++ {
		a := netip.AddrFrom4([4]byte{10, 0, byte(i / 100), byte(i % 100)})
		targets = append(targets, pinglist.Target{Node: pinglist.Node{Name: fmt.Sprint("n", i), Addr: a}, Class: pinglist.ClassToRMesh, Rate: 10})
	}
	var s scheduler
	t0 := time.Unix(1_000_000, 0)
	s.replace(t0, targets, func(netip.Addr) *peer { return nil })
	before, n0 := spread(&s, t0, t0.Add(2*time.Second))
	// The stall: nothing runs for 5 s; then 2 s more.
	resume := t0.Add(7 * time.Second)
	after, n1 := spread(&s, resume, resume.Add(2*time.Second))
	t.Logf("200 targets at 10/s: at most %d probes in 10 ms before a 5 s stall (%d in 2 s), %d after (%d in 2 s)", before, n0, after, n1)
	if n0 < 3990 || n1 < 3990 || n1 > 4010 {
		t.Errorf("probes in 2 s: %d before, %d after; want about 4000", n0, n1)
	}
	if after > before+2 {
		t.Errorf("at most %d probes in 10 ms after the stall, %d before: a burst", after, before)
	}
}
