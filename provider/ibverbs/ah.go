//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// AH is an address handle (struct ibv_ah).
type AH struct {
	ctx  *Context
	mu   sync.Mutex // guards ah
	ah   *C.struct_ibv_ah
	attr verbs.AHAttr
}

// CreateAH creates an address handle (ibv_create_ah). RoCE address handles
// are global: attr's GID, source GID index, traffic class, flow label and
// hop limit go into the GRH attributes; a zero PortNum means port 1.
func (p *PD) CreateAH(attr *verbs.AHAttr) (verbs.AH, error) {
	if attr == nil {
		return nil, fmt.Errorf("ibverbs: nil AH attributes: %w", verbs.ErrInvalidAttr)
	}
	v := *attr
	if v.PortNum == 0 {
		v.PortNum = 1
	}
	var a C.struct_ibv_ah_attr
	fillAH(&a, &v)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil, p.errDestroyed()
	}
	ah, errno := C.ibv_create_ah(p.pd, &a)
	if ah == nil {
		return nil, verbErr("ibv_create_ah", callErrno(errno), v.DGID.String())
	}
	h := &AH{ctx: p.ctx, ah: ah, attr: v}
	if !p.ctx.track(h) {
		C.ibv_destroy_ah(ah)
		return nil, p.ctx.errClosed()
	}
	return h, nil
}

func fillAH(a *C.struct_ibv_ah_attr, v *verbs.AHAttr) {
	*(*[16]byte)(unsafe.Pointer(&a.grh.dgid)) = v.DGID
	a.grh.flow_label = C.uint32_t(v.FlowLabel)
	a.grh.sgid_index = C.uint8_t(v.SGIDIndex)
	a.grh.hop_limit = C.uint8_t(v.HopLimit)
	a.grh.traffic_class = C.uint8_t(v.TrafficClass)
	a.is_global = 1
	a.port_num = C.uint8_t(v.PortNum)
}

func readAH(a *C.struct_ibv_ah_attr) verbs.AHAttr {
	return verbs.AHAttr{DGID: *(*[16]byte)(unsafe.Pointer(&a.grh.dgid)), SGIDIndex: uint8(a.grh.sgid_index),
		TrafficClass: uint8(a.grh.traffic_class), FlowLabel: uint32(a.grh.flow_label), HopLimit: uint8(a.grh.hop_limit),
		PortNum: uint8(a.port_num)}
}

// Attr returns the destination.
func (a *AH) Attr() verbs.AHAttr { return a.attr }

// Destroy destroys the AH (ibv_destroy_ah). Destroying twice, or after
// Close, returns nil.
func (a *AH) Destroy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ah == nil {
		return nil
	}
	if rc, errno := C.ibv_destroy_ah(a.ah); rc != 0 {
		return verbErr("ibv_destroy_ah", rcErrno(int(rc), errno), "")
	}
	a.ah = nil
	if a.ctx != nil {
		a.ctx.untrack(a)
	}
	return nil
}

// Close is Destroy (io.Closer).
func (a *AH) Close() error { return a.Destroy() }

func (a *AH) rank() int { return 1 }

func (a *AH) kill() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ah != nil {
		C.ibv_destroy_ah(a.ah)
		a.ah = nil
	}
}
