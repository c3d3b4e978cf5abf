package engine

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// McastQPN is the destination QPN of a UD multicast packet (IBA 10.5.2:
// 0xFFFFFF); the destination GID, the IP group, picks the QPs.
const McastQPN = wire.QPN(0xFFFFFF)

// Multicast limits, rdma_rxe's (RXE_MAX_MCAST_GRP, RXE_MAX_MCAST_QP_ATTACH).
const (
	MaxMcastGroups   = 8192
	MaxMcastQPAttach = 56
)

// McastGroup returns the IP multicast group a GID names: an IPv4-mapped
// GID of an IPv4 multicast address (::ffff:224.0.0.0/100) or an IPv6
// multicast GID (ff00::/8), as rdma_is_multicast_addr takes them.
func McastGroup(gid verbs.GID) (netip.Addr, bool) {
	a := netip.AddrFrom16(gid).Unmap()
	return a, a.IsMulticast()
}

// AttachMcast attaches a UD QP to the multicast group (ibv_attach_mcast):
// the group's packets (to McastQPN) reach it. It reports whether the group
// had no QP attached before (the packet path then joins it). Attaching a
// QP twice is not an error (rdma_rxe's answer) and changes nothing.
func (e *Engine) AttachMcast(qp *QP, group netip.Addr) (first bool, err error) {
	group = group.Unmap()
	switch {
	case qp == nil || qp.gone.Load():
		return false, fmt.Errorf("engine: attach to %v: %w", group, verbs.ErrDestroyed)
	case qp.typ != verbs.QPTUD:
		return false, fmt.Errorf("engine: attach QP %#x to %v: a %v QP (only UD QPs join multicast groups): %w", qp.num, group, qp.typ, verbs.ErrInvalidAttr)
	case !group.IsMulticast():
		return false, fmt.Errorf("engine: attach QP %#x to %v: not a multicast GID: %w", qp.num, group, verbs.ErrInvalidAttr)
	case group.Is4() != e.cfg.Local.Is4():
		return false, fmt.Errorf("engine: attach QP %#x to %v: the device speaks the other IP family: %w", qp.num, group, verbs.ErrInvalidAttr)
	}
	qps, ok := e.mcast[group]
	for _, q := range qps {
		if q == qp {
			return false, nil
		}
	}
	switch {
	case !ok && len(e.mcast) >= MaxMcastGroups:
		return false, fmt.Errorf("engine: attach QP %#x to %v: %d groups already: %w", qp.num, group, MaxMcastGroups, verbs.ErrInvalidAttr)
	case len(qps) >= MaxMcastQPAttach:
		return false, fmt.Errorf("engine: attach QP %#x to %v: %d QPs attached already: %w", qp.num, group, MaxMcastQPAttach, verbs.ErrInvalidAttr)
	}
	if e.mcast == nil {
		e.mcast = make(map[netip.Addr][]*QP)
	}
	e.mcast[group] = append(qps, qp)
	return !ok, nil
}

// DetachMcast detaches a QP from the group (ibv_detach_mcast). It reports
// whether the group has no QP attached left (the packet path then leaves
// it). A QP not attached to the group is an error, as in rdma_rxe.
func (e *Engine) DetachMcast(qp *QP, group netip.Addr) (last bool, err error) {
	group = group.Unmap()
	qps := e.mcast[group]
	for i, q := range qps {
		if q != qp {
			continue
		}
		qps = append(qps[:i], qps[i+1:]...)
		if len(qps) == 0 {
			delete(e.mcast, group)
			return true, nil
		}
		e.mcast[group] = qps
		return false, nil
	}
	n := uint32(0)
	if qp != nil {
		n = uint32(qp.num)
	}
	return false, fmt.Errorf("engine: detach QP %#x from %v: not attached: %w", n, group, verbs.ErrInvalidAttr)
}

// mcastInput delivers a UD packet to McastQPN sent to group dst to every QP
// attached to the group, as rdma_rxe's rxe_rcv_mcast_pkt does: each checks
// its state and Q_Key and takes a receive of its own; the GRH area names
// the group as the destination.
func (e *Engine) mcastInput(now int64, p *wire.Packet, perr error, from, dst netip.Addr) {
	qps := e.mcast[dst.Unmap()]
	if len(qps) == 0 || p.Info.Transport != wire.TransportUD || perr != nil {
		e.stats.UnknownQPDrops++
		return
	}
	for _, qp := range qps {
		if !qp.gone.Load() {
			qp.udReceiveTo(now, p, from, dst)
		}
	}
}
