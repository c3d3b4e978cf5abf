//go:build race

package racesync

import "sync/atomic"

// Enabled reports whether the race detector is on.
const Enabled = true

// clock is the one address every Release and Acquire reads and writes:
// the race detector orders atomic operations on one address, so each
// takes in the clocks of all those before it.
var clock atomic.Uint64

// Release marks that packets are handed to the packet path: what the
// caller did before happens before what any later Acquire's caller does.
func Release() { clock.Add(1) }

// Acquire marks that received packets are taken in: what any earlier
// Release's caller did happens before what the caller does next.
func Acquire() { clock.Add(1) }
