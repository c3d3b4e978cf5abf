package packetio

// Prefault writes a zero into every page of b, which must be freshly
// allocated (still all zero), so that the kernel maps its pages now rather
// than one at a time on first use. A Conn's receive buffers are written
// first by the kernel inside recvmmsg, where each page not yet mapped costs a
// fault in the middle of the copy: on a virtual machine the first 2 MiB of
// GRO buffers took 5 ms to receive that way, the first window of a
// connection. Called at Listen, when nothing waits.
func Prefault(b []byte) {
	const page = 4096 // the smallest page size of Linux's architectures: touching more often is harmless
	for i := 0; i < len(b); i += page {
		b[i] = 0
	}
}
