package uring

// Offloads reports whether the Conn uses GSO and GRO, and why not when it
// does not. GSO may turn off while the Conn runs (a device that cannot
// checksum in hardware makes the kernel refuse GSO with EIO before Linux
// 6.11); it is safe to call from any goroutine.
func (c *Conn) Offloads() OffloadStatus { return c.off.Status() }
