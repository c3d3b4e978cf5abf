package soft

import (
	"fmt"
	"sync/atomic"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/verbs"
)

// The soft device's capability flags: memory windows (type 1, and type 2
// as 2B: bound to one QP), fast registration with LOCAL_INV and
// SEND_WITH_INV, ATOMIC_WRITE, and FLUSH of global visibility (its memory
// is not persistent: a region granting FLUSH_PERSISTENT is refused, as
// rdma_rxe refuses it for memory that is not persistent memory).
const softCaps = verbs.DeviceCapRCRNRNAKGen | verbs.DeviceCapMemWindow | verbs.DeviceCapMemWindowType2B |
	verbs.DeviceCapMemMgtExtensions | verbs.DeviceCapAtomicWrite | verbs.DeviceCapFlushGlobal

var (
	_ verbs.MWAllocator      = (*PD)(nil)
	_ verbs.FastRegAllocator = (*PD)(nil)
	_ verbs.MWBinder         = (*QP)(nil)
	_ verbs.FastRegMR        = (*MR)(nil)
	_ verbs.MW               = (*MW)(nil)
)

// MW is a memory window.
type MW struct {
	*engine.MW
	pd   *PD
	dead atomic.Bool
}

// AllocMW allocates a memory window of type t (ibv_alloc_mw).
func (p *PD) AllocMW(t verbs.MWType) (verbs.MW, error) {
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	if err := p.check(); err != nil {
		return nil, err
	}
	w, err := p.d.eng.MRs.AllocMW(p.num, t)
	if err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	mw := &MW{MW: w, pd: p}
	p.users++
	p.ctx.track(mw)
	return mw, nil
}

// Dealloc releases the window (ibv_dealloc_mw): its key stops working.
// Releasing twice, or after the context or device closed, returns nil.
func (w *MW) Dealloc() error {
	w.pd.d.mu.Lock()
	defer w.pd.d.mu.Unlock()
	return w.destroyLocked(false)
}

// Close is Dealloc (io.Closer).
func (w *MW) Close() error { return w.Dealloc() }

func (w *MW) destroyLocked(bool) error {
	if w.dead.Swap(true) {
		return nil
	}
	err := w.MW.Dealloc()
	w.pd.users--
	w.pd.ctx.untrack(w)
	if err != nil {
		return fmt.Errorf("soft: %w", err)
	}
	return nil
}

// AllocMR allocates a fast-registration region of at most maxPages pages
// of 4 KiB (ib_alloc_mr): FREE, its keys working nowhere, until MapSG gives
// it memory and a REG_MR work request registers it.
func (p *PD) AllocMR(maxPages int) (verbs.FastRegMR, error) {
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	if err := p.check(); err != nil {
		return nil, err
	}
	m, err := p.d.eng.MRs.AllocFast(p.num, maxPages)
	if err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	mr := &MR{MR: m, pd: p}
	p.users++
	p.ctx.track(mr)
	return mr, nil
}

// BindMW binds a type 1 window through the QP's send queue (ibv_bind_mw)
// and returns the window's new key.
func (q *QP) BindMW(b *verbs.BindMWWR, wrid uint64, flags verbs.SendFlags) (uint32, error) {
	if err := q.check(); err != nil {
		return 0, err
	}
	k, err := q.qp.BindMW(b, wrid, flags)
	if err != nil {
		return 0, fmt.Errorf("soft: %w", err)
	}
	q.d.kickQP(q.qp, &q.cork, true)
	return k, nil
}
