//go:build linux

package udp

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio/internal/udpsock"
)

// mmsghdr is struct mmsghdr. Go lays it out as C does on every Linux
// architecture: the msghdr, the length, then padding to the msghdr's
// alignment.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// recvmmsg receives into hs on a non-blocking socket.
//
// It and sendmmsg are raw system calls (unix.RawSyscall6), which do not tell
// the Go scheduler that the thread is in the kernel. On a non-blocking socket
// they return within microseconds, and the scheduler's bookkeeping costs more
// than that: with unix.Syscall6 the runtime's monitor finds the processor
// "in a system call" on almost every 20 µs tick while packets flow, hands it
// to another thread and keeps waking threads (futex) to do so, which took
// more than a third of the processor time of a 64-byte WRITE stream and 1.5x
// its message rate (goroce bench write_bw -s 64 between two namespaces).
// The socket never blocks (Listen makes it non-blocking and the waits happen
// in the netpoller, pollwait.Epoll), so nothing here can hold a thread for
// long.
func recvmmsg(fd uintptr, hs []mmsghdr) (int, unix.Errno) {
	n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(unsafe.SliceData(hs))), uintptr(len(hs)), 0, 0, 0)
	return int(n), e
}

// sendmmsg sends hs on a non-blocking socket; a raw system call, as
// recvmmsg.
func sendmmsg(fd uintptr, hs []mmsghdr) (int, unix.Errno) {
	n, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(unsafe.SliceData(hs))), uintptr(len(hs)), 0, 0, 0)
	return int(n), e
}

// setName points h's address at sa (room for either family: the length
// of its address is set as it is filled).
func (h *mmsghdr) setName(sa *udpsock.Sockaddr) {
	h.hdr.Name = (*byte)(unsafe.Pointer(sa))
	h.hdr.Namelen = uint32(udpsock.SizeofSockaddr)
}

// setIov points h's only buffer at iov.
func (h *mmsghdr) setIov(iov *unix.Iovec) {
	h.hdr.Iov = iov
	h.hdr.SetIovlen(1)
}

// setControl points h's control buffer at b.
func (h *mmsghdr) setControl(b []byte) {
	h.hdr.Control = unsafe.SliceData(b)
	h.hdr.SetControllen(len(b))
}

// controlSpace is the receive control buffer per message, in bytes:
// udpsock's and a UDP_GRO cmsg (CmsgSpace(4): 24 bytes on 64-bit).
const controlSpace = udpsock.ControlSpace + udpsock.GROCmsgSpace
