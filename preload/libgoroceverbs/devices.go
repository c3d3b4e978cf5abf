//go:build linux && cgo && ibverbs

package main

/*
#include "shim.h"
#include <string.h>
#include <sys/eventfd.h>
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/preload"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// The environment a program's devices come from (package preload).
const (
	envAddr   = preload.EnvAddr
	envPath   = preload.EnvPath
	envDevice = preload.EnvDevice
	envPcap   = preload.EnvPcap
)

// gdev is a configured device: its ibv_device, and the soft device once a
// context is open on it (closed with its last context).
type gdev struct {
	c    *C.struct_ibv_device
	opts soft.OpenOptions
	guid uint64

	mu   sync.Mutex
	dev  *soft.Device
	refs int

	cmOnce sync.Once // the context rdma_cm ids share
	cm     *C.struct_ibv_context
	cmErr  syscall.Errno
}

var (
	devsOnce sync.Once
	devs     []*gdev
	devsErr  error
)

// configured reads the environment once and makes the ibv_device structures,
// which live as long as the process (as libibverbs' do).
func configured() ([]*gdev, error) {
	devsOnce.Do(func() {
		addrs := strings.Split(os.Getenv(envAddr), ",")
		names := strings.Split(os.Getenv(envDevice), ",")
		for i, a := range addrs {
			a = strings.TrimSpace(a)
			ip, err := soft.ResolveAddr(a)
			if err != nil {
				devsErr = fmt.Errorf("goroce: %s=%q: %w", envAddr, a, err)
				return
			}
			name := fmt.Sprintf("soft%d", i)
			if i < len(names) && strings.TrimSpace(names[i]) != "" {
				name = strings.TrimSpace(names[i])
			}
			o := soft.OpenOptions{Name: name, Addr: ip.String(), Path: os.Getenv(envPath), Pcap: pcapName(os.Getenv(envPcap), name, len(addrs))}
			devs = append(devs, newDevice(o, ip))
		}
	})
	return devs, devsErr
}

// newDevice makes a device's ibv_device structure. The soft device it
// opens spins as a program polling through cgo needs (driverSpin).
func newDevice(o soft.OpenOptions, ip netip.Addr) *gdev {
	o.Spin = driverSpin()
	d := &gdev{opts: o, guid: guidOf(ip.As16())}
	d.c = (*C.struct_ibv_device)(C.calloc(1, C.sizeof_struct_ibv_device))
	d.c.node_type = C.IBV_NODE_CA
	d.c.transport_type = C.IBV_TRANSPORT_IB
	cstr(d.c.name[:], o.Name)
	cstr(d.c.dev_name[:], "uverbs-"+o.Name)
	cstr(d.c.dev_path[:], "/sys/class/infiniband_verbs/uverbs-"+o.Name)
	cstr(d.c.ibdev_path[:], "/sys/class/infiniband/"+o.Name)
	return d
}

func pcapName(p, name string, n int) string {
	if p == "" || n == 1 {
		return p
	}
	ext := filepath.Ext(p)
	return strings.TrimSuffix(p, ext) + "-" + name + ext
}

// guidOf is soft.Device.GUID's node GUID, known before the device is open.
func guidOf(a [16]byte) uint64 {
	return 0x02_00_5e_ff_fe_00_00_00 | uint64(a[13])<<16 | uint64(a[14])<<8 | uint64(a[15])
}

func cstr(dst []C.char, s string) {
	n := min(len(s), len(dst)-1)
	for i := 0; i < n; i++ {
		dst[i] = C.char(s[i])
	}
	dst[n] = 0
}

func devOf(p *C.struct_ibv_device) *gdev {
	ds, _ := configured()
	for _, d := range ds {
		if d.c == p {
			return d
		}
	}
	return nil
}

// debug warns when GOROCE_DEBUG is set.
func debug(format string, args ...any) {
	if os.Getenv("GOROCE_DEBUG") != "" {
		warn(format, args...)
	}
}

func warn(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "goroce: "+format+"\n", args...)
}

//export gr_get_device_list
func gr_get_device_list(num *C.int) **C.struct_ibv_device {
	ds, err := configured()
	if err != nil {
		warn("%v", err)
		return nil
	}
	list := (**C.struct_ibv_device)(C.calloc(C.size_t(len(ds)+1), C.size_t(unsafe.Sizeof(uintptr(0)))))
	s := unsafe.Slice(list, len(ds)+1)
	for i, d := range ds {
		s[i] = d.c
	}
	if num != nil {
		*num = C.int(len(ds))
	}
	return list
}

//export gr_device_guid
func gr_device_guid(p *C.struct_ibv_device) C.uint64_t {
	d := devOf(p)
	if d == nil {
		return 0
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], d.guid) // __be64: network order in memory
	return C.uint64_t(binary.NativeEndian.Uint64(b[:]))
}

//export gr_is_device
func gr_is_device(p *C.struct_ibv_device) C.int {
	if devOf(p) == nil {
		return 0
	}
	return 1
}

// gctx is an open context.
type gctx struct {
	c   *C.struct_ibv_context
	dev *gdev
	v   verbs.Context
	ev  *eventQueue[C.struct_gr_async]
}

//export gr_open_device
func gr_open_device(p *C.struct_ibv_device, out **C.struct_ibv_context) C.int {
	d := devOf(p)
	if d == nil {
		return C.int(syscall.ENODEV)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dev == nil {
		sd, _, err := soft.Open(d.opts)
		if err != nil {
			warn("open %s on %s: %v", d.opts.Name, d.opts.Addr, err)
			return C.int(syscall.ENODEV)
		}
		d.dev = sd
	}
	v, err := d.dev.Open()
	if err != nil {
		warn("open %s: %v", d.opts.Name, err)
		return C.int(errno(err))
	}
	ev, err := newEventQueue[C.struct_gr_async]()
	if err != nil {
		warn("open %s: %v", d.opts.Name, err)
		v.Close()
		return C.int(errno(err))
	}
	d.refs++
	c := C.gr_new_context() // inside a struct verbs_context
	c.device = p
	c.cmd_fd = -1
	c.async_fd = C.int(ev.fd)
	c.num_comp_vectors = 1
	g := &gctx{c: c, dev: d, v: v, ev: ev}
	put(unsafe.Pointer(c), g)
	go g.asyncEvents()
	*out = c
	return 0
}

//export gr_close_device
func gr_close_device(c *C.struct_ibv_context) C.int {
	g := get[gctx](unsafe.Pointer(c))
	if g == nil {
		return C.int(syscall.EINVAL)
	}
	del(unsafe.Pointer(c))
	dropContext(g)
	g.v.Close()
	g.ev.close()
	d := g.dev
	d.mu.Lock()
	d.refs--
	if d.refs == 0 {
		d.dev.Close()
		d.dev = nil
	}
	d.mu.Unlock()
	retire(C.gr_context_base(c))
	return 0
}

func ctxOf(c *C.struct_ibv_context) *gctx { return get[gctx](unsafe.Pointer(c)) }

//export gr_query_device
func gr_query_device(c *C.struct_ibv_context, a *C.struct_ibv_device_attr) C.int {
	g := ctxOf(c)
	if g == nil || a == nil {
		return C.int(syscall.EINVAL)
	}
	da, err := g.v.QueryDevice()
	if err != nil {
		return C.int(errno(err))
	}
	*a = C.struct_ibv_device_attr{}
	cstr(a.fw_ver[:], da.FWVer)
	guid := gr_device_guid(g.dev.c)
	a.node_guid = C.__be64(guid)
	a.sys_image_guid = C.__be64(guid)
	a.max_mr_size = C.uint64_t(da.MaxMRSize)
	a.page_size_cap = 0xfffff000
	a.vendor_id = C.uint32_t(da.VendorID)
	a.vendor_part_id = C.uint32_t(da.VendorPartID)
	a.hw_ver = C.uint32_t(da.HWVer)
	a.max_qp = C.int(da.MaxQP)
	a.max_qp_wr = C.int(da.MaxQPWR)
	a.device_cap_flags = C.uint(uint32(da.CapFlags))
	a.max_sge = C.int(da.MaxSGE)
	a.max_sge_rd = C.int(da.MaxSGE)
	a.max_cq = C.int(da.MaxCQ)
	a.max_cqe = C.int(da.MaxCQE)
	a.max_mr = C.int(da.MaxMR)
	a.max_pd = C.int(da.MaxPD)
	a.max_qp_rd_atom = C.int(da.MaxQPRdAtom)
	a.max_res_rd_atom = C.int(da.MaxQPRdAtom * da.MaxQP)
	a.max_qp_init_rd_atom = C.int(da.MaxQPInitRdAtom)
	a.atomic_cap = C.enum_ibv_atomic_cap(da.AtomicCap)
	a.max_ah = C.int(da.MaxAH)
	a.max_srq = C.int(da.MaxSRQ)
	a.max_srq_wr = C.int(da.MaxSRQWR)
	a.max_srq_sge = C.int(da.MaxSGE)
	a.max_pkeys = 1
	a.local_ca_ack_delay = 15
	a.phys_port_cnt = C.uint8_t(da.PhysPortCnt)
	return 0
}

//export gr_query_port
func gr_query_port(c *C.struct_ibv_context, port C.uint8_t, a *C.struct_ibv_port_attr) C.int {
	g := ctxOf(c)
	if g == nil || a == nil {
		return C.int(syscall.EINVAL)
	}
	pa, err := g.v.QueryPort(uint8(port))
	if err != nil {
		return C.int(errno(err))
	}
	*a = C.struct_ibv_port_attr{}
	a.state = C.enum_ibv_port_state(pa.State)
	a.max_mtu = C.enum_ibv_mtu(pa.MaxMTU)
	a.active_mtu = C.enum_ibv_mtu(pa.ActiveMTU)
	a.gid_tbl_len = C.int(pa.GIDTblLen)
	a.port_cap_flags = C.IBV_PORT_CM_SUP
	a.max_msg_sz = 1 << 31
	a.pkey_tbl_len = C.uint16_t(max(pa.PKeyTblLen, 1))
	a.lid = C.uint16_t(pa.LID)
	a.max_vl_num = 1
	a.active_width = 2 // 4X, as rdma_rxe reports
	a.active_speed = 32
	a.phys_state = 5 // LinkUp
	a.link_layer = C.IBV_LINK_LAYER_ETHERNET
	return 0
}

//export gr_query_gid
func gr_query_gid(c *C.struct_ibv_context, port C.uint8_t, index C.int, out *C.union_ibv_gid) C.int {
	g := ctxOf(c)
	if g == nil || out == nil || index < 0 {
		return C.int(syscall.EINVAL)
	}
	gid, err := g.v.QueryGID(uint8(port), int(index))
	if err != nil {
		return C.int(errno(err))
	}
	*(*[16]byte)(unsafe.Pointer(out)) = gid
	return 0
}

//export gr_ifindex
func gr_ifindex(c *C.struct_ibv_context) C.uint32_t {
	g := ctxOf(c)
	if g == nil {
		return 0
	}
	return C.uint32_t(ifindexOf(g.dev.opts.Addr))
}

// gr_dev_file says which device's character file /dev/infiniband/<name>
// is: 1 + its index, or 0 for none (devfile.c).
//
//export gr_dev_file
func gr_dev_file(name *C.char) C.int {
	ds, err := configured()
	if err != nil {
		return 0
	}
	for i, d := range ds {
		if C.strcmp(name, &d.c.dev_name[0]) == 0 {
			return C.int(i + 1)
		}
	}
	return 0
}
