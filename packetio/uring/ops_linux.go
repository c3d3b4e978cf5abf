package uring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// What a completion is for: the top byte of user_data. Sends also carry the
// Transmit's generation (bits 32..55) so that a completion left over from
// an aborted Transmit is never taken for a later one's; bits 0..31 are an
// index (the receive slot, the send's place in the batch).
const (
	kindRecv = 1
	kindSend = 2
	kindWake = 3
	kindNop  = 4
)

func userData(kind uint8, gen uint32, idx uint32) uint64 {
	return uint64(kind)<<56 | uint64(gen&0xFFFFFF)<<32 | uint64(idx)
}

func udKind(u uint64) uint8 { return uint8(u >> 56) }
func udGen(u uint64) uint32 { return uint32(u>>32) & 0xFFFFFF }
func udIdx(u uint64) uint32 { return uint32(u) }

// prepRecvmsgMultishot fills s with a multishot RECVMSG (Linux 6.0) on fd
// taking buffers from group bgid: one completion per datagram, each buffer
// starting with a recvmsgOut, then msg.Namelen bytes of address, then
// msg.Controllen bytes of control messages, then the payload. msg has no
// iovec.
func prepRecvmsgMultishot(s *sqe, fd int, msg *unix.Msghdr, bgid uint16, ud uint64) {
	s.opcode = opRecvmsg
	s.fd = int32(fd)
	s.addr = uint64(uintptr(unsafe.Pointer(msg)))
	s.len = 1
	s.ioprio = recvMultishot
	s.opFlags = unix.MSG_TRUNC // recvmsgOut.payloadlen: the whole length, also of a train cut short
	s.flags = sqeBufSelect
	s.bufIndex = bgid
	s.userData = ud
}

// prepRecvmsg fills s with a single-shot RECVMSG on fd into msg's buffers;
// the kernel writes the lengths and flags back into msg. With MSG_TRUNC
// the result is the datagram's whole length, also when the buffer was too
// short for it.
func prepRecvmsg(s *sqe, fd int, msg *unix.Msghdr, ud uint64) {
	s.opcode = opRecvmsg
	s.fd = int32(fd)
	s.addr = uint64(uintptr(unsafe.Pointer(msg)))
	s.len = 1
	s.opFlags = unix.MSG_TRUNC
	s.userData = ud
}

// prepSendmsg fills s with a SENDMSG on fd of msg (address, iovecs and,
// for a GSO message, a UDP_SEGMENT cmsg).
func prepSendmsg(s *sqe, fd int, msg *unix.Msghdr, ud uint64) {
	s.opcode = opSendmsg
	s.fd = int32(fd)
	s.addr = uint64(uintptr(unsafe.Pointer(msg)))
	s.len = 1
	s.userData = ud
}

// prepRead fills s with a READ of len(b) bytes from fd at the current
// position (offset -1).
func prepRead(s *sqe, fd int, b []byte, ud uint64) {
	s.opcode = opRead
	s.fd = int32(fd)
	s.off = ^uint64(0)
	s.addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	s.len = uint32(len(b))
	s.userData = ud
}

// prepNop fills s with a NOP (tests of the rings).
func prepNop(s *sqe, ud uint64) {
	s.opcode = opNop
	s.userData = ud
}
