//go:build linux && cgo && ibverbs

package ibverbs

/*
#cgo LDFLAGS: -libverbs
#include "shim.h"
*/
import "C"

import (
	"errors"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// Provider is the libibverbs provider. Its zero value is ready to use.
type Provider struct{}

// Name returns "ibverbs".
func (Provider) Name() string { return "ibverbs" }

// Devices lists the devices libibverbs reports (ibv_get_device_list). A
// machine without an RDMA subsystem (libibverbs says ENOSYS) has none.
func (Provider) Devices() ([]verbs.Device, error) {
	ds, err := List()
	if errors.Is(err, syscall.ENOSYS) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]verbs.Device, len(ds))
	for i, d := range ds {
		out[i] = d
	}
	return out, nil
}

// List returns the devices libibverbs reports (ibv_get_device_list). On a
// machine without an RDMA subsystem the error matches syscall.ENOSYS.
func List() ([]*Device, error) {
	var n C.int
	l, errno := C.ibv_get_device_list(&n)
	if l == nil {
		return nil, verbErr("ibv_get_device_list", callErrno(errno), "")
	}
	defer C.ibv_free_device_list(l)
	devs := unsafe.Slice(l, int(n))
	out := make([]*Device, 0, len(devs))
	for _, d := range devs {
		out = append(out, &Device{name: C.GoString(C.ibv_get_device_name(d)), guid: uint64(C.goroce_guid(d))})
	}
	return out, nil
}

// Device is a libibverbs device (struct ibv_device).
type Device struct {
	name string
	guid uint64
}

// Name returns the device name, e.g. "rxe0".
func (d *Device) Name() string { return d.name }

// GUID returns the node GUID in host order, as ibv_devices prints it.
func (d *Device) GUID() uint64 { return d.guid }

// Open opens the device (ibv_open_device).
func (d *Device) Open() (verbs.Context, error) {
	c, err := Open(d.name)
	if err != nil {
		return nil, err // not a nil *Context in a non-nil interface
	}
	return c, nil
}

// Open opens the device called name (ibv_open_device).
func Open(name string) (*Context, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var e C.int
	c := C.goroce_open(cs, &e)
	if c == nil {
		return nil, verbErr("ibv_open_device", int(e), name)
	}
	ctx := &Context{c: c, dev: &Device{name: name, guid: uint64(C.goroce_guid(c.device))},
		qps: map[*C.struct_ibv_qp]*QP{}, cqs: map[*C.struct_ibv_cq]*CQ{}, srqs: map[*C.struct_ibv_srq]*SRQ{},
		objs: map[killer]struct{}{}}
	ctx.wallclock = C.goroce_wallclock_cqs(c, cqExFlags|C.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) != 0
	return ctx, nil
}

// cgoNoop is one empty cgo call: the benchmarks' baseline.
func cgoNoop() { C.goroce_noop() }

var (
	_ verbs.Provider    = Provider{}
	_ verbs.Device      = (*Device)(nil)
	_ verbs.Context     = (*Context)(nil)
	_ verbs.PD          = (*PD)(nil)
	_ verbs.MR          = (*MR)(nil)
	_ verbs.CQ          = (*CQ)(nil)
	_ verbs.CompChannel = (*CompChannel)(nil)
	_ verbs.QP          = (*QP)(nil)
	_ verbs.SRQ         = (*SRQ)(nil)
	_ verbs.AH          = (*AH)(nil)
)
