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
//		// toTime maps the engine's clock to a time.Time; the zero
//		// time (no timer set) waits until a packet or a Wake.
//		pkts, err := c.Receive(toTime(eng.NextDeadline()))
//		if err != nil {
//			return err // packetio.ErrClosed after Close
//		}
//		now := clock()
//		for i := range pkts {
//			eng.Input(now, pkts[i].Buf, pkts[i].Addr, pkts[i].Port) // reads Buf in place
//		}
//		eng.Tick(now)
//		batch := c.TxBatch(32)
//		n := 0
//		for n < len(batch) {
//			k, to, ok := eng.Output(now, batch[n].Buf[:cap(batch[n].Buf)])
//			if !ok {
//				break
//			}
//			batch[n].Buf, batch[n].Addr = batch[n].Buf[:k], to
//			n++
//		}
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
// # Congestion
//
// The socket and AF_XDP paths send every packet ECN-capable, ECT(0), as RoCE
// NICs do (their Options.NoECN turns it off; SendTOS), a packet that asks
// for a traffic class of its own (Packet.TOS, from its address vector) with
// that DSCP and, its ECN field left 0, still ECT(0) (PacketTOS), and report each
// received packet's TOS byte, so a receiver sees the CE marks of congested
// switches (Packet.TOS&ECNMask == CE). A Conn that learns how many packets
// the kernel dropped before it read them (its receive buffer or ring full:
// the receiver itself congested) implements RxDropCounter, an atomic load
// a driver reads every round, and counts them in Stats.KernelRxDrops.
//
// # Implementations
//
// Package pipe is an in-memory connected pair for tests; package udp is a
// UDP socket on port 4791 with recvmmsg/sendmmsg batches; package uring is the
// same socket driven through io_uring; package afxdp moves whole Ethernet
// frames through AF_XDP rings over a UMEM. Package paths opens one of them by
// name. Helpers for an implementation: Counters keeps the numbers behind
// Stats (Counters.Transmitted ends a Transmit), TxLender keeps TxBatch's
// lending and Transmit's checks of it, TxDest checks a destination and a
// length, TxFailures collects the packets not sent.
//
// A soft device calls Receive, TxBatch and Transmit from its driver goroutine
// and, when the driver is not using the Conn, from the goroutines that post
// and poll (one at a time, under its lock).
package packetio
