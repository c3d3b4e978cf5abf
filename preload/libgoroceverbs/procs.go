//go:build linux && cgo && ibverbs

package main

import (
	"os"
	"runtime"
)

// The Go side of the program's process runs on one processor unless
// GOMAXPROCS says otherwise, as goroce bench does: a C program that polls
// its CQ in a loop enters Go at each poll, and the device's driver
// goroutine and those calls then take turns on one P instead of two
// spinning threads per process time-slicing on a machine without two free
// processors (ib_send_lat between two namespaces on two processors: a
// 10 µs average against 130 µs; ib_write_bw of 64 KiB within 15%).
func init() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
