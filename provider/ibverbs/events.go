//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/verbs"
)

// GetAsyncEvent waits for an asynchronous event of the device
// (ibv_get_async_event) and acknowledges it, or returns ctx's error.
func (c *Context) GetAsyncEvent(ctx context.Context) (verbs.AsyncEvent, error) {
	cc, err := c.enter()
	if err != nil {
		return verbs.AsyncEvent{}, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.leave()
		return verbs.AsyncEvent{}, c.errClosed()
	}
	if c.async == nil {
		f, err := pollable(int(cc.async_fd), "async_fd")
		if err != nil {
			c.mu.Unlock()
			c.leave()
			return verbs.AsyncEvent{}, err
		}
		c.async = f
	}
	f := c.async
	c.mu.Unlock()
	c.leave()
	var typ C.uint32_t
	var elem unsafe.Pointer
	var port C.int
	err = waitReadable(ctx, f, func() (bool, error) {
		cc, err := c.enter()
		if err != nil {
			return false, err
		}
		defer c.leave()
		rc := C.goroce_get_async_event(cc, &typ, &elem, &port)
		if rc == 0 {
			return true, nil
		}
		if syscall.Errno(rc) == syscall.EAGAIN {
			return false, nil
		}
		return false, verbErr("ibv_get_async_event", int(rc), "")
	})
	if err != nil {
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed && ctx.Err() == nil { // Close closed the file under the wait
			return verbs.AsyncEvent{}, c.errClosed()
		}
		return verbs.AsyncEvent{}, err
	}
	ev := verbs.AsyncEvent{Type: verbs.EventType(typ)}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ev.Type {
	case verbs.EventCQErr:
		if q := c.cqs[(*C.struct_ibv_cq)(elem)]; q != nil {
			q.failed.Store(true)
			ev.CQ = q
			if q.ch != nil {
				go q.ch.wake(q) // off c.mu: a PollWait on q returns its error
			}
		}
	case verbs.EventSRQErr, verbs.EventSRQLimitReached:
		if s := c.srqs[(*C.struct_ibv_srq)(elem)]; s != nil {
			ev.SRQ = s
		}
	case verbs.EventDeviceFatal:
	case verbs.EventPortActive, verbs.EventPortErr, verbs.EventLIDChange, verbs.EventPKeyChange,
		verbs.EventSMChange, verbs.EventClientReregister, verbs.EventGIDChange:
		ev.Port = uint8(port)
	default:
		if q := c.qps[(*C.struct_ibv_qp)(elem)]; q != nil {
			ev.QP = q
		}
	}
	return ev, nil
}

// pollable returns a file on a duplicate of fd, which is put in non-blocking
// mode (the duplicate shares the open file description, so the flag holds
// for libibverbs' reads of fd), registered with the Go runtime's poller.
func pollable(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("ibverbs: %s: non-blocking mode: %w", name, err)
	}
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ibverbs: %s: dup: %w", name, err)
	}
	return os.NewFile(uintptr(d), name), nil
}

// waitReadable calls try until it reports done, waiting for f to be readable
// between tries, until ctx ends.
func waitReadable(ctx context.Context, f *os.File, try func() (done bool, err error)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Unix(1, 0)) })
	}
	for {
		var terr error
		err = rc.Read(func(uintptr) bool {
			var done bool
			done, terr = try()
			return done || terr != nil
		})
		if terr != nil {
			err = terr
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if ctx.Err() != nil {
				f.SetReadDeadline(time.Time{})
				return ctx.Err()
			}
			// Another waiter's context ended: wait on.
			f.SetReadDeadline(time.Time{})
			continue
		}
		if stop != nil && !stop() {
			f.SetReadDeadline(time.Time{})
		}
		return err
	}
}
