//go:build linux && cgo && ibverbs

package ibverbs

import (
	"fmt"
	"syscall"

	"github.com/goroce/goroce/verbs"
)

// Error is a failed libibverbs call: the verb and the errno it returned (or
// set). It matches both the errno and a verbs sentinel with errors.Is.
type Error struct {
	Verb  string        // e.g. "ibv_modify_qp"
	Errno syscall.Errno // e.g. EINVAL
	What  string        // what the call was about, or ""
	kind  error         // the verbs sentinel
}

func (e *Error) Error() string {
	if e.What != "" {
		return fmt.Sprintf("ibverbs: %s (%s): %v", e.Verb, e.What, e.Errno)
	}
	return fmt.Sprintf("ibverbs: %s: %v", e.Verb, e.Errno)
}

// Unwrap returns the errno and the verbs sentinel.
func (e *Error) Unwrap() []error {
	if e.kind == nil {
		return []error{e.Errno}
	}
	return []error{e.Errno, e.kind}
}

// verbErr makes the error of a verb that failed with errno. Posting verbs
// report a full queue as ENOMEM and a malformed request as EINVAL; other
// verbs report a bad argument as EINVAL and exhaustion as ENOMEM.
func verbErr(verb string, errno int, what string) error {
	if errno == 0 {
		errno = int(syscall.EIO)
	}
	e := &Error{Verb: verb, Errno: syscall.Errno(errno), What: what}
	post := verb == "ibv_post_send" || verb == "ibv_post_recv" || verb == "ibv_post_srq_recv"
	switch e.Errno {
	case syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.EPROTONOSUPPORT:
		e.kind = verbs.ErrNotSupported
	case syscall.ENOMEM, syscall.ENOSPC:
		if post {
			e.kind = verbs.ErrQueueFull
		} else {
			e.kind = verbs.ErrResourceLimit
		}
	case syscall.EINVAL:
		if post {
			e.kind = verbs.ErrInvalidWR
		} else {
			e.kind = verbs.ErrInvalidAttr
		}
	case syscall.ENODEV, syscall.ENXIO:
		e.kind = verbs.ErrNoDevice
	case syscall.EBUSY: // ibv_destroy_* and ibv_dealloc_pd of an object in use
		e.kind = verbs.ErrBusy
	}
	return e
}
