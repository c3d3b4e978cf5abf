//go:build linux && cgo && ibverbs

package main

import (
	"errors"
	"syscall"

	"github.com/goroce/goroce/verbs"
)

// errno maps an error of the verbs API to the errno libibverbs returns for it.
func errno(err error) syscall.Errno {
	var e syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e
	case errors.Is(err, verbs.ErrBusy):
		return syscall.EBUSY
	case errors.Is(err, verbs.ErrResourceLimit), errors.Is(err, verbs.ErrQueueFull):
		return syscall.ENOMEM
	case errors.Is(err, verbs.ErrNotSupported):
		return syscall.EOPNOTSUPP
	case errors.Is(err, verbs.ErrNoDevice):
		return syscall.ENODEV
	}
	return syscall.EINVAL
}
