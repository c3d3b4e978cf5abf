//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/goroce/goroce/verbs"
)

// CompChannel is a completion channel (struct ibv_comp_channel).
type CompChannel struct {
	ctx   *Context
	life  sync.RWMutex // guards ch: Wait's tries hold it for reading
	ch    *C.struct_ibv_comp_channel
	f     *os.File
	mu    sync.Mutex // guards cqs and woken
	cqs   map[*C.struct_ibv_cq]*CQ
	woken []*CQ // CQs destroyed or failed, for waiters (wake)
}

// CreateCompChannel creates a completion channel (ibv_create_comp_channel).
func (c *Context) CreateCompChannel() (verbs.CompChannel, error) {
	cc, err := c.enter()
	if err != nil {
		return nil, err
	}
	defer c.leave()
	ch, errno := C.ibv_create_comp_channel(cc)
	if ch == nil {
		return nil, verbErr("ibv_create_comp_channel", callErrno(errno), "")
	}
	f, err := pollable(int(ch.fd), "comp_channel")
	if err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, err
	}
	cch := &CompChannel{ctx: c, ch: ch, f: f, cqs: map[*C.struct_ibv_cq]*CQ{}}
	if !c.track(cch) {
		C.ibv_destroy_comp_channel(ch)
		f.Close()
		return nil, c.errClosed()
	}
	return cch, nil
}

func (c *CompChannel) errDestroyed() error {
	return fmt.Errorf("ibverbs: completion channel: %w", verbs.ErrDestroyed)
}

// Wait waits for an event of an armed CQ (ibv_get_cq_event), acknowledges
// it (ibv_ack_cq_events) and returns the CQ, or ctx's error when ctx ends
// first. Only the waiting goroutine blocks. Destroy and the context's
// Close wake the waiters with an error matching verbs.ErrDestroyed.
func (c *CompChannel) Wait(ctx context.Context) (verbs.CQ, error) {
	if c.ctx == nil {
		return nil, fmt.Errorf("ibverbs: completion channel not made by CreateCompChannel: %w", verbs.ErrInvalidAttr)
	}
	c.life.RLock()
	f := c.f
	alive := c.ch != nil
	c.life.RUnlock()
	if !alive {
		return nil, c.errDestroyed()
	}
	var cq *C.struct_ibv_cq
	var woken *CQ
	err := waitReadable(ctx, f, func() (bool, error) {
		if woken = c.takeWoken(); woken != nil {
			return true, nil
		}
		c.life.RLock()
		defer c.life.RUnlock()
		if c.ch == nil {
			return false, c.errDestroyed()
		}
		rc := C.goroce_get_cq_event(c.ch, &cq)
		if rc == 0 {
			return true, nil
		}
		if syscall.Errno(rc) == syscall.EAGAIN {
			return false, nil
		}
		return false, verbErr("ibv_get_cq_event", int(rc), "")
	})
	if err != nil {
		c.life.RLock()
		gone := c.ch == nil
		c.life.RUnlock()
		if gone && ctx.Err() == nil { // Destroy closed the file under the wait
			return nil, c.errDestroyed()
		}
		return nil, err
	}
	if woken != nil {
		return woken, nil
	}
	c.mu.Lock()
	q := c.cqs[cq]
	c.mu.Unlock()
	if q == nil {
		return nil, fmt.Errorf("ibverbs: event of a destroyed CQ: %w", verbs.ErrDestroyed)
	}
	return q, nil
}

// Destroy destroys the channel (ibv_destroy_comp_channel) and wakes its
// waiters. While CQs report to it libibverbs refuses (EBUSY): the error
// matches verbs.ErrBusy and the channel stays. Destroying twice, or after
// Close, returns nil.
func (c *CompChannel) Destroy() error {
	if c.ctx == nil {
		return nil
	}
	c.life.Lock()
	if c.ch == nil {
		c.life.Unlock()
		return nil
	}
	if rc, errno := C.ibv_destroy_comp_channel(c.ch); rc != 0 {
		c.life.Unlock()
		return verbErr("ibv_destroy_comp_channel", rcErrno(int(rc), errno), "")
	}
	c.ch = nil
	c.life.Unlock()
	c.f.Close() // wakes the waiters (after the unlock: Close waits for them)
	c.ctx.untrack(c)
	return nil
}

// Close is Destroy (io.Closer).
func (c *CompChannel) Close() error { return c.Destroy() }

func (c *CompChannel) rank() int { return 5 }

func (c *CompChannel) kill() {
	c.life.Lock()
	if c.ch == nil {
		c.life.Unlock()
		return
	}
	C.ibv_destroy_comp_channel(c.ch)
	c.ch = nil
	c.life.Unlock()
	c.f.Close()
}
