// Package pipe is an in-memory connected pair of packetio.Conns for tests of
// code that drives a Conn (the engine, the soft provider) without a network.
//
// Packets transmitted on one end are copied, at Transmit, into the other
// end's receive queue, so the sender may reuse its buffers at once. They
// arrive as from a real network: Addr is the sender's address, Port the
// source port the sender's Packet.Port asked for (4791, the UDP path's own
// port, when it was 0: a pipe end implements packetio.SourcePorts), Local
// the receiver's address. A packet whose destination is not the peer's address
// is not sent (packetio.ErrNoRoute). The queue is bounded: when it is full,
// further packets are dropped and counted in the receiver's Stats().RxDrops,
// as a NIC drops on a full ring; Transmit still counts them as sent.
//
// Receive blocks on channels and one reusable timer: no busy waiting and no
// goroutines. Close unblocks a pending Receive of the closed end; packets
// sent to a closed end are lost silently.
package pipe
