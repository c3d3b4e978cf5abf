package packetio

import "net/netip"

// MulticastJoiner is implemented by a Conn that can receive RoCEv2
// datagrams sent to an IP multicast group (UD multicast: a QP attached to
// the group's GID). JoinGroup makes the Conn's interface a member of the
// group (IGMP or MLD through the kernel) and its Receive return the
// group's datagrams, each with Packet.Local set to the group, which the
// receiver needs: the ICRC covers the destination address, and the
// group picks the QPs the datagram goes to. Joining a group twice counts
// twice; LeaveGroup undoes one join, and the last one leaves the group.
type MulticastJoiner interface {
	JoinGroup(group netip.Addr) error
	LeaveGroup(group netip.Addr) error
}
