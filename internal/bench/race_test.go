//go:build race

package bench

// raceEnabled: the race detector is on. WRITE latency polls memory that the
// device's driver writes from another goroutine with no synchronization the
// detector sees (a remote WRITE gives the target none: that is the protocol,
// as in perftest), so its tests skip.
const raceEnabled = true
