package bench

import (
	"testing"
	"time"
)

// TestClock: the bench clock agrees with the monotonic clock within 0.5%
// over 50 ms and never goes back, whether it reads the TSC or not.
func TestClock(t *testing.T) {
	c := newClock()
	t.Logf("TSC: %v (%.4f ns a tick)", c.ns != 0, c.ns)
	start := time.Now()
	a := c.now()
	prev := a
	for time.Since(start) < 50*time.Millisecond {
		n := c.now()
		if n < prev {
			t.Fatalf("clock went back: %d after %d", n, prev)
		}
		prev = n
	}
	mono := time.Since(start)
	got := time.Duration(c.now() - a)
	if d := float64(got-mono) / float64(mono); d > 0.005 || d < -0.005 {
		t.Errorf("clock: %v over %v of the monotonic clock", got, mono)
	}
}

func BenchmarkClock(b *testing.B) {
	c := newClock()
	var sink int64
	for b.Loop() {
		sink += c.now()
	}
	_ = sink
}
