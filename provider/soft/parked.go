package soft

// DriverParked reports whether the device's driver goroutine is waiting in
// the packet path for packets, a timer or a wake-up, holding it: a Poll
// that finds its CQ empty then cannot receive in line, and wakes the driver
// instead. A thread that calls in through cgo (a C program's, polling its
// CQ in a loop) keeps its processor from one call to the next, and the Go
// scheduler does not run between calls: with GOMAXPROCS=1 the driver it
// woke runs only once that thread yields (runtime.Gosched), or after the
// runtime's 10 ms preemption. libgoroce-verbs.so yields when this reports
// true after an empty Poll.
func (d *Device) DriverParked() bool { return d.sleeping.Load() }
