//go:build linux && race

package uring_test

const raceEnabled = true
