package engine

import (
	"fmt"
	"sync/atomic"

	"github.com/goroce/goroce/verbs"
)

// mwKeyBit marks a memory window's key: windows and regions have separate
// index spaces, as rdma_rxe's (rkey_is_mw), the window's with the top bit.
const mwKeyBit = 1 << 31

// mwIndexMax bounds the memory regions a table may hold: their keys must
// stay clear of mwKeyBit.
const mwIndexMax = 1<<23 - 1

// MW is a memory window (rdma_rxe's rxe_mw): a type 1 window is VALID from
// its allocation and bound with QP.BindMW; a type 2 window is FREE until a
// BIND_MW work request binds it to one QP, and FREE again when invalidated
// (LOCAL_INV, SEND_WITH_INV). Its fields but the keys belong to the engine's
// goroutine.
type MW struct {
	typ   verbs.MWType
	pd    uint32
	table *MRTable
	live  atomic.Uint32 // the key while VALID, else 0
	nkey  atomic.Uint32 // the key RKey reports
	// The binding: the region, the range, the access, and for type 2 the QP
	// it was bound through (the only one that may use it).
	mr     *MR
	qp     *QP
	addr   uint64
	length uint64
	access verbs.AccessFlags
	gone   bool
	// posted is the key the last QP.BindMW handed out (0: none), under
	// the send queue's lock of the QP that bound it.
	posted atomic.Uint32
}

// mwTable is the memory windows' share of the MRTable (under its mutex).
type mwTable struct {
	slots []atomic.Pointer[MW]
	gen   []uint8
	free  []int
}

func (w *mwTable) init(max int) {
	max = min(max, mwIndexMax)
	w.slots, w.gen = make([]atomic.Pointer[MW], max+1), make([]uint8, max+1)
	for i := max; i >= 1; i-- {
		w.free = append(w.free, i)
	}
}

// RKey returns the window's remote key.
func (w *MW) RKey() uint32 { return w.nkey.Load() }

// Type returns the window's type.
func (w *MW) Type() verbs.MWType { return w.typ }

// AllocMW allocates a memory window of type t in protection domain pd
// (ibv_alloc_mw; rxe_alloc_mw): type 1 VALID and unbound, type 2 FREE.
func (t *MRTable) AllocMW(pd uint32, typ verbs.MWType) (*MW, error) {
	if typ != verbs.MWType1 && typ != verbs.MWType2 {
		return nil, fmt.Errorf("engine: memory window type %d: %w", typ, verbs.ErrInvalidAttr)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	w := &t.mws
	if len(w.free) == 0 {
		return nil, &LimitError{Limit: "max_mw", Max: len(w.slots) - 1}
	}
	i := w.free[len(w.free)-1]
	w.free = w.free[:len(w.free)-1]
	w.gen[i]++
	mw := &MW{typ: typ, pd: pd, table: t}
	key := mwKeyBit | uint32(i)<<8 | uint32(w.gen[i])
	mw.nkey.Store(key)
	if typ == verbs.MWType1 {
		mw.live.Store(key)
	}
	w.slots[i].Store(mw)
	return mw, nil
}

// DeallocMW releases a window (rxe_dealloc_mw): its key stops working and
// the region it was bound to is released.
func (t *MRTable) DeallocMW(mw *MW) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := int(mw.nkey.Load() &^ mwKeyBit >> 8)
	if mw.gone || i >= len(t.mws.slots) || t.mws.slots[i].Load() != mw {
		return fmt.Errorf("engine: memory window not allocated: %w", verbs.ErrDestroyed)
	}
	mw.gone = true
	mw.live.Store(0)
	if mw.mr != nil {
		mw.mr.numMW.Add(-1)
		mw.mr = nil
	}
	t.mws.slots[i].Store(nil)
	t.mws.free = append(t.mws.free, i)
	return nil
}

// lookupMW returns the VALID window with this key, or nil.
func (t *MRTable) lookupMW(key uint32) *MW {
	i := int(key &^ mwKeyBit >> 8)
	if key&mwKeyBit == 0 || i == 0 || i >= len(t.mws.slots) {
		return nil
	}
	w := t.mws.slots[i].Load()
	if w == nil || w.live.Load() != key {
		return nil
	}
	return w
}

// mwSlot returns the window in the slot key's index names, or nil.
func (t *MRTable) mwSlot(key uint32) *MW {
	i := int(key &^ mwKeyBit >> 8)
	if key&mwKeyBit == 0 || i == 0 || i >= len(t.mws.slots) {
		return nil
	}
	return t.mws.slots[i].Load()
}

// resolveFor is resolve for a remote request reaching qp: a window's key
// (rxe_lookup_mw: VALID, the QP's PD, a type 2 window bound through this QP,
// bound to a VALID region, granting need) gives the bytes within the
// window's range; any other key is a region's.
func (t *MRTable) resolveFor(qp *QP, key uint32, va uint64, n uint32, need verbs.AccessFlags) []byte {
	if key&mwKeyBit == 0 {
		return t.resolve(key, qp.pd, va, n, need)
	}
	w := t.lookupMW(key)
	if w == nil || w.pd != qp.pd || (w.typ == verbs.MWType2 && w.qp != qp) || w.length == 0 || w.access&need != need {
		return nil
	}
	m := w.mr
	if m == nil || m.live.Load() == 0 || va < w.addr || va-w.addr > w.length || uint64(n) > w.length-(va-w.addr) {
		return nil
	}
	off := va - m.addr // the window lies in the region (checked at bind)
	return m.buf[off : off+uint64(n) : off+uint64(n)]
}

// liveKey reports whether key still names memory (a VALID region, or a
// VALID window bound to one): what a multi-packet WRITE or READ checks on
// each packet after its first.
func (t *MRTable) liveKey(key uint32) bool {
	if key&mwKeyBit == 0 {
		return t.lookup(key) != nil
	}
	w := t.lookupMW(key)
	return w != nil && w.mr != nil && w.mr.live.Load() != 0
}

// bindMW executes a bind (rxe_check_bind_mw and rxe_do_bind_mw) for qp: for
// type 1 the window VALID and not zero-based, for type 2 FREE, of the QP's
// PD, with a region and a length; the region VALID, not zero-based, with
// MW_BIND access, LOCAL_WRITE when the window grants remote write or atomic,
// and the range inside it. On success the window is VALID under b.RKey's
// key part, bound to the range.
func (t *MRTable) bindMW(qp *QP, b *verbs.BindMWWR) error {
	em, ok := b.MW.(interface{ EngineMW() *MW })
	if !ok || em.EngineMW() == nil {
		return fmt.Errorf("engine: bind of a window of another device")
	}
	mw := em.EngineMW()
	var mr *MR
	if b.MR != nil {
		if x, ok := b.MR.(interface{ EngineMR() *MR }); ok {
			mr = x.EngineMR()
		}
		if mr == nil || mr.live.Load() == 0 {
			return fmt.Errorf("engine: bind to a region that is not VALID")
		}
	}
	if err := checkBind(qp, mw, mr, b); err != nil {
		return err
	}
	if b.RKey>>8 != mw.nkey.Load()>>8 {
		return fmt.Errorf("engine: bind key %#x changes the window's index (%#x)", b.RKey, mw.nkey.Load())
	}
	if mw.mr != nil {
		mw.mr.numMW.Add(-1)
	}
	mw.mr, mw.addr, mw.length, mw.access = mr, b.Addr, b.Length, b.Access
	if mr == nil {
		mw.length = 0
	} else {
		mr.numMW.Add(1)
	}
	mw.qp = nil
	if mw.typ == verbs.MWType2 {
		mw.qp = qp
	}
	mw.nkey.Store(b.RKey)
	mw.live.Store(b.RKey)
	return nil
}

// checkBind holds rxe_check_bind_mw's rules.
func checkBind(qp *QP, mw *MW, mr *MR, b *verbs.BindMWWR) error {
	if mw.gone || mw.pd != qp.pd {
		return fmt.Errorf("engine: bind of a window of another PD or deallocated")
	}
	if mw.typ == verbs.MWType1 {
		if mw.live.Load() == 0 || b.Access&verbs.AccessZeroBased != 0 {
			return fmt.Errorf("engine: type 1 window not VALID, or zero-based")
		}
	} else if mw.live.Load() != 0 || mr == nil || b.Length == 0 {
		return fmt.Errorf("engine: type 2 window not FREE, or bound to no region or length")
	}
	if mr == nil {
		return nil // a type 1 window unbound
	}
	switch {
	case mr.pd != qp.pd:
		return fmt.Errorf("engine: bind to a region of another PD")
	case b.Access&verbs.AccessZeroBased != 0 || mr.access&verbs.AccessZeroBased != 0:
		return fmt.Errorf("engine: zero-based windows are not supported")
	case mr.access&verbs.AccessMWBind == 0:
		return fmt.Errorf("engine: the region lacks MW_BIND access")
	case b.Access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && mr.access&verbs.AccessLocalWrite == 0:
		return fmt.Errorf("engine: remote write or atomic through a window needs the region's LOCAL_WRITE")
	case b.Addr < mr.addr || b.Length > uint64(len(mr.buf)) || b.Addr-mr.addr > uint64(len(mr.buf))-b.Length:
		return fmt.Errorf("engine: window [%#x, +%d) outside the region [%#x, +%d)", b.Addr, b.Length, mr.addr, len(mr.buf))
	}
	return nil
}

// invalidateMW makes a VALID type 2 window FREE (rxe_invalidate_mw): a
// type 1 window, a key not its current one, or one of another PD is refused.
func (t *MRTable) invalidateMW(key uint32, pd uint32) error {
	w := t.lookupMW(key)
	switch {
	case w == nil:
		return fmt.Errorf("engine: invalidate %#x: no VALID window has that key", key)
	case w.typ != verbs.MWType2:
		return fmt.Errorf("engine: invalidate %#x: a type 1 window cannot be invalidated", key)
	case w.pd != pd:
		return fmt.Errorf("engine: invalidate %#x: a window of another PD", key)
	}
	w.live.Store(0)
	if w.mr != nil {
		w.mr.numMW.Add(-1)
		w.mr = nil
	}
	w.qp = nil
	return nil
}

// invalidate invalidates a region's or a window's key (invalidate_rkey).
func (t *MRTable) invalidate(key uint32, pd uint32) error {
	if key&mwKeyBit != 0 {
		return t.invalidateMW(key, pd)
	}
	return t.invalidateMR(key, pd)
}

// EngineMW returns w (the provider's windows wrap it).
func (w *MW) EngineMW() *MW { return w }

// Dealloc releases the window.
func (w *MW) Dealloc() error { return w.table.DeallocMW(w) }

// Close is Dealloc, for io.Closer.
func (w *MW) Close() error { return w.Dealloc() }

// BindMW binds a type 1 window through the QP's send queue (ibv_bind_mw):
// it posts a BIND_MW work request (completed as WCBindMW with wrid when
// signaled; MW_BIND_ERR, the QP then in ERROR, when the bind is refused)
// and returns the key the window will have, the current one's key part
// advanced (ibv_inc_rkey). b.RKey is ignored.
func (qp *QP) BindMW(b *verbs.BindMWWR, wrid uint64, flags verbs.SendFlags) (uint32, error) {
	if b == nil || b.MW == nil {
		return 0, fmt.Errorf("engine: BindMW without a window: %w", verbs.ErrInvalidWR)
	}
	em, ok := b.MW.(interface{ EngineMW() *MW })
	if !ok || em.EngineMW() == nil || em.EngineMW().typ != verbs.MWType1 {
		return 0, fmt.Errorf("engine: BindMW binds type 1 windows of this device (type 2: a BIND_MW work request): %w", verbs.ErrInvalidWR)
	}
	mw := em.EngineMW()
	st := verbs.QPState(qp.pstate.Load())
	if st == verbs.QPSReset || st == verbs.QPSInit {
		return 0, fmt.Errorf("%w (state %v): %w", errPostState, st, verbs.ErrInvalidState)
	}
	q := qp.sq
	t0 := q.lock()
	if qp.gone.Load() {
		q.unlock(t0)
		return 0, fmt.Errorf("engine: QP %#x is destroyed: %w", qp.num, verbs.ErrDestroyed)
	}
	cur := mw.posted.Load()
	if cur == 0 {
		cur = mw.nkey.Load()
	}
	bind := *b
	bind.RKey = verbs.IncRKey(cur)
	wr := [1]verbs.SendWR{{WRID: wrid, Opcode: verbs.WRBindMW, Flags: flags, Bind: &bind}}
	qp.bind1 = true
	n, t, _, err := qp.fillSend(wr[:], t0)
	qp.bind1 = false
	q.unlock(t)
	if n != 1 {
		return 0, err
	}
	mw.posted.Store(bind.RKey)
	return bind.RKey, nil
}
