//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"fmt"
	"sync"

	"github.com/goroce/goroce/verbs"
)

var (
	_ verbs.MWAllocator = (*PD)(nil)
	_ verbs.MWBinder    = (*QP)(nil)
	_ verbs.MW          = (*MW)(nil)
)

// MW is a memory window (struct ibv_mw).
type MW struct {
	ctx *Context
	mu  sync.Mutex // guards mw
	mw  *C.struct_ibv_mw
	typ verbs.MWType
}

// AllocMW allocates a memory window of type t (ibv_alloc_mw).
func (p *PD) AllocMW(t verbs.MWType) (verbs.MW, error) {
	if t != verbs.MWType1 && t != verbs.MWType2 {
		return nil, fmt.Errorf("ibverbs: memory window type %d: %w", t, verbs.ErrInvalidAttr)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil, p.errDestroyed()
	}
	mw, errno := C.ibv_alloc_mw(p.pd, C.enum_ibv_mw_type(t))
	if mw == nil {
		return nil, verbErr("ibv_alloc_mw", callErrno(errno), fmt.Sprintf("type %d", t))
	}
	w := &MW{ctx: p.ctx, mw: mw, typ: t}
	if !p.ctx.track(w) {
		C.ibv_dealloc_mw(mw)
		return nil, p.ctx.errClosed()
	}
	return w, nil
}

// RKey returns the window's remote key (its current one: a bind changes it).
func (w *MW) RKey() uint32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mw == nil {
		return 0
	}
	return uint32(w.mw.rkey)
}

// Type returns the window's type.
func (w *MW) Type() verbs.MWType { return w.typ }

// Dealloc releases the window (ibv_dealloc_mw). Twice, or after Close,
// returns nil.
func (w *MW) Dealloc() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mw == nil {
		return nil
	}
	if rc := C.goroce_rc(C.ibv_dealloc_mw(w.mw)); rc != 0 {
		return verbErr("ibv_dealloc_mw", int(rc), "")
	}
	w.mw = nil
	w.ctx.untrack(w)
	return nil
}

// Close is Dealloc (io.Closer).
func (w *MW) Close() error { return w.Dealloc() }

func (w *MW) rank() int { return 2 } // before the MRs it may be bound to

func (w *MW) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mw != nil {
		C.ibv_dealloc_mw(w.mw)
		w.mw = nil
	}
}

// BindMW binds a type 1 window (ibv_bind_mw) and returns its new key.
func (q *QP) BindMW(b *verbs.BindMWWR, wrid uint64, flags verbs.SendFlags) (uint32, error) {
	if b == nil {
		return 0, fmt.Errorf("ibverbs: BindMW without a bind: %w", verbs.ErrInvalidWR)
	}
	w, ok := b.MW.(*MW)
	if !ok || w == nil {
		return 0, fmt.Errorf("ibverbs: BindMW of a window of another provider: %w", verbs.ErrInvalidWR)
	}
	var mr *C.struct_ibv_mr
	if b.MR != nil {
		m, ok := b.MR.(*MR)
		if !ok || m == nil {
			return 0, fmt.Errorf("ibverbs: BindMW to a region of another provider: %w", verbs.ErrInvalidWR)
		}
		mr = m.mr
	}
	q.send.mu.Lock()
	defer q.send.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if q.qp == nil || w.mw == nil {
		return 0, fmt.Errorf("ibverbs: BindMW: %w", verbs.ErrDestroyed)
	}
	var rkey C.uint32_t
	if rc := C.goroce_bind_mw(q.qp, w.mw, mr, C.uint64_t(wrid), C.uint32_t(flags), C.uint64_t(b.Addr), C.uint64_t(b.Length), C.uint32_t(b.Access), &rkey); rc != 0 {
		return 0, verbErr("ibv_bind_mw", int(rc), fmt.Sprintf("QP %#x", q.num))
	}
	return uint32(rkey), nil
}

// bindOf fills the bind fields of a flat BIND_MW request.
func bindOf(g *C.struct_gsend, b *verbs.BindMWWR) error {
	if b == nil {
		return fmt.Errorf("ibverbs: BIND_MW without Bind: %w", verbs.ErrInvalidWR)
	}
	w, ok := b.MW.(*MW)
	m, ok2 := b.MR.(*MR)
	if !ok || w == nil || !ok2 || m == nil {
		return fmt.Errorf("ibverbs: BIND_MW of a window or to a region of another provider: %w", verbs.ErrInvalidWR)
	}
	g.mw, g.mr = w.mw, m.mr
	g.bind_addr, g.bind_length, g.bind_access, g.rkey = C.uint64_t(b.Addr), C.uint64_t(b.Length), C.uint32_t(b.Access), C.uint32_t(b.RKey)
	return nil
}

// capEx returns the device's extended capability flags (asked once).
func (c *Context) capEx() verbs.DeviceCap {
	c.awOnce.Do(func() {
		cc, err := c.enter()
		if err != nil {
			return
		}
		defer c.leave()
		c.capex = verbs.DeviceCap(C.goroce_cap_ex(cc))
	})
	return c.capex
}

// atomicWrite reports whether the device has ATOMIC_WRITE.
func (c *Context) atomicWrite() bool { return c.capEx()&verbs.DeviceCapAtomicWrite != 0 }
