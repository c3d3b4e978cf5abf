//go:build !race

package racesync

// Enabled reports whether the race detector is on.
const Enabled = false

// Release marks that packets are handed to the packet path (see the
// package comment). Without the race detector it does nothing.
func Release() {}

// Acquire marks that received packets are taken in (see the package
// comment). Without the race detector it does nothing.
func Acquire() {}
