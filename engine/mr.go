package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// MR is a registered memory region. Its key is index<<8 | a per-registration
// byte, so a stale key of a deregistered region does not match a new one.
//
// A region from AllocFast (fast registration, rdma_rxe's IB_MR_TYPE_MEM_REG)
// keeps the states rxe keeps: FREE when allocated and after an
// invalidation (LOCAL_INV, or a remote SEND_WITH_INV), VALID after a REG_MR
// work request, which gives it its pages (MapSG), access and key; a key
// whose region is not VALID names nothing, locally or remotely.
type MR struct {
	buf    []byte
	addr   uint64
	access verbs.AccessFlags
	pd     uint32
	table  *MRTable
	// live is the key while the region is VALID, 0 otherwise: lookups
	// compare it, so a FREE region's key matches nothing. nkey is the key
	// LKey and RKey report.
	live atomic.Uint32
	nkey atomic.Uint32
	// Fast registration: maxPages, the mapping MapSG left for the next
	// REG_MR, and the memory windows bound to the region (which keep it
	// from deregistration and invalidation, as rxe's num_mw).
	fast     bool
	maxPages int
	pend     atomic.Pointer[mrMap]
	numMW    atomic.Int32
}

// mrMap is the memory a fast-registration region maps.
type mrMap struct {
	buf  []byte
	addr uint64
}

// MRState is a region's state (rdma_rxe's enum rxe_mr_state).
type MRState uint8

// Region states.
const (
	MRInvalid MRState = iota // deregistered
	MRFree                   // a fast-registration region not registered (or invalidated)
	MRValid                  // its keys work
)

// String returns "INVALID", "FREE" or "VALID".
func (s MRState) String() string {
	return [...]string{"INVALID", "FREE", "VALID"}[min(int(s), 2)]
}

// Buf returns the registered memory.
func (m *MR) Buf() []byte { return m.buf }

// Addr returns the region's virtual address: the address of its first byte.
func (m *MR) Addr() uint64 { return m.addr }

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.nkey.Load() }

// RKey returns the remote key (the same value; the access flags decide what
// a remote peer may do with it).
func (m *MR) RKey() uint32 { return m.nkey.Load() }

// Access returns the access flags.
func (m *MR) Access() verbs.AccessFlags { return m.access }

// PD returns the protection domain number.
func (m *MR) PD() uint32 { return m.pd }

// State returns the region's state.
func (m *MR) State() MRState {
	if m.table.slotOf(m.nkey.Load()) != m {
		return MRInvalid
	}
	if m.live.Load() == 0 {
		return MRFree
	}
	return MRValid
}

// Fast reports whether the region is for fast registration (AllocFast).
func (m *MR) Fast() bool { return m.fast }

// EngineMR returns m (the provider's regions wrap it).
func (m *MR) EngineMR() *MR { return m }

// MRTable maps keys to memory regions. Registration and deregistration take a
// mutex; lookups, on the engine's hot path, are one atomic load, so a
// deregistration revokes the key at once for every packet processed after it.
// It holds the memory windows too (mw.go).
type MRTable struct {
	mu    sync.Mutex
	slots []atomic.Pointer[MR]
	gen   []uint8
	free  []int
	mws   mwTable
}

// Errors of the MR table.
var (
	ErrMRLimit   = errors.New("engine: memory region limit reached")
	ErrMREmpty   = errors.New("engine: cannot register an empty buffer")
	ErrMRUnknown = errors.New("engine: memory region not registered")
	// ErrMRBound: memory windows are bound to the region (rxe's num_mw):
	// it cannot be deregistered or invalidated. Matches verbs.ErrBusy.
	ErrMRBound = fmt.Errorf("engine: memory windows are bound to the region: %w", verbs.ErrBusy)
)

// NewMRTable returns a table for at most max regions.
func NewMRTable(max int) *MRTable {
	t := &MRTable{slots: make([]atomic.Pointer[MR], max+1), gen: make([]uint8, max+1)}
	for i := max; i >= 1; i-- { // index 0 unused: key 0 is never valid
		t.free = append(t.free, i)
	}
	t.mws.init(max)
	return t
}

// Register registers buf with the access flags in protection domain pd.
func (t *MRTable) Register(buf []byte, access verbs.AccessFlags, pd uint32) (*MR, error) {
	if len(buf) == 0 {
		return nil, ErrMREmpty
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.free) == 0 {
		return nil, &LimitError{Limit: "max_mr", Max: len(t.slots) - 1}
	}
	m := &MR{buf: buf, addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), access: access, pd: pd, table: t}
	t.insert(m, true)
	return m, nil
}

// insert gives m a free slot and its key (live unless m starts FREE), with
// t.mu held and a slot free.
func (t *MRTable) insert(m *MR, valid bool) {
	i := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	t.gen[i]++
	key := uint32(i)<<8 | uint32(t.gen[i])
	m.nkey.Store(key)
	if valid {
		m.live.Store(key)
	}
	t.slots[i].Store(m)
}

// AllocFast allocates a fast-registration region of at most maxPages pages
// of 4 KiB in protection domain pd (ib_alloc_mr): FREE until a REG_MR work
// request registers it.
func (t *MRTable) AllocFast(pd uint32, maxPages int) (*MR, error) {
	if maxPages <= 0 || maxPages > 1<<18 {
		return nil, fmt.Errorf("engine: fast-registration region of %d pages (1 to %d): %w", maxPages, 1<<18, verbs.ErrInvalidAttr)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.free) == 0 {
		return nil, &LimitError{Limit: "max_mr", Max: len(t.slots) - 1}
	}
	m := &MR{pd: pd, table: t, fast: true, maxPages: maxPages}
	t.insert(m, false)
	return m, nil
}

// Deregister revokes the region's key. A region memory windows are bound
// to is refused (ErrMRBound), as rxe refuses it.
func (t *MRTable) Deregister(m *MR) error {
	i := int(m.nkey.Load() >> 8)
	t.mu.Lock()
	defer t.mu.Unlock()
	if i >= len(t.slots) || t.slots[i].Load() != m {
		return ErrMRUnknown
	}
	if m.numMW.Load() > 0 {
		return ErrMRBound
	}
	m.live.Store(0)
	t.slots[i].Store(nil)
	t.free = append(t.free, i)
	return nil
}

// lookup returns the VALID region with this key, or nil.
func (t *MRTable) lookup(key uint32) *MR {
	i := key >> 8
	if i == 0 || int(i) >= len(t.slots) {
		return nil
	}
	m := t.slots[i].Load()
	if m == nil || m.live.Load() != key {
		return nil
	}
	return m
}

// slotOf returns the region in the slot key's index names, whatever its
// state and key part, or nil.
func (t *MRTable) slotOf(key uint32) *MR {
	i := key >> 8
	if i == 0 || int(i) >= len(t.slots) {
		return nil
	}
	return t.slots[i].Load()
}

// Deregister revokes the region's keys.
func (m *MR) Deregister() error { return m.table.Deregister(m) }

// MapSG sets the memory the next REG_MR gives a fast-registration region
// (ib_map_mr_sg): the bytes the SGEs name, which must lie in one region of
// the same protection domain, each SGE starting where the one before ends,
// within the region's pages (4 KiB, counted from the first SGE's page). The
// first SGE's address becomes the region's. It returns how many SGEs it
// mapped: all, or 0 and the error.
func (m *MR) MapSG(sges []verbs.SGE) (int, error) {
	if !m.fast {
		return 0, fmt.Errorf("engine: MapSG on a region not from AllocFast: %w", verbs.ErrInvalidAttr)
	}
	if len(sges) == 0 {
		return 0, fmt.Errorf("engine: MapSG with no SGE: %w", verbs.ErrInvalidAttr)
	}
	var total uint64
	for i, g := range sges {
		if g.Addr != sges[0].Addr+total || g.LKey != sges[0].LKey {
			return 0, fmt.Errorf("engine: SGE %d (%#x, lkey %#x) does not follow the one before in its region: %w", i, g.Addr, g.LKey, verbs.ErrInvalidAttr)
		}
		total += uint64(g.Length)
	}
	base := m.table.lookup(sges[0].LKey)
	if base == nil || base.pd != m.pd || base.fast || total == 0 || sgeBytes(base, m.pd, verbs.SGE{Addr: sges[0].Addr, Length: uint32(min(total, 1<<32-1)), LKey: sges[0].LKey}, 0) == nil || total >= 1<<32 {
		return 0, fmt.Errorf("engine: SGEs (%#x, %d bytes) not in one registered region of the PD: %w", sges[0].Addr, total, verbs.ErrInvalidAttr)
	}
	if pages := (sges[0].Addr%4096 + total + 4095) / 4096; pages > uint64(m.maxPages) {
		return 0, fmt.Errorf("engine: %d pages, the region has %d: %w", pages, m.maxPages, verbs.ErrInvalidAttr)
	}
	off := sges[0].Addr - base.addr
	m.pend.Store(&mrMap{buf: base.buf[off : off+total : off+total], addr: sges[0].Addr})
	return len(sges), nil
}

// regFast executes a REG_MR work request of a QP of protection domain pd
// (rxe_reg_fast_mr): the region must be a FREE fast-registration region of
// pd with a mapping, and key must keep its index; it becomes VALID with
// the mapping, access and key.
func (t *MRTable) regFast(r *verbs.RegMRWR, pd uint32) error {
	em, ok := r.MR.(interface{ EngineMR() *MR })
	if !ok || em.EngineMR() == nil {
		return fmt.Errorf("engine: REG_MR of a region of another device: %w", verbs.ErrInvalidWR)
	}
	m := em.EngineMR()
	mp := m.pend.Load()
	switch {
	case !m.fast || t.slotOf(m.nkey.Load()) != m:
		return fmt.Errorf("engine: REG_MR of a region not from AllocFast: %w", verbs.ErrInvalidWR)
	case m.pd != pd:
		return fmt.Errorf("engine: REG_MR of a region of another PD: %w", verbs.ErrInvalidWR)
	case m.live.Load() != 0:
		return fmt.Errorf("engine: REG_MR of region %#x, which is VALID, not FREE: %w", m.nkey.Load(), verbs.ErrInvalidWR)
	case r.Key>>8 != m.nkey.Load()>>8:
		return fmt.Errorf("engine: REG_MR key %#x changes the index of %#x: %w", r.Key, m.nkey.Load(), verbs.ErrInvalidWR)
	case mp == nil:
		return fmt.Errorf("engine: REG_MR of a region MapSG gave no pages: %w", verbs.ErrInvalidWR)
	}
	m.buf, m.addr, m.access = mp.buf, mp.addr, r.Access
	m.nkey.Store(r.Key)
	m.live.Store(r.Key)
	return nil
}

// invalidateMR makes the VALID fast-registration region key names FREE
// (rxe_invalidate_mr): a region ibv_reg_mr registered, one with windows
// bound, or a key not its current one is refused.
func (t *MRTable) invalidateMR(key uint32, pd uint32) error {
	m := t.lookup(key)
	switch {
	case m == nil:
		return fmt.Errorf("engine: invalidate %#x: no VALID region has that key", key)
	case !m.fast:
		return fmt.Errorf("engine: invalidate %#x: not a fast-registration region", key)
	case m.pd != pd:
		return fmt.Errorf("engine: invalidate %#x: a region of another PD", key)
	case m.numMW.Load() > 0:
		return fmt.Errorf("engine: invalidate %#x: %w", key, ErrMRBound)
	}
	m.live.Store(0)
	return nil
}

// resolve returns the bytes [va, va+n) of the region with this key if it
// belongs to pd, grants need and contains the range (overflow-safe), or nil.
func (t *MRTable) resolve(key uint32, pd uint32, va uint64, n uint32, need verbs.AccessFlags) []byte {
	m := t.lookup(key)
	if m == nil || m.pd != pd || m.access&need != need {
		return nil
	}
	if va < m.addr {
		return nil
	}
	off := va - m.addr
	size := uint64(len(m.buf))
	if off > size || uint64(n) > size-off {
		return nil
	}
	return m.buf[off : off+uint64(n) : off+uint64(n)]
}

// atomicWord returns the 8-byte word at va for an atomic operation, or nil.
func atomicWord(b []byte) *uint64 {
	if len(b) < 8 || uintptr(unsafe.Pointer(&b[0]))&7 != 0 {
		return nil
	}
	return (*uint64)(unsafe.Pointer(&b[0]))
}

// Dereg is Deregister (verbs.MR).
func (m *MR) Dereg() error { return m.Deregister() }

// Close is Deregister, for io.Closer.
func (m *MR) Close() error { return m.Deregister() }
