//go:build linux

package udp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr. Go lays it out as C does on every Linux
// architecture: the msghdr, the length, then padding to the msghdr's
// alignment.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// sockaddrInet4 is struct sockaddr_in, with the port kept in network byte
// order as bytes.
type sockaddrInet4 struct {
	family uint16
	port   [2]byte
	addr   [4]byte
	zero   [8]byte
}

const sizeofSockaddrInet4 = unsafe.Sizeof(sockaddrInet4{})

// recvmmsg receives into hs on a non-blocking socket.
func recvmmsg(fd uintptr, hs []mmsghdr) (int, unix.Errno) {
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(unsafe.SliceData(hs))), uintptr(len(hs)), 0, 0, 0)
	return int(n), e
}

// sendmmsg sends hs on a non-blocking socket.
func sendmmsg(fd uintptr, hs []mmsghdr) (int, unix.Errno) {
	n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(unsafe.SliceData(hs))), uintptr(len(hs)), 0, 0, 0)
	return int(n), e
}

// setName points h's address at sa.
func (h *mmsghdr) setName(sa *sockaddrInet4) {
	h.hdr.Name = (*byte)(unsafe.Pointer(sa))
	h.hdr.Namelen = uint32(sizeofSockaddrInet4)
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

// setBuf points iov at b[:len(b)].
func setBuf(iov *unix.Iovec, b []byte) {
	iov.Base = unsafe.SliceData(b)
	iov.SetLen(len(b))
}

// parseControl reads the IP_PKTINFO destination address and the IP_TOS byte
// from received control messages. It does not allocate.
func parseControl(b []byte) (dst [4]byte, hasDst bool, tos uint8) {
	const align = unix.SizeofPtr
	for len(b) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(unsafe.SliceData(b)))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(b) {
			break
		}
		data := b[unix.CmsgLen(0):l]
		if h.Level == unix.IPPROTO_IP {
			switch h.Type {
			case unix.IP_PKTINFO: // struct in_pktinfo: ifindex, spec_dst, addr (the header's destination)
				if len(data) >= unix.SizeofInet4Pktinfo {
					copy(dst[:], data[8:12])
					hasDst = true
				}
			case unix.IP_TOS:
				if len(data) >= 1 {
					tos = data[0]
				}
			}
		}
		l = (l + align - 1) &^ (align - 1)
		if l >= len(b) {
			break
		}
		b = b[l:]
	}
	return dst, hasDst, tos
}

// controlSpace is the receive control buffer per message, in bytes: room for
// IP_PKTINFO (CmsgSpace(12): 32 bytes on 64-bit) and IP_TOS (CmsgSpace(1): 24)
// and a little more.
const controlSpace = 96
