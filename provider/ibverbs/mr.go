//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/verbs"
)

// MR is a registered memory region (struct ibv_mr).
type MR struct {
	ctx        *Context
	mu         sync.Mutex // guards mr
	mr         *C.struct_ibv_mr
	buf        []byte
	lkey, rkey uint32
	addr       uint64
}

// RegMR registers buf (ibv_reg_mr): memory from Alloc, or Go heap memory
// (see the package documentation).
func (p *PD) RegMR(buf []byte, access verbs.AccessFlags) (verbs.MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("ibverbs: register an empty buffer: %w", verbs.ErrInvalidAttr)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil, p.errDestroyed()
	}
	mr, errno := C.ibv_reg_mr(p.pd, unsafe.Pointer(&buf[0]), C.size_t(len(buf)), C.int(access))
	if mr == nil {
		return nil, verbErr("ibv_reg_mr", callErrno(errno), fmt.Sprintf("%d bytes, access %#x", len(buf), uint32(access)))
	}
	m := &MR{ctx: p.ctx, mr: mr, buf: buf, lkey: uint32(mr.lkey), rkey: uint32(mr.rkey), addr: uint64(uintptr(mr.addr))}
	if !p.ctx.track(m) {
		C.ibv_dereg_mr(mr)
		return nil, p.ctx.errClosed()
	}
	return m, nil
}

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key.
func (m *MR) RKey() uint32 { return m.rkey }

// Addr returns the virtual address of Buf()[0].
func (m *MR) Addr() uint64 { return m.addr }

// Buf returns the registered memory.
func (m *MR) Buf() []byte { return m.buf }

// Dereg deregisters the region (ibv_dereg_mr). Deregistering twice, or
// after Close, returns nil.
func (m *MR) Dereg() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mr == nil {
		return nil
	}
	if rc, errno := C.ibv_dereg_mr(m.mr); rc != 0 {
		return verbErr("ibv_dereg_mr", rcErrno(int(rc), errno), "")
	}
	m.mr, m.buf = nil, nil
	if m.ctx != nil {
		m.ctx.untrack(m)
	}
	return nil
}

// Close is Dereg (io.Closer).
func (m *MR) Close() error { return m.Dereg() }

func (m *MR) rank() int { return 3 }

func (m *MR) kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mr != nil {
		C.ibv_dereg_mr(m.mr)
		m.mr, m.buf = nil, nil
	}
}

// Alloc returns n bytes of zeroed memory mapped with mmap, outside the Go
// heap: memory to register. Free unmaps it.
func Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("ibverbs: allocate %d bytes: %w", n, verbs.ErrInvalidAttr)
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("ibverbs: mmap %d bytes: %w", n, err)
	}
	return b, nil
}

// Free unmaps memory from Alloc; deregister its MRs first.
func Free(b []byte) error { return unix.Munmap(b) }
