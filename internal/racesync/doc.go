// Package racesync tells the race detector about the order the network
// gives a soft device's memory accesses, which it cannot see.
//
// A WRITE between two soft devices in one process crosses the kernel: the
// responder's driver goroutine copies the payload into its memory region
// and sends the ACK; the requester's driver receives it and completes the
// work request; the application polls the completion and reads the
// responder's memory. Each step happens after the one before, but the
// race detector knows only Go's synchronisation (channels, mutexes,
// atomics, and the read and write system calls of package syscall), not a
// datagram through sendmmsg and recvmmsg, an io_uring or an AF_XDP ring.
// Under -race it reported that correct program as a data race
// (TestReadAfterCompletion in provider/soft).
//
// Release, where a device hands packets to its packet path, and Acquire,
// where it takes received ones in, make every packet sent happen before
// every packet received thereafter, as package syscall does for its reads
// and writes: coarser than the network (a device's receive is ordered
// after sends it never got), which hides no race a program could have, as
// its accesses to a region a peer writes are ordered by completions that
// arrive over that network. Without the race detector both are empty and
// inlined away.
package racesync
