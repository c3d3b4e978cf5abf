package bench

// haveTSC: the processor has a time-stamp counter, read by rdtsc.
const haveTSC = true

// rdtsc returns the time-stamp counter.
func rdtsc() int64
