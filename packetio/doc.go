// Package packetio is goroce's packet path: the Conn interface through which
// a device's driver goroutine moves RoCEv2 transport packets (the UDP payload,
// BTH to ICRC) between the sans-IO engine and the network, in batches.
//
// # Lent buffers
//
// A Conn owns every buffer on the path, so that paths which keep packets in
// kernel-shared memory (AF_XDP's UMEM, io_uring's registered buffers) fit the
// same interface:
//
//   - Receive returns packets whose Buf points into Conn-owned memory. They
//     are read in place and stay valid until the next Receive call.
//   - TxBatch lends empty buffers of capacity MaxPacket(); the caller fills
//     them (append(p.Buf[:0], ...) or slicing, typically with
//     wire.AppendDatagram) and sets the destination, then hands a prefix of
//     the batch back with Transmit, which sends it and takes the buffers back.
//
// A typical driver loop:
//
//	for {
//		pkts, err := c.Receive(nextDeadline)
//		if err != nil {
//			return err // packetio.ErrClosed after Close
//		}
//		for i := range pkts {
//			engine.Input(now, &pkts[i]) // reads pkts[i].Buf in place
//		}
//		batch := c.TxBatch(32)
//		n := engine.Output(now, batch) // fills batch[:n]
//		c.Transmit(batch[:n])
//	}
//
// while application goroutines that post work call c.Wake() to end a blocked
// Receive early.
//
// # Source ports
//
// On send, Packet.Port is the UDP source port the packet leaves from (0: the
// Conn's own), which its ICRC covers. RoCE NICs and rdma_rxe derive it from
// the flow label of the address handle (wire.SourcePort), and fabrics hash
// it to pick one of their equal-cost paths, so a prober reaches many paths
// by sending with many flow labels. A Conn that can send from any port
// implements SourcePorts (PerPacketSourcePort tells): package udp opens an
// extra socket per port in use (a bounded cache) and falls back to its own
// port, recomputing the ICRC, when a port is taken; package afxdp writes the
// port into each frame's UDP header; package pipe hands it to the peer.
// Package uring sends every packet from its socket's port and ignores Port,
// so a soft device over it sends every packet from that port. The
// engine is told which (engine.Config.PerPacketSourcePort) and computes
// each ICRC for the port the packet will carry.
//
// # Concurrency
//
// Receive, TxBatch and Transmit are called from one goroutine at a time,
// not necessarily always the same one (a soft device serialises them with a
// lock). Wake, Stats, LocalAddr, MaxPacket and Close may be called from any
// goroutine. Hot paths (Receive, TxBatch, Transmit, Wake) do not allocate in
// steady state; errors may allocate.
//
// # Implementations
//
// Package pipe is an in-memory connected pair for tests; package udp is a
// UDP socket on port 4791 with recvmmsg/sendmmsg batches; package uring is the
// same socket driven through io_uring; package afxdp moves whole Ethernet
// frames through AF_XDP rings over a UMEM. Package paths opens one of them by
// name. Counters helps an implementation keep the numbers behind Stats.
//
// A soft device calls Receive, TxBatch and Transmit from its driver goroutine
// and, when the driver is not using the Conn, from the goroutines that post
// and poll (one at a time, under its lock).
package packetio
