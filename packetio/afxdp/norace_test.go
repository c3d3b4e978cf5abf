//go:build linux && !race

package afxdp_test

const raceEnabled = false
