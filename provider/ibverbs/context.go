//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// Context is an open device (struct ibv_context). It implements
// verbs.Context.
type Context struct {
	c   *C.struct_ibv_context
	dev *Device

	// life guards c: the verbs that use the context hold it for reading,
	// Close for writing while it closes the device.
	life sync.RWMutex

	awOnce sync.Once       // capEx's query
	capex  verbs.DeviceCap // the extended capability flags

	mu     sync.Mutex // guards the maps, the async file and closed
	qps    map[*C.struct_ibv_qp]*QP
	cqs    map[*C.struct_ibv_cq]*CQ
	srqs   map[*C.struct_ibv_srq]*SRQ
	objs   map[killer]struct{} // every live object made through the context
	async  *os.File
	closed bool
	// wallclock: the device stamps completions and makes extended CQs
	// with wall-clock timestamps, so CreateCQ makes those (WC.Timestamp).
	wallclock bool
}

// killer is an object Close destroys with its context. kill destroys it
// (errors ignored: the device goes) unless it is destroyed already; rank
// orders the kills, users first (QP 0, AH 1, SRQ 2, MR 3, CQ 4, channel 5,
// PD 6).
type killer interface {
	kill()
	rank() int
}

// enter returns the device context for one verb, holding c.life for
// reading until leave; it fails with an error matching verbs.ErrDestroyed
// after Close.
func (c *Context) enter() (*C.struct_ibv_context, error) {
	c.life.RLock()
	if c.c == nil {
		c.life.RUnlock()
		return nil, c.errClosed()
	}
	return c.c, nil
}

func (c *Context) leave() { c.life.RUnlock() }

func (c *Context) errClosed() error {
	return fmt.Errorf("ibverbs: %s: context closed: %w", c.dev.name, verbs.ErrDestroyed)
}

// track records a new object; after Close began it returns false, and the
// caller destroys the object and fails.
func (c *Context) track(o killer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.objs[o] = struct{}{}
	return true
}

func (c *Context) untrack(o killer) {
	c.mu.Lock()
	delete(c.objs, o)
	c.mu.Unlock()
}

// Device returns the device.
func (c *Context) Device() verbs.Device { return c.dev }

// QueryDevice returns the device attributes (ibv_query_device).
// CompletionTimestamps is verbs.TimestampHardware when the device stamps
// completions (ibv_query_device_ex reports a non-zero
// completion_timestamp_mask) and makes CQs that carry the stamp as
// wall-clock time (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK); else
// verbs.TimestampNone.
func (c *Context) QueryDevice() (verbs.DeviceAttr, error) {
	cc, err := c.enter()
	if err != nil {
		return verbs.DeviceAttr{}, err
	}
	defer c.leave()
	var a C.struct_ibv_device_attr
	if rc := C.goroce_query_device(cc, &a); rc != 0 {
		return verbs.DeviceAttr{}, verbErr("ibv_query_device", int(rc), c.dev.name)
	}
	ts := verbs.TimestampNone
	if c.wallclock {
		ts = verbs.TimestampHardware
	}
	return verbs.DeviceAttr{
		// The flags of ibv_device_attr, and the extended ones of
		// ibv_query_device_ex (ATOMIC_WRITE, FLUSH).
		CapFlags:        verbs.DeviceCap(uint32(a.device_cap_flags)) | c.capEx(),
		FWVer:           C.GoString(&a.fw_ver[0]),
		NodeGUID:        be64(uint64(a.node_guid)),
		SysImageGUID:    be64(uint64(a.sys_image_guid)),
		VendorID:        uint32(a.vendor_id),
		VendorPartID:    uint32(a.vendor_part_id),
		HWVer:           uint32(a.hw_ver),
		MaxQP:           int(a.max_qp),
		MaxQPWR:         int(a.max_qp_wr),
		MaxSGE:          int(a.max_sge),
		MaxCQ:           int(a.max_cq),
		MaxCQE:          int(a.max_cqe),
		MaxMR:           int(a.max_mr),
		MaxMRSize:       uint64(a.max_mr_size),
		MaxPD:           int(a.max_pd),
		MaxQPRdAtom:     int(a.max_qp_rd_atom),
		MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		MaxSRQ:          int(a.max_srq),
		MaxSRQWR:        int(a.max_srq_wr),
		MaxAH:           int(a.max_ah),
		AtomicCap:       int(a.atomic_cap),
		PhysPortCnt:     int(a.phys_port_cnt),

		CompletionTimestamps: ts,
	}, nil
}

// be64 swaps a big-endian 64-bit value read as host order (x86 and arm64
// are little-endian; Linux RDMA runs on little-endian hosts only here).
func be64(v uint64) uint64 {
	var b [8]byte
	*(*uint64)(unsafe.Pointer(&b)) = v
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// QueryPort returns a port's attributes (ibv_query_port).
func (c *Context) QueryPort(port uint8) (verbs.PortAttr, error) {
	cc, err := c.enter()
	if err != nil {
		return verbs.PortAttr{}, err
	}
	defer c.leave()
	var a C.struct_ibv_port_attr
	if rc := C.goroce_query_port(cc, C.uint8_t(port), &a); rc != 0 {
		return verbs.PortAttr{}, verbErr("ibv_query_port", int(rc), fmt.Sprintf("%s port %d", c.dev.name, port))
	}
	ll := "Unknown"
	switch a.link_layer {
	case C.IBV_LINK_LAYER_INFINIBAND:
		ll = "InfiniBand"
	case C.IBV_LINK_LAYER_ETHERNET:
		ll = "Ethernet"
	}
	return verbs.PortAttr{State: verbs.PortState(a.state), MaxMTU: verbs.MTU(a.max_mtu), ActiveMTU: verbs.MTU(a.active_mtu),
		GIDTblLen: int(a.gid_tbl_len), PKeyTblLen: int(a.pkey_tbl_len), LID: uint16(a.lid), LinkLayer: ll}, nil
}

// Close closes the device (ibv_close_device). It destroys first the
// objects made through the context that are still alive (QPs, AHs, SRQs,
// MRs, CQs, channels, PDs, in that order); every later call on them or the
// context fails with an error matching verbs.ErrDestroyed (their Destroy,
// Dealloc, Dereg and Close return nil), and goroutines waiting in a
// channel's Wait or in GetAsyncEvent wake with that error. Closing twice
// returns nil.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	objs := make([]killer, 0, len(c.objs))
	for o := range c.objs {
		objs = append(objs, o)
	}
	c.objs = map[killer]struct{}{}
	async := c.async
	c.async = nil
	c.mu.Unlock()
	slices.SortFunc(objs, func(a, b killer) int { return a.rank() - b.rank() })
	for _, o := range objs {
		o.kill()
	}
	c.life.Lock()
	var err error
	if c.c != nil {
		if rc, errno := C.ibv_close_device(c.c); rc != 0 {
			err = verbErr("ibv_close_device", rcErrno(int(rc), errno), c.dev.name)
		}
		c.c = nil
	}
	c.life.Unlock()
	if async != nil {
		async.Close() // wakes GetAsyncEvent's waiters
	}
	return err
}
