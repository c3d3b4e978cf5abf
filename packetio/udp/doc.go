// Package udp is goroce's portable packet path: RoCEv2 transport packets as
// the payload of UDP datagrams on an ordinary kernel socket, to and from port
// 4791, in batches of recvmmsg/sendmmsg. It needs no privilege and no NIC
// support, and meets Linux's rdma_rxe and RoCE NICs on the wire.
//
// # The socket
//
// Listen opens an unconnected IPv4 UDP socket bound to the local address and
// port 4791 (Options.Port overrides it, for tests), with
//
//   - IP_MTU_DISCOVER = IP_PMTUDISC_DO: Linux then sends every datagram with
//     DF set and, because the socket is unconnected, IPv4 Identification 0.
//     The ICRC covers both fields, and the sender computes it before the
//     kernel writes the header (wire.AppendDatagram assumes exactly this).
//     A datagram larger than the path MTU is refused with EMSGSIZE instead
//     of being fragmented.
//   - IP_PKTINFO, so that each received packet's Local is the address it was
//     sent to (needed when bound to 0.0.0.0, and by responders that answer
//     from the address a request came to), and IP_RECVTOS for its TOS byte
//     (DSCP and ECN).
//   - large SO_RCVBUF and SO_SNDBUF (Options.RecvBuffer/SendBuffer, 4 MiB by
//     default), forced past net.core.rmem_max/wmem_max with SO_RCVBUFFORCE /
//     SO_SNDBUFFORCE when the process may (CAP_NET_ADMIN).
//
// # Ports and flow entropy
//
// Datagrams go to the Conn's destination port (4791 by default) and leave
// from the socket's own port (4791), unless Packet.Port asks for another
// source port. RoCEv2 puts flow entropy in the UDP source port: RoCE NICs
// and rdma_rxe derive it from the address handle's flow label
// (wire.SourcePort), and fabrics hash it to choose one of their equal-cost
// paths. A socket cannot choose its source port per datagram, so the Conn
// keeps extra sockets bound to the local address and the other ports asked
// for (Options.SourcePorts of them, default 256, the least recently used
// closed to make room), opened on first use in the main socket's network
// namespace. They are set up as the main socket is for sending (DF and
// Identification 0, which the ICRC covers; UDP checksum 0; the TOS), keep
// the smallest receive buffer and drop everything that reaches them with a
// socket filter. A batch is sent with one sendmmsg per socket, in order
// within each. The Conn implements packetio.SourcePorts, so a soft device
// over it sends UD packets with a flow label from the port the label maps
// to, and everything else from 4791.
//
// A port that cannot be bound (another socket on the machine holds it) is
// tried again a second later; meanwhile its packets leave from the
// socket's own port with their ICRC recomputed for that port (the sender
// computed it for the port it asked for), so that no packet carries an ICRC
// for a header it does not have. They are counted in
// Stats().SourcePortFallbacks, the extra sockets opened in
// SourcePortSockets. A batch with more distinct ports than
// Options.SourcePorts sends the excess the same way.
//
// # Batches, buffers and waiting
//
// Receive reads up to Options.Batch datagrams with one recvmmsg into
// preallocated buffers of Options.MaxPacket bytes; a longer datagram is
// dropped (MSG_TRUNC) and counted in Stats().RxDrops. Transmit sends the
// lent buffers with sendmmsg; a packet the kernel refuses (EMSGSIZE) is
// skipped, counted in TxErrors and reported in a *packetio.TransmitError,
// and the rest of the batch goes on. Asynchronous errors (an ICMP port
// unreachable reported as ECONNREFUSED) are counted in AsyncErrors and do
// not end the Conn.
//
// The socket is non-blocking and registered with Go's netpoller: a Receive
// with nothing to read parks its goroutine until the socket is readable, its
// deadline (the socket's read deadline) passes, or Wake sets a read deadline
// in the past. Nothing spins.
//
// The system calls are made directly (golang.org/x/sys/unix) rather than
// through golang.org/x/net/ipv4's PacketConn.ReadBatch/WriteBatch, on a
// socket wrapped in an os.File rather than a net.UDPConn, because both
// allocate on the receive path. Measured with x/net v0.55.0 on Linux, batches
// of 32 on loopback: ReadBatch makes 2 allocations per datagram (a
// *net.UDPAddr and its net.IP for Message.Addr), 64 per batch; WriteBatch
// makes none; and net.UDPConn's RawConn wraps every deadline expiry in a new
// *net.OpError (2 allocations per Wake or timeout), where os.File's RawConn
// returns os.ErrDeadlineExceeded itself. This package makes no allocation per
// Receive, Transmit, Wake or timeout.
//
// The UDP path is implemented on Linux, for IPv4; Listen elsewhere, or for an
// IPv6 address, returns an error matching packetio.ErrNotSupported.
package udp
