package bench

import (
	"os"
	"strings"
	"sync"
	"time"
)

// clock is the time since a fixed start, in nanoseconds: monotonic and
// allocation-free. Where the processor's time-stamp counter runs at a
// constant rate in every state (Linux's constant_tsc and nonstop_tsc, the
// counter perftest reads with get_cycles) it reads that, scaled by a rate
// calibrated once against the monotonic clock: about 12 ns a read on this
// project's virtual machines, against 29 for the monotonic clock (a vDSO
// call), and a bandwidth test reads it once per message, as perftest does.
// Elsewhere it reads the monotonic clock.
type clock struct {
	t0   time.Time
	tsc0 int64
	ns   float64 // nanoseconds per TSC tick; 0: the monotonic clock
}

func newClock() clock {
	c := clock{ns: tscRate()}
	if c.ns != 0 {
		c.tsc0 = rdtsc()
	}
	c.t0 = time.Now()
	return c
}

func (c clock) now() int64 {
	if c.ns == 0 {
		return int64(time.Since(c.t0))
	}
	return int64(float64(rdtsc()-c.tsc0) * c.ns)
}

// tscRate returns the nanoseconds per TSC tick, or 0 where the clock must
// not use the TSC. It calibrates once, over about 20 ms.
var tscRate = sync.OnceValue(func() float64 {
	if !haveTSC || !invariantTSC() {
		return 0
	}
	// Each end of the interval: the monotonic clock read between two TSC
	// reads, the tightest of a few pairs (a preemption between them
	// would skew one).
	sample := func() (tsc int64, t time.Time) {
		best := int64(-1)
		for range 5 {
			a := rdtsc()
			now := time.Now()
			b := rdtsc()
			if d := b - a; best < 0 || d < best {
				best, tsc, t = d, a+d/2, now
			}
		}
		return tsc, t
	}
	c0, t0 := sample()
	for time.Since(t0) < 20*time.Millisecond {
	}
	c1, t1 := sample()
	if c1 <= c0 {
		return 0
	}
	return float64(t1.Sub(t0)) / float64(c1-c0)
})

// invariantTSC reports whether Linux says the TSC ticks at a constant rate
// whatever the processor's frequency and sleep state.
func invariantTSC() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "flags") {
			f := " " + line + " "
			return strings.Contains(f, " constant_tsc ") && strings.Contains(f, " nonstop_tsc ")
		}
	}
	return false
}
