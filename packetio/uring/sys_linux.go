package uring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The io_uring ABI (include/uapi/linux/io_uring.h), written out by hand:
// golang.org/x/sys/unix has the system call numbers but none of the
// structures or constants, and no Go io_uring binding is available from the
// module proxy.

// io_uring_setup flags.
const (
	setupCQSize        = 1 << 3
	setupClamp         = 1 << 4
	setupRDisabled     = 1 << 6
	setupSubmitAll     = 1 << 7
	setupCoopTaskrun   = 1 << 8
	setupTaskrunFlag   = 1 << 9
	setupSingleIssuer  = 1 << 12
	setupDeferTaskrun  = 1 << 13
	featSingleMmap     = 1 << 0
	featNoDrop         = 1 << 1
	featExtArg         = 1 << 8
	offSQRing          = 0
	offCQRing          = 0x8000000
	offSQEs            = 0x10000000
	sqNeedWakeup       = 1 << 0
	sqCQOverflow       = 1 << 1
	sqTaskrun          = 1 << 2
	enterGetEvents     = 1 << 0
	enterExtArg        = 1 << 3
	registerBuffers    = 0
	registerProbe      = 8
	registerEnableRing = 12
	registerPbufRing   = 22
	registerSyncCancel = 24
)

// Opcodes, SQE flags and CQE flags.
const (
	opNop        = 0
	opSendmsg    = 9
	opRecvmsg    = 10
	opTimeout    = 11
	opRead       = 22
	opSendZC     = 47
	opLast       = 48     // one past the last opcode this package knows
	sqeIOLink    = 1 << 2 // IOSQE_IO_LINK: the next SQE starts when this one completes
	sqeBufSelect = 1 << 5

	recvMultishot = 1 << 1 // in sqe.ioprio

	cqeFBuffer = 1 << 0
	cqeFMore   = 1 << 1

	cancelAll = 1 << 0
	cancelAny = 1 << 2

	probeOpSupported = 1 << 0
)

// params is struct io_uring_params.
type params struct {
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFd         uint32
	resv         [3]uint32
	sqOff        sqringOffsets
	cqOff        cqringOffsets
}

// sqringOffsets is struct io_sqring_offsets.
type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// cqringOffsets is struct io_cqring_offsets.
type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// sqe is struct io_uring_sqe (64 bytes).
type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64 // addr2
	addr        uint64
	len         uint32
	opFlags     uint32 // msg_flags, timeout_flags, ...
	userData    uint64
	bufIndex    uint16 // buf_index or buf_group
	personality uint16
	fileIndex   uint32 // splice_fd_in, file_index, addr_len
	addr3       uint64
	_           uint64
}

// cqe is struct io_uring_cqe (16 bytes).
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// getEventsArg is struct io_uring_getevents_arg.
type getEventsArg struct {
	sigmask   uint64
	sigmaskSz uint32
	pad       uint32
	ts        uint64
}

// bufReg is struct io_uring_buf_reg.
type bufReg struct {
	ringAddr    uint64
	ringEntries uint32
	bgid        uint16
	flags       uint16
	resv        [3]uint64
}

// syncCancelReg is struct io_uring_sync_cancel_reg.
type syncCancelReg struct {
	addr    uint64
	fd      int32
	flags   uint32
	timeout unix.Timespec
	opcode  uint8
	pad     [7]uint8
	pad2    [3]uint64
}

// recvmsgOut is struct io_uring_recvmsg_out, at the start of each buffer a
// multishot RECVMSG fills.
type recvmsgOut struct {
	namelen    uint32
	controllen uint32
	payloadlen uint32
	flags      uint32
}

// probeOp is struct io_uring_probe_op; probe is struct io_uring_probe with
// room for opLast ops.
type probeOp struct {
	op    uint8
	resv  uint8
	flags uint16
	resv2 uint32
}

type probe struct {
	lastOp uint8
	opsLen uint8
	resv   uint16
	resv2  [3]uint32
	ops    [opLast]probeOp
}

const (
	sizeofSQE        = unsafe.Sizeof(sqe{})
	sizeofCQE        = unsafe.Sizeof(cqe{})
	sizeofRecvmsgOut = unsafe.Sizeof(recvmsgOut{})
)

func setup(entries uint32, p *params) (int, unix.Errno) {
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	return int(fd), e
}

// enter is io_uring_enter. arg is nil or an *getEventsArg (with
// enterExtArg in flags).
func enter(fd int, toSubmit, minComplete uint32, flags uint32, arg *getEventsArg) (int, unix.Errno) {
	var size uintptr
	if arg != nil {
		size = unsafe.Sizeof(*arg)
	}
	if minComplete == 0 {
		// Nothing to wait for: a raw system call, which the Go scheduler
		// does not see, as packetio/udp's sendmmsg and recvmmsg (see
		// there why that is cheaper).
		n, _, e := unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit), 0, uintptr(flags), uintptr(unsafe.Pointer(arg)), size)
		return int(n), e
	}
	n, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit), uintptr(minComplete), uintptr(flags), uintptr(unsafe.Pointer(arg)), size)
	return int(n), e
}

func register(fd int, op uintptr, arg unsafe.Pointer, n uintptr) unix.Errno {
	_, e := registerN(fd, op, arg, n)
	return e
}

// registerN is io_uring_register returning its result too.
func registerN(fd int, op uintptr, arg unsafe.Pointer, n uintptr) (int, unix.Errno) {
	r, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(fd), op, uintptr(arg), n, 0, 0)
	return int(r), e
}
