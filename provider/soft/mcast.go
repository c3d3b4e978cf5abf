package soft

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/verbs"
)

var _ verbs.McastAttacher = (*QP)(nil)

// AttachMcast attaches the UD QP to the multicast group gid names
// (ibv_attach_mcast): an IPv4-mapped GID of an IPv4 multicast address
// (::ffff:239.1.1.1) on an IPv4 device, an IPv6 multicast GID (ff0e::1)
// on an IPv6 one. The packet path joins the IP group on the device's
// interface with the group's first QP (a packet path that cannot join
// one, packetio.MulticastJoiner, refuses with verbs.ErrNotSupported), and
// UD packets sent to the group and QPN 0xFFFFFF reach every attached QP
// with its Q_Key, the sending device's own included (as a NIC's multicast
// loopback). lid is ignored (RoCE has no LIDs). Attaching twice is not an
// error; a QP of another type, a GID that is no multicast address, are
// verbs.ErrInvalidAttr.
func (q *QP) AttachMcast(gid verbs.GID, lid uint16) error {
	if err := q.check(); err != nil {
		return err
	}
	group, _ := engine.McastGroup(gid)
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	first, err := q.d.eng.AttachMcast(q.qp, group)
	if err != nil {
		return fmt.Errorf("soft: %w", err)
	}
	if first {
		if err := q.d.joinGroup(group); err != nil {
			q.d.eng.DetachMcast(q.qp, group)
			return err
		}
	}
	for _, g := range q.mcast {
		if g == group {
			return nil
		}
	}
	q.mcast = append(q.mcast, group)
	return nil
}

// DetachMcast detaches the QP from the group (ibv_detach_mcast); the last
// QP's detach leaves the IP group. A group the QP is not attached to is
// verbs.ErrInvalidAttr.
func (q *QP) DetachMcast(gid verbs.GID, lid uint16) error {
	if err := q.check(); err != nil {
		return err
	}
	group, _ := engine.McastGroup(gid)
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	return q.detachLocked(group)
}

func (q *QP) detachLocked(group netip.Addr) error {
	last, err := q.d.eng.DetachMcast(q.qp, group)
	if err != nil {
		return fmt.Errorf("soft: %w", err)
	}
	for i, g := range q.mcast {
		if g == group {
			q.mcast = append(q.mcast[:i], q.mcast[i+1:]...)
			break
		}
	}
	if last {
		return q.d.leaveGroup(group)
	}
	return nil
}

// detachAll detaches a QP being destroyed from its groups. Called with
// d.mu held.
func (q *QP) detachAll() {
	for len(q.mcast) > 0 {
		if q.detachLocked(q.mcast[0]) != nil {
			q.mcast = q.mcast[1:]
		}
	}
}

// joinGroup has the packet path join group.
func (d *Device) joinGroup(group netip.Addr) error {
	j, ok := d.conn.(packetio.MulticastJoiner)
	if !ok {
		return fmt.Errorf("soft: attach to %v: the packet path (%T) cannot join IP multicast groups: %w", group, d.conn, verbs.ErrNotSupported)
	}
	if err := j.JoinGroup(group); err != nil {
		if errors.Is(err, packetio.ErrNotSupported) {
			err = fmt.Errorf("%w (%w)", err, verbs.ErrNotSupported)
		}
		return fmt.Errorf("soft: attach to %v: %w", group, err)
	}
	return nil
}

// leaveGroup has the packet path leave group.
func (d *Device) leaveGroup(group netip.Addr) error {
	if j, ok := d.conn.(packetio.MulticastJoiner); ok {
		if err := j.LeaveGroup(group); err != nil {
			return fmt.Errorf("soft: detach from %v: %w", group, err)
		}
	}
	return nil
}
