// Package mcast receives a socket packet path's IP multicast groups for it
// (packetio.MulticastJoiner): the path's socket is bound to its unicast
// address, which the kernel never delivers group datagrams to, so each
// joined group gets a socket of its own, bound to the group's address and
// the path's port in the path's network namespace and joined on the
// interface holding the path's address, and a goroutine reading it into a
// queue the path's Receive empties first (Set.Ready is one atomic load when
// nothing waits). Group datagrams are few (UD multicast carries no bulk
// data): their buffers come from a free list, and the queue is bounded.
package mcast
