package pinglist

import (
	"net/netip"
	"testing"
	"time"
)

func targetsWithRates(rates ...float64) []Target {
	t := make([]Target, len(rates))
	for i, r := range rates {
		t[i] = Target{Node: Node{Name: string(rune('a' + i)), Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})}, Rate: r}
	}
	return t
}

func TestScheduleRatesAndSpread(t *testing.T) {
	start := time.Unix(1000, 0)
	tg := targetsWithRates(10, 10, 10, 10, 100, 0, -1)
	s := NewSchedule(tg, start)
	if s.Len() != 5 {
		t.Fatalf("Len = %d, want 5 (rates <= 0 are never due)", s.Len())
	}
	count := make([]int, len(tg))
	var last time.Time
	prev := make([]time.Time, len(tg))
	end := start.Add(10 * time.Second)
	for {
		i, at, ok := s.Next()
		if !ok {
			t.Fatal("no next")
		}
		if !at.After(end) && at.Before(last) {
			t.Fatalf("time went back: %v after %v", at, last)
		}
		if !at.Before(end) {
			break
		}
		// Each target's probes are exactly one period apart.
		if !prev[i].IsZero() {
			want := time.Duration(float64(time.Second) / tg[i].Rate)
			if gap := at.Sub(prev[i]); gap != want {
				t.Fatalf("target %d: probes %v apart, want %v", i, gap, want)
			}
		}
		prev[i] = at
		last = at
		count[i]++
	}
	for i, want := range []int{100, 100, 100, 100, 1000, 0, 0} {
		if count[i] != want {
			t.Errorf("target %d: %d probes in 10 s, want %d", i, count[i], want)
		}
	}
	// The four 10/s targets are staggered: target i starts at i/7 of its
	// 100 ms period, so none share an instant.
	s2 := NewSchedule(targetsWithRates(10, 10, 10, 10), start)
	seen := map[time.Time]bool{}
	for k := 0; k < 4; k++ {
		_, at, _ := s2.Next()
		if seen[at] {
			t.Fatalf("two targets due at %v", at)
		}
		seen[at] = true
		if at.Sub(start) >= 100*time.Millisecond {
			t.Fatalf("first probe at +%v, not within the first period", at.Sub(start))
		}
	}
}

func TestScheduleSkip(t *testing.T) {
	start := time.Unix(1000, 0)
	s := NewSchedule(targetsWithRates(10, 20), start)
	now := start.Add(time.Second)
	skipped := s.Skip(now)
	if skipped < 28 || skipped > 31 {
		t.Errorf("skipped %d probes in 1 s of 30/s", skipped)
	}
	if at, _ := s.Peek(); at.Before(now) {
		t.Errorf("after Skip, next due %v before now %v", at, now)
	}
}

func TestScheduleNextAllocs(t *testing.T) {
	s := NewSchedule(targetsWithRates(10, 20, 30, 40, 50), time.Unix(0, 0))
	if n := testing.AllocsPerRun(1000, func() { s.Next() }); n != 0 {
		t.Errorf("Next allocates %v times", n)
	}
}

func TestScheduleEmpty(t *testing.T) {
	s := NewSchedule(nil, time.Now())
	if _, _, ok := s.Next(); ok {
		t.Error("Next of an empty schedule")
	}
	if _, ok := s.Peek(); ok {
		t.Error("Peek of an empty schedule")
	}
	if s.Skip(time.Now()) != 0 {
		t.Error("Skip of an empty schedule")
	}
}

func BenchmarkScheduleNext(b *testing.B) {
	l, err := Parse(fleet(250, 40, ""))
	if err != nil {
		b.Fatal(err)
	}
	s := NewSchedule(l.Targets(l.Nodes[0]), time.Unix(0, 0))
	b.ReportAllocs()
	for b.Loop() {
		s.Next()
	}
}
