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

// The errno of a failed verb is read on the OS thread that ran the verb.
// A goroutine may move to another thread between two cgo calls, so a
// separate call after the verb could read another thread's errno. The verbs
// that report failure through errno are therefore called in cgo's two-value
// form, r, err := C.ibv_xxx(...): cmd/cgo documents that this form returns
// the C errno as the error, and the wrapper it generates (cmd/cgo/out.go)
// sets errno = 0 before the call and reads it right after, in the same C
// function on the same thread, returning it as a syscall.Errno (nil when 0).
// The shim's functions fold errno into their result in C for the same
// reason, and the verbs that return their error code need neither.

// callErrno is the errno of a verb called in cgo's two-value form: err's
// syscall.Errno, or 0 (verbErr then reports EIO).
func callErrno(err error) int {
	if e, ok := err.(syscall.Errno); ok {
		return int(e)
	}
	return 0
}

// rcErrno folds a verb's int result and the errno of its two-value call
// into 0 or a positive errno, as the shim's goroce_rc does in C: the verbs
// return an errno value, -1 with errno set, or a negative errno.
func rcErrno(rc int, err error) int {
	switch {
	case rc == 0:
		return 0
	case rc > 0:
		return rc
	case rc == -1 && callErrno(err) != 0:
		return callErrno(err)
	}
	return -rc
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
