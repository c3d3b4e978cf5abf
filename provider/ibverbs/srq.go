//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// SRQ is a shared receive queue (struct ibv_srq).
type SRQ struct {
	ctx  *Context
	srq  *C.struct_ibv_srq // guarded by recv.mu
	recv scratch
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (p *PD) CreateSRQ(maxWR, maxSGE int) (verbs.SRQ, error) {
	if maxWR <= 0 || maxSGE <= 0 || maxWR > 1<<24 || maxSGE > maxBatchSGE {
		return nil, fmt.Errorf("ibverbs: SRQ of %d WRs x %d SGEs: %w", maxWR, maxSGE, verbs.ErrInvalidAttr)
	}
	var ia C.struct_ibv_srq_init_attr
	ia.attr.max_wr = C.uint32_t(maxWR)
	ia.attr.max_sge = C.uint32_t(maxSGE)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil, p.errDestroyed()
	}
	srq, errno := C.ibv_create_srq(p.pd, &ia)
	if srq == nil {
		return nil, verbErr("ibv_create_srq", callErrno(errno), "")
	}
	s := &SRQ{ctx: p.ctx, srq: srq}
	s.recv.alloc(C.size_t(unsafe.Sizeof(C.struct_grecv{})), C.size_t(unsafe.Sizeof(C.struct_ibv_recv_wr{})))
	if !p.ctx.track(s) {
		C.ibv_destroy_srq(srq)
		s.recv.free()
		return nil, p.ctx.errClosed()
	}
	p.ctx.mu.Lock()
	p.ctx.srqs[srq] = s
	p.ctx.mu.Unlock()
	return s, nil
}

// hold locks the SRQ and returns it, or nil (unlocked) when destroyed.
func (s *SRQ) hold() *C.struct_ibv_srq {
	s.recv.mu.Lock()
	if s.srq == nil {
		s.recv.mu.Unlock()
		return nil
	}
	return s.srq
}

func (s *SRQ) release() { s.recv.mu.Unlock() }

// PostRecv posts receive work requests (ibv_post_srq_recv, one call per
// 64).
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) (int, error) {
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	if s.srq == nil {
		return 0, fmt.Errorf("ibverbs: post_srq_recv: %w", verbs.ErrDestroyed)
	}
	return postRecv(&s.recv, wrs, nil, s.srq)
}

// Destroy destroys the SRQ (ibv_destroy_srq). While a QP uses it the
// kernel refuses (EBUSY): the error matches verbs.ErrBusy and the SRQ
// stays. Destroying twice, or after Close, returns nil.
func (s *SRQ) Destroy() error {
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	if s.srq == nil {
		return nil
	}
	if rc, errno := C.ibv_destroy_srq(s.srq); rc != 0 {
		return verbErr("ibv_destroy_srq", rcErrno(int(rc), errno), "")
	}
	s.forget()
	s.ctx.untrack(s)
	return nil
}

func (s *SRQ) forget() {
	s.ctx.mu.Lock()
	delete(s.ctx.srqs, s.srq)
	s.ctx.mu.Unlock()
	s.srq = nil
	s.recv.free()
}

// Close is Destroy (io.Closer).
func (s *SRQ) Close() error { return s.Destroy() }

func (s *SRQ) rank() int { return 2 }

func (s *SRQ) kill() {
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	if s.srq != nil {
		C.ibv_destroy_srq(s.srq)
		s.forget()
	}
}
