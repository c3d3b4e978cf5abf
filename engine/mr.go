package engine

import (
	"errors"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// MR is a registered memory region. Its key is index<<8 | a per-registration
// byte, so a stale key of a deregistered region does not match a new one.
type MR struct {
	buf    []byte
	addr   uint64
	key    uint32
	access verbs.AccessFlags
	pd     uint32
	table  *MRTable
}

// Buf returns the registered memory.
func (m *MR) Buf() []byte { return m.buf }

// Addr returns the region's virtual address: the address of its first byte.
func (m *MR) Addr() uint64 { return m.addr }

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.key }

// RKey returns the remote key (the same value; the access flags decide what
// a remote peer may do with it).
func (m *MR) RKey() uint32 { return m.key }

// Access returns the access flags.
func (m *MR) Access() verbs.AccessFlags { return m.access }

// PD returns the protection domain number.
func (m *MR) PD() uint32 { return m.pd }

// MRTable maps keys to memory regions. Registration and deregistration take a
// mutex; lookups, on the engine's hot path, are one atomic load, so a
// deregistration revokes the key at once for every packet processed after it.
type MRTable struct {
	mu    sync.Mutex
	slots []atomic.Pointer[MR]
	gen   []uint8
	free  []int
}

// Errors of the MR table.
var (
	ErrMRLimit   = errors.New("engine: memory region limit reached")
	ErrMREmpty   = errors.New("engine: cannot register an empty buffer")
	ErrMRUnknown = errors.New("engine: memory region not registered")
)

// NewMRTable returns a table for at most max regions.
func NewMRTable(max int) *MRTable {
	t := &MRTable{slots: make([]atomic.Pointer[MR], max+1), gen: make([]uint8, max+1)}
	for i := max; i >= 1; i-- { // index 0 unused: key 0 is never valid
		t.free = append(t.free, i)
	}
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
	i := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	t.gen[i]++
	m := &MR{buf: buf, addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), key: uint32(i)<<8 | uint32(t.gen[i]),
		access: access, pd: pd, table: t}
	t.slots[i].Store(m)
	return m, nil
}

// Deregister revokes the region's key.
func (t *MRTable) Deregister(m *MR) error {
	i := int(m.key >> 8)
	t.mu.Lock()
	defer t.mu.Unlock()
	if i >= len(t.slots) || t.slots[i].Load() != m {
		return ErrMRUnknown
	}
	t.slots[i].Store(nil)
	t.free = append(t.free, i)
	return nil
}

// lookup returns the region with this key, or nil.
func (t *MRTable) lookup(key uint32) *MR {
	i := key >> 8
	if i == 0 || int(i) >= len(t.slots) {
		return nil
	}
	m := t.slots[i].Load()
	if m == nil || m.key != key {
		return nil
	}
	return m
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

// Deregister revokes the region's keys.
func (m *MR) Deregister() error { return m.table.Deregister(m) }
