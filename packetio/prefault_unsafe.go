package packetio

import "unsafe"

// Prefault writes a zero into every page of s, which must be freshly
// allocated (still all zero), so that the kernel maps its pages now rather
// than one at a time on first use. A Conn's receive buffers are written
// first by the kernel inside recvmmsg, where each page not yet mapped costs a
// fault in the middle of the copy: on a virtual machine the first 2 MiB of
// GRO buffers took 5 ms to receive that way, the first window of a
// connection. Called at Listen, when nothing waits; goroce bench uses it
// for its buffers and timestamp arrays too.
func Prefault[E any](s []E) {
	const page = 4096 // the smallest page size of Linux's architectures: touching more often is harmless
	var zero E
	step := max(1, page/int(unsafe.Sizeof(zero)))
	for i := 0; i < len(s); i += step {
		s[i] = zero
	}
}
