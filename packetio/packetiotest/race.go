//go:build race

package packetiotest

const raceEnabled = true
