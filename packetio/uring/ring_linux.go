package uring

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
)

// ring is one io_uring instance: its descriptor, the mapped submission and
// completion queues and what the kernel granted. It is used by one goroutine
// at a time (the Conn's driver); only close may come from elsewhere, after
// the driver is done.
type ring struct {
	fd       int
	flags    uint32 // setup flags in use
	features uint32
	sq       sq
	cq       cq
	sqMem    []byte // mappings, unmapped by close
	cqMem    []byte
	sqeMem   []byte
	enabled  bool // IORING_SETUP_R_DISABLED rings: enabled by the first enter
}

// ErrUnavailable is matched (with errors.Is) by errors from Listen when the
// kernel has no usable io_uring: not built in (ENOSYS), disabled by the
// kernel.io_uring_disabled sysctl or a seccomp filter (EPERM), or too old for
// what this package needs. It also matches packetio.ErrNotSupported, so that
// callers fall back to package udp.
var ErrUnavailable = fmt.Errorf("packetio/uring: io_uring unavailable: %w", packetio.ErrNotSupported)

// setupFlags are the flag sets newRing tries, best first, for the task-run
// mode asked for. A kernel that does not know a flag refuses the whole set
// with EINVAL and the next is tried.
func setupFlags(mode taskrunMode) []uint32 {
	const base = setupCQSize | setupClamp
	var sets []uint32
	if mode == taskrunDefer {
		sets = append(sets, base|setupSubmitAll|setupSingleIssuer|setupDeferTaskrun|setupRDisabled)
	}
	if mode == taskrunDefer || mode == taskrunCoop {
		sets = append(sets, base|setupSubmitAll|setupCoopTaskrun|setupTaskrunFlag)
	}
	return append(sets, base|setupSubmitAll, base)
}

// newRing creates a ring of sqEntries submission and cqEntries completion
// entries (powers of two), trying the setup flags of mode best first.
func newRing(sqEntries, cqEntries uint32, mode taskrunMode) (*ring, error) {
	var p params
	var fd int
	var errno unix.Errno
	for _, flags := range setupFlags(mode) {
		p = params{flags: flags, cqEntries: cqEntries}
		fd, errno = setup(sqEntries, &p)
		if errno != unix.EINVAL {
			break
		}
	}
	switch errno {
	case 0:
	case unix.ENOSYS:
		return nil, fmt.Errorf("%w: io_uring_setup: %w (kernel built without io_uring)", ErrUnavailable, errno)
	case unix.EPERM:
		return nil, fmt.Errorf("%w: io_uring_setup: %w (sysctl kernel.io_uring_disabled, or a seccomp filter)", ErrUnavailable, errno)
	default:
		return nil, fmt.Errorf("packetio/uring: io_uring_setup: %w", errno)
	}
	r := &ring{fd: fd, flags: p.flags, features: p.features, enabled: p.flags&setupRDisabled == 0}
	if p.features&featExtArg == 0 {
		r.close()
		return nil, fmt.Errorf("%w: no IORING_FEAT_EXT_ARG (Linux 5.11 or later is needed)", ErrUnavailable)
	}
	if err := r.mmap(&p); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// mmap maps the queues and points sq and cq into them.
func (r *ring) mmap(p *params) error {
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*int(sizeofCQE)
	single := p.features&featSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	const prot, flags = unix.PROT_READ | unix.PROT_WRITE, unix.MAP_SHARED | unix.MAP_POPULATE
	if r.sqMem, err = unix.Mmap(r.fd, offSQRing, sqSize, prot, flags); err != nil {
		return fmt.Errorf("packetio/uring: mmap SQ ring: %w", err)
	}
	if single {
		r.cqMem = r.sqMem
	} else if r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, prot, flags); err != nil {
		return fmt.Errorf("packetio/uring: mmap CQ ring: %w", err)
	}
	if r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*int(sizeofSQE), prot, flags); err != nil {
		return fmt.Errorf("packetio/uring: mmap SQEs: %w", err)
	}
	r.sq.init(r.sqMem, r.sqeMem, &p.sqOff)
	r.cq.init(r.cqMem, &p.cqOff)
	return nil
}

// close unmaps the queues and closes the descriptor; the kernel cancels
// what is still outstanding.
func (r *ring) close() error {
	r.sq = sq{}
	r.cq = cq{}
	if r.sqeMem != nil {
		unix.Munmap(r.sqeMem)
	}
	if r.cqMem != nil && &r.cqMem[0] != &r.sqMem[0] {
		unix.Munmap(r.cqMem)
	}
	if r.sqMem != nil {
		unix.Munmap(r.sqMem)
	}
	r.sqMem, r.cqMem, r.sqeMem = nil, nil, nil
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	if err != nil {
		return fmt.Errorf("packetio/uring: close ring: %w", err)
	}
	return nil
}

// enable enables a ring created disabled (IORING_SETUP_R_DISABLED), making
// the calling thread its single issuer.
func (r *ring) enable() error {
	if r.enabled {
		return nil
	}
	if e := register(r.fd, registerEnableRing, nil, 0); e != 0 {
		return fmt.Errorf("packetio/uring: enable ring: %w", e)
	}
	r.enabled = true
	return nil
}

// submit hands the queued SQEs to the kernel and, with wait > 0, waits
// until the CQ holds at least wait completions or the timeout (when ts is
// not nil) passes. It returns how many SQEs the kernel took. EINTR is
// returned to the caller, which decides whether to retry.
func (r *ring) submit(wait uint32, arg *getEventsArg) (int, unix.Errno) {
	if !r.enabled {
		if err := r.enable(); err != nil {
			return 0, unix.EBADFD
		}
	}
	r.cq.release()
	n := r.sq.flushTail()
	var flags uint32
	if wait > 0 || r.needEnter() {
		flags |= enterGetEvents
	}
	if arg != nil {
		flags |= enterExtArg
	}
	if n == 0 && flags == 0 {
		return 0, 0
	}
	got, errno := enter(r.fd, n, wait, flags, arg)
	return got, errno
}

// needEnter tells whether the kernel has completions to post that only an
// io_uring_enter with GETEVENTS brings into the CQ: an overflow backlog, or
// task work the kernel asks this ring's user to run.
func (r *ring) needEnter() bool {
	f := r.sq.kflags()
	if f&sqCQOverflow != 0 {
		return true
	}
	if r.flags&setupDeferTaskrun != 0 {
		return true // completions are posted only in io_uring_enter
	}
	return f&sqTaskrun != 0
}

// supported reports which opcodes the kernel supports (IORING_REGISTER_PROBE).
func (r *ring) supported(ops ...uint8) (bool, error) {
	var pr probe
	if e := register(r.fd, registerProbe, unsafe.Pointer(&pr), uintptr(len(pr.ops))); e != 0 {
		if e == unix.EINVAL {
			return false, nil // no probe: Linux < 5.6, too old anyway
		}
		return false, fmt.Errorf("packetio/uring: probe: %w", e)
	}
	for _, op := range ops {
		if int(op) >= len(pr.ops) || op > pr.lastOp || pr.ops[op].flags&probeOpSupported == 0 {
			return false, nil
		}
	}
	return true, nil
}

// cancelAll cancels every outstanding request and waits until each is
// done (IORING_REGISTER_SYNC_CANCEL, Linux 6.0), so that the kernel no
// longer writes into memory they point at.
func (r *ring) cancelAll() error {
	reg := syncCancelReg{fd: -1, flags: cancelAny | cancelAll, timeout: unix.Timespec{Sec: -1, Nsec: -1}}
	for range 16 {
		n, e := registerN(r.fd, registerSyncCancel, unsafe.Pointer(&reg), 1)
		switch e {
		case 0:
			if n == 0 {
				return nil
			}
			continue // some were cancelled: look again
		case unix.ENOENT:
			return nil
		case unix.EINTR, unix.EALREADY:
			continue
		default:
			return fmt.Errorf("packetio/uring: cancel outstanding requests: %w", e)
		}
	}
	return errors.New("packetio/uring: cancel outstanding requests: still busy")
}
