//go:build linux

package uring_test

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/packetio/uring"
)

const seccompChildEnv = "GOROCE_URING_SECCOMP_CHILD"

// When the kernel refuses io_uring (here a seccomp filter makes
// io_uring_setup fail with EPERM, as kernel.io_uring_disabled=2 or a
// container's profile does), Listen returns an error matching
// ErrUnavailable and packetio.ErrNotSupported, and the caller falls back to
// package udp. The filter is installed in a child process (it cannot be
// removed), which reports back through its exit status and output.
func TestUnavailableFallsBack(t *testing.T) {
	if os.Getenv(seccompChildEnv) == "1" {
		seccompChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailableFallsBack$", "-test.v")
	cmd.Env = append(os.Environ(), seccompChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	text := string(out)
	if strings.Contains(text, "SKIP-SECCOMP") {
		t.Skipf("cannot install a seccomp filter: %s", text)
	}
	if err != nil || !strings.Contains(text, "FALLBACK-OK") {
		t.Fatalf("child: %v\n%s", err, text)
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "uring: ") {
			t.Log(line)
		}
	}
}

// seccompChild refuses io_uring_setup with EPERM for the whole process,
// then opens a Conn the way a caller with a fallback does.
func seccompChild() {
	const (
		retErrno = 0x00050000 // SECCOMP_RET_ERRNO
		retAllow = 0x7fff0000 // SECCOMP_RET_ALLOW
		setMode  = 1          // SECCOMP_SET_MODE_FILTER
		tsync    = 1          // SECCOMP_FILTER_FLAG_TSYNC: every thread
	)
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_IO_URING_SETUP, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: retErrno | uint32(syscall.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: retAllow},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		println("SKIP-SECCOMP no_new_privs:", err.Error())
		os.Exit(0)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, setMode, tsync, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		println("SKIP-SECCOMP seccomp:", e.Error())
		os.Exit(0)
	}
	local := netip.MustParseAddr("127.0.7.31")
	var conn packetio.Conn
	c, err := uring.Listen(local, uring.Options{Port: uring.AnyPort})
	println("uring:", errString(err))
	switch {
	case err == nil:
		c.Close()
		println("FAIL: uring.Listen succeeded under a filter refusing io_uring_setup")
		os.Exit(1)
	case !errors.Is(err, uring.ErrUnavailable) || !errors.Is(err, packetio.ErrNotSupported) || !errors.Is(err, syscall.EPERM):
		println("FAIL: error does not match ErrUnavailable, packetio.ErrNotSupported and EPERM")
		os.Exit(1)
	}
	u, err := udp.Listen(local, udp.Options{Port: udp.AnyPort})
	if err != nil {
		println("FAIL: udp fallback:", err.Error())
		os.Exit(1)
	}
	conn = u
	conn.Close()
	println("FALLBACK-OK")
	os.Exit(0)
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
