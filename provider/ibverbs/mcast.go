//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"fmt"
	"net/netip"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

var _ verbs.McastAttacher = (*QP)(nil)

// AttachMcast attaches the UD QP to the multicast group gid
// (ibv_attach_mcast); lid is 0 on RoCE. The kernel refuses a QP of another
// type and a GID that is no multicast address with EINVAL
// (verbs.ErrInvalidAttr); rdma_rxe then joins the group's MAC on its
// netdev, and packets to the group and QPN 0xFFFFFF reach the QP.
func (q *QP) AttachMcast(gid verbs.GID, lid uint16) error {
	return q.mcast(gid, lid, true)
}

// DetachMcast detaches the QP from the group (ibv_detach_mcast): a group
// it is not attached to is EINVAL (verbs.ErrInvalidAttr).
func (q *QP) DetachMcast(gid verbs.GID, lid uint16) error {
	return q.mcast(gid, lid, false)
}

func (q *QP) mcast(gid verbs.GID, lid uint16, attach bool) error {
	verb := "ibv_detach_mcast"
	if attach {
		verb = "ibv_attach_mcast"
	}
	q.ctl.Lock()
	defer q.ctl.Unlock()
	if q.qp == nil {
		return fmt.Errorf("ibverbs: %s: QP %#x: %w", verb, q.num, verbs.ErrDestroyed)
	}
	// Checked here as ib_core checks it (rdma_is_multicast_addr, a UD QP),
	// so that the error is the same whatever the driver says.
	if a := netip.AddrFrom16(gid).Unmap(); !a.IsMulticast() || q.typ != verbs.QPTUD {
		return fmt.Errorf("ibverbs: %s: QP %#x (%v) and GID %v: a UD QP and a multicast GID only: %w", verb, q.num, q.typ, a, verbs.ErrInvalidAttr)
	}
	var g C.union_ibv_gid
	*(*[16]byte)(unsafe.Pointer(&g)) = gid
	var rc C.int
	var errno error
	if attach {
		rc, errno = C.ibv_attach_mcast(q.qp, &g, C.uint16_t(lid))
	} else {
		rc, errno = C.ibv_detach_mcast(q.qp, &g, C.uint16_t(lid))
	}
	if rc != 0 {
		return verbErr(verb, rcErrno(int(rc), errno), fmt.Sprintf("QP %#x group %v", q.num, netip.AddrFrom16(gid).Unmap()))
	}
	return nil
}
