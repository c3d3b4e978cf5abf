//go:build linux && cgo && ibverbs

package main

import (
	"os"
	"runtime"
	"time"

	"github.com/goroce/goroce/provider/soft"
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
	oneProc = runtime.GOMAXPROCS(0) == 1
}

// oneProc: the Go side runs on one processor.
var oneProc bool

// Taking turns needs the program's thread to let go of the processor.
// A thread that calls in through cgo keeps it from one call to the next
// (the runtime counts the C code between them as a system call that keeps
// changing, and never takes the processor back from one), and no goroutine
// is scheduled during a call that does not block: the device's driver,
// once a poll has woken it (soft.Device.DriverParked), then waited for the
// runtime's 10 ms preemption, in ib_write_bw 16 times a run, and 64 KiB
// writes reached half goroce bench's bandwidth. So a poll that finds
// nothing while the driver holds the packet path yields to it
// (runtime.Gosched: the driver's round runs on another thread, and the
// program's thread has the processor back when the driver blocks or
// yields), and otherwise the program's thread receives in line itself, as
// a Go program's poll does.
func yieldToDriver(d *soft.Device) bool {
	if !oneProc || d == nil || !d.DriverParked() {
		return false
	}
	runtime.Gosched()
	return true
}

// driverSpin is how long a device's driver polls after activity before it
// parks in the packet path (soft.Options.Spin; the default is 50 µs), on
// one processor. A program's thread polling in a loop takes the packets in
// line while the driver, runnable, waits for the processor; once the
// driver has parked, the next empty poll wakes it and yields to it. Driven
// by such a thread, the driver runs only when the thread yields or the
// runtime preempts it, and a longer spin makes it park less often between
// those turns (ib_write_bw of 64 KiB against goroce bench in interleaved
// rounds: 0.72 of its bandwidth with 50 µs, 0.91 with 1 ms, the medians of
// five and four rounds). Keeping it from parking altogether (counting
// every poll as activity) was worse, 0.6 against 0.85 in the same
// interleaved rounds: a driver that never parks is always runnable, and a
// call of the program's thread into Go that finds it on the processor
// waits for it to give it back. An idle program's driver parks
// 1 ms after the last activity. With more processors the driver has its
// own and spins as long as elsewhere.
func driverSpin() time.Duration {
	if oneProc {
		return time.Millisecond
	}
	return 0
}
