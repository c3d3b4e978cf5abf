//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"fmt"
	"sync"

	"github.com/goroce/goroce/verbs"
)

// PD is a protection domain (struct ibv_pd).
type PD struct {
	ctx *Context
	mu  sync.Mutex // guards pd: held by the verbs that use it
	pd  *C.struct_ibv_pd
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (c *Context) AllocPD() (verbs.PD, error) {
	cc, err := c.enter()
	if err != nil {
		return nil, err
	}
	defer c.leave()
	pd, errno := C.ibv_alloc_pd(cc)
	if pd == nil {
		return nil, verbErr("ibv_alloc_pd", callErrno(errno), "")
	}
	p := &PD{ctx: c, pd: pd}
	if !c.track(p) {
		C.ibv_dealloc_pd(pd)
		return nil, c.errClosed()
	}
	return p, nil
}

func (p *PD) errDestroyed() error { return fmt.Errorf("ibverbs: PD: %w", verbs.ErrDestroyed) }

// Dealloc releases the PD (ibv_dealloc_pd). While QPs, MRs, SRQs or AHs of
// the PD live, the kernel refuses (EBUSY): the error matches verbs.ErrBusy
// and the PD stays. Deallocating twice, or after Close, returns nil.
func (p *PD) Dealloc() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil
	}
	if rc, errno := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return verbErr("ibv_dealloc_pd", rcErrno(int(rc), errno), "")
	}
	p.pd = nil
	p.ctx.untrack(p)
	return nil
}

// Close is Dealloc (io.Closer).
func (p *PD) Close() error { return p.Dealloc() }

func (p *PD) rank() int { return 6 }

func (p *PD) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd != nil {
		C.ibv_dealloc_pd(p.pd)
		p.pd = nil
	}
}
