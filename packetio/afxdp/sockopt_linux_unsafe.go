//go:build linux

package afxdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// golang.org/x/sys/unix has the AF_XDP constants and structures but no
// setsockopt/getsockopt wrappers for the structured options, so these two
// make the system calls directly.

func setsockoptPtr(fd, level, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockoptPtr(fd, level, opt int, p unsafe.Pointer, n uintptr) error {
	l := uint32(n)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

func setUmemReg(fd int, r *unix.XDPUmemReg) error {
	return setsockoptPtr(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(r), unsafe.Sizeof(*r))
}

func getMmapOffsets(fd int) (off unix.XDPMmapOffsets, err error) {
	err = getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	return off, err
}

func getStatistics(fd int) (st unix.XDPStatistics, err error) {
	err = getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}

func getOptions(fd int) (flags uint32, err error) {
	err = getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_OPTIONS, unsafe.Pointer(&flags), unsafe.Sizeof(flags))
	return flags, err
}

// kickTx asks the kernel to process the TX ring (sendto with no data). It
// and kickRx never block (MSG_DONTWAIT), so they are raw system calls, which
// the Go scheduler does not see: see packetio/udp's sendmmsg for why that is
// cheaper.
func kickTx(fd int) unix.Errno {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// kickRx asks the kernel to look at the fill ring (recvfrom with no buffer).
func kickRx(fd int) unix.Errno {
	_, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

const (
	sizeofDesc = unsafe.Sizeof(unix.XDPDesc{})
	sizeofAddr = unsafe.Sizeof(uint64(0))
)
