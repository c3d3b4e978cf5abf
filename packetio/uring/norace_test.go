//go:build linux && !race

package uring_test

const raceEnabled = false
