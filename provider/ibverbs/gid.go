//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// QueryGID returns a GID table entry (ibv_query_gid).
func (c *Context) QueryGID(port uint8, index int) (verbs.GID, error) {
	var g C.union_ibv_gid
	if index < 0 || index > 1<<16 {
		return verbs.GID{}, fmt.Errorf("ibverbs: GID index %d: %w", index, verbs.ErrInvalidAttr)
	}
	cc, err := c.enter()
	if err != nil {
		return verbs.GID{}, err
	}
	defer c.leave()
	if rc := C.goroce_query_gid(cc, C.uint8_t(port), C.int(index), &g); rc != 0 {
		return verbs.GID{}, verbErr("ibv_query_gid", int(rc), fmt.Sprintf("%s port %d index %d", c.dev.name, port, index))
	}
	return verbs.GID(*(*[16]byte)(unsafe.Pointer(&g))), nil
}

// GIDType is the type of a GID table entry (enum ibv_gid_type).
type GIDType uint8

// GID types.
const (
	GIDTypeIB     GIDType = 0 // IBV_GID_TYPE_IB
	GIDTypeRoCEv1 GIDType = 1 // IBV_GID_TYPE_ROCE_V1
	GIDTypeRoCEv2 GIDType = 2 // IBV_GID_TYPE_ROCE_V2
)

// String returns "IB", "RoCE v1" or "RoCE v2", as sysfs spells them.
func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return "GIDType(" + strconv.Itoa(int(t)) + ")"
}

// GIDEntry is a GID table entry with its type and network device (struct
// ibv_gid_entry), and the IP address a RoCE GID stands for.
type GIDEntry struct {
	GID     verbs.GID
	Index   int
	Port    uint8
	Type    GIDType
	IfIndex int        // the network device's index, 0 for IB
	Netdev  string     // its name, "" when unknown
	Addr    netip.Addr // the IP address of a RoCE GID (IPv4-mapped ones unmapped); invalid for IB
}

// QueryGIDEntry returns a GID table entry with its type and network device
// (ibv_query_gid_ex; where the kernel lacks it, sysfs gid_attrs).
func (c *Context) QueryGIDEntry(port uint8, index int) (GIDEntry, error) {
	if index < 0 || index > 1<<16 {
		return GIDEntry{}, fmt.Errorf("ibverbs: GID index %d: %w", index, verbs.ErrInvalidAttr)
	}
	var e C.struct_ibv_gid_entry
	cc, err := c.enter()
	if err != nil {
		return GIDEntry{}, err
	}
	rc := C.goroce_query_gid_ex(cc, C.uint32_t(port), C.uint32_t(index), &e)
	c.leave()
	var out GIDEntry
	switch {
	case rc == 0:
		out = GIDEntry{GID: verbs.GID(*(*[16]byte)(unsafe.Pointer(&e.gid))), Index: index, Port: port,
			Type: GIDType(e.gid_type), IfIndex: int(e.ndev_ifindex)}
	case syscall.Errno(rc) == syscall.EOPNOTSUPP || syscall.Errno(rc) == syscall.ENOSYS:
		g, err := c.QueryGID(port, index)
		if err != nil {
			return GIDEntry{}, err
		}
		out = GIDEntry{GID: g, Index: index, Port: port}
		dir := fmt.Sprintf("/sys/class/infiniband/%s/ports/%d/gid_attrs", c.dev.name, port)
		t, err := os.ReadFile(fmt.Sprintf("%s/types/%d", dir, index))
		if err != nil {
			return GIDEntry{}, fmt.Errorf("ibverbs: GID %d type: %w", index, err)
		}
		switch strings.TrimSpace(string(t)) {
		case "RoCE v2":
			out.Type = GIDTypeRoCEv2
		case "IB/RoCE v1":
			out.Type = GIDTypeRoCEv1
			if pa, err := c.QueryPort(port); err == nil && pa.LinkLayer == "InfiniBand" {
				out.Type = GIDTypeIB
			}
		}
		if nd, err := os.ReadFile(fmt.Sprintf("%s/ndevs/%d", dir, index)); err == nil {
			out.Netdev = strings.TrimSpace(string(nd))
			if ifc, err := net.InterfaceByName(out.Netdev); err == nil {
				out.IfIndex = ifc.Index
			}
		}
	default:
		return GIDEntry{}, verbErr("ibv_query_gid_ex", int(rc), fmt.Sprintf("%s port %d index %d", c.dev.name, port, index))
	}
	if out.Netdev == "" && out.IfIndex != 0 {
		if ifc, err := net.InterfaceByIndex(out.IfIndex); err == nil {
			out.Netdev = ifc.Name
		}
	}
	if out.Type != GIDTypeIB {
		out.Addr = out.GID.Addr()
	}
	return out, nil
}

// GIDIndexOf returns the index of the RoCE v2 GID of addr on port (what
// rdma-core's tools take as -g / -x).
func (c *Context) GIDIndexOf(port uint8, addr netip.Addr) (int, error) {
	pa, err := c.QueryPort(port)
	if err != nil {
		return 0, err
	}
	for i := 0; i < pa.GIDTblLen; i++ {
		e, err := c.QueryGIDEntry(port, i)
		if err != nil {
			continue // empty entries fail
		}
		if e.Type == GIDTypeRoCEv2 && e.Addr == addr.Unmap() {
			return i, nil
		}
	}
	return 0, fmt.Errorf("ibverbs: %s port %d has no RoCE v2 GID for %v: %w", c.dev.name, port, addr, verbs.ErrInvalidAttr)
}
