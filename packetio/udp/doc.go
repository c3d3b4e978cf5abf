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
//     DF set and, because the socket is unconnected, IPv4 Identification 0
//     (k for segment k of a GSO message, below). The ICRC covers both
//     fields, and the sender computes it before the kernel writes the header
//     (wire.AppendDatagram assumes exactly this). A datagram larger than the
//     path MTU is refused with EMSGSIZE instead of being fragmented.
//   - IP_PKTINFO, so that each received packet's Local is the address it was
//     sent to (needed when bound to 0.0.0.0, and by responders that answer
//     from the address a request came to), and IP_RECVTOS for its TOS byte
//     (DSCP and ECN).
//   - SO_NO_CHECK (UDP checksum 0, as rdma_rxe sends) only when GSO is off:
//     UDP GSO refuses it (EINVAL), and a receiver's GRO coalesces only
//     datagrams with a checksum. With GSO the kernel fills the checksum (or
//     leaves it to the NIC); rdma_rxe and RoCE NICs accept it, and the ICRC
//     masks it. One socket does both: a second, send-only socket on port
//     4791 would need SO_REUSEPORT, which spreads received datagrams over
//     both.
//   - UDP_GRO, when GRO is on (below).
//   - SO_RXQ_OVFL: every datagram read after the kernel dropped some for a
//     full receive buffer carries the socket's drop count, which Receive
//     keeps (Stats().KernelRxDrops, and RxDropped: packetio.RxDropCounter,
//     an atomic load a driver may read every round). The count is learnt
//     with the next datagram read, so drops at the end of a burst show
//     when traffic resumes.
//   - IP_TOS: the TOS byte of transmitted packets, ECT(0) (0x02, DSCP 0) by
//     default, as RoCE NICs send RoCEv2, so that congested switches mark
//     packets CE rather than drop them and the receiver answers with CNPs.
//     Options.TOS chooses the DSCP (and an ECN field other than ECT(0));
//     Options.NoECN sends not-ECT, for a network that mishandles ECN.
//   - large SO_RCVBUF and SO_SNDBUF (Options.RecvBuffer/SendBuffer, 4 MiB by
//     default), forced past net.core.rmem_max/wmem_max with SO_RCVBUFFORCE /
//     SO_SNDBUFFORCE when the process may (CAP_NET_ADMIN, as root). Without
//     that privilege the kernel silently caps the request at
//     net.core.rmem_max / wmem_max (the kernel's default 212992 bytes, which
//     SocketBuffers reports doubled, 425984) and Listen does not fail: a
//     bulk receiver then overflows its buffer sooner (RxDropped counts
//     what it lost); raise the sysctls (sysctl -w
//     net.core.rmem_max=8388608) to get the 4 MiB unprivileged.
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
// Identification 0, which the ICRC covers; a UDP checksum with GSO, else 0;
// the TOS), keep the smallest receive buffer and drop everything that
// reaches them with a socket filter. A batch is sent with one sendmmsg per socket, in order
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
// # Segmentation offloads
//
// Options.GSO (default: on when the kernel offers UDP_SEGMENT, which
// Listen probes with getsockopt) makes Transmit send each run of
// consecutive packets of one socket (source port) to one destination, of
// equal size but the last, which may be shorter, as one sendmmsg entry: one
// iovec per packet (no copy) and a UDP_SEGMENT control message with the
// size, at most wire.GSOMaxSegments (64, Linux's UDP_MAX_SEGMENTS before
// 6.10; 128 since) packets and 65507 bytes. The kernel, or the NIC, cuts it
// into one datagram per packet, each with its own lengths, DF, and IPv4
// Identification k for segment k. The ICRC covers the Identification, and
// packets come sealed for 0, so Transmit rewrites the ICRC of segment k for
// k before sending (wire.ICRCIDCache.ChangeID: the CRC is affine, so that
// is an XOR of cached per-bit deltas, a few ns, not a CRC over the packet).
// Packets must therefore be RoCEv2 transport packets whose last four bytes
// are their ICRC for Identification 0; send anything else with GSO off. A
// message the kernel refuses (EINVAL, EMSGSIZE, or EIO from a device
// without checksum offload before Linux 6.11) is sent again one datagram
// per packet, its ICRCs restored, and counted in Stats().GSOFallbacks; EIO
// also turns GSO off for the Conn. Stats().GSOMessages and GSOSegments count
// what went as GSO; Offloads says whether GSO is on and, if not, why.
//
// Options.GRO (default: on when the kernel offers UDP_GRO) has the kernel
// coalesce consecutive datagrams of one flow, of equal size but the last,
// into one buffer of up to 64 KiB with a UDP_GRO control message giving the
// size (each receive buffer is then 64 KiB, so that nothing is cut off).
// Receive splits it into packets, slices of the buffer, and with Linux 6.10
// or later gives each its position in the run (Packet.GROSeg): those
// kernels coalesce only datagrams whose Identifications go up by one from
// the first's, or, with DF, all equal it, so the engine, having learnt the
// first's Identification from its ICRC, checks the others' ICRCs on all 32
// bits instead of solving for the Identification. A Receive may then return
// up to 64 packets per buffer, more than Options.Batch. GRO needs a UDP
// checksum from the sender and NAPI on the receiving device: GSO messages
// that stay whole to the socket (loopback; veth, which passes them on) arrive
// as one buffer each; datagrams are coalesced again only on a device with
// GRO on, which on veth also needs `ethtool -K veth0 gro on` (or an XDP
// program) and, when the sending veth has TSO, UDP GRO forwarding
// (`ethtool -K veth0 rx-udp-gro-forwarding on`) on the receiving veth.
//
// # Packets in pieces
//
// The Conn is a packetio.Gatherer: a packet whose Ext is set goes out as
// three iovecs of one datagram, Buf[:ExtAt], Ext and Buf[ExtAt:], so that a
// large payload is sent from where it lies (engine.Engine.OutputGather
// leaves it in its memory region) and the kernel's copy into the socket
// buffer is its only one. Such a packet joins the GSO message of its run
// like any other of its length; the ICRC that segment k's Identification
// changes is the end of Buf (wire.ICRCIDCache.ChangeIDOf).
//
// A receiver on a socket sees no Identification, so the engine checks the
// ICRC of a packet received alone by solving for the Identification and DF
// (15 of the 32 bits); a flow that showed small Identifications with DF, as
// every sender of this package writes (0, or k < 64 for GSO segments), is
// held to those: 26 bits, 64 Identifications accepted (see package engine).
//
// # Batches, buffers and waiting
//
// Receive reads up to Options.Batch datagrams (or GRO buffers) with one
// recvmmsg into preallocated buffers of Options.MaxPacket bytes (64 KiB with
// GRO); a longer datagram is dropped (MSG_TRUNC) and counted in
// Stats().RxDrops. Transmit sends the
// lent buffers with sendmmsg; a packet the kernel refuses (EMSGSIZE) is
// skipped, counted in TxErrors and reported in a *packetio.TransmitError,
// and the rest of the batch goes on. Asynchronous errors (an ICMP port
// unreachable reported as ECONNREFUSED) are counted in AsyncErrors and do
// not end the Conn.
//
// The socket is non-blocking and kept out of Go's netpoller. A Receive with
// nothing to read and a deadline to come parks its goroutine in the
// netpoller on an epoll instance of the Conn's own, which the socket joins
// for the wait, until the socket is readable, the deadline (the instance's
// read deadline) passes, or Wake sets a read deadline in the past; a
// Transmit that finds the send buffer full waits the same way, on a second
// instance, for it to drain (Stats().TxWaits). Nothing spins. The socket
// leaves the instance after 64 polls in a row that did not wait: a socket
// that any epoll instance watches runs epoll's wake-up for every datagram
// queued to it, in the sender's context, whether a goroutine waits or not
// (0.27 µs a datagram between two namespaces here), and a busy driver that
// polls needs none. goroce bench send_lat 64 B between two namespaces, 7
// interleaved rounds, medians: 6.81 against 7.15 µs with the socket in the
// netpoller for good, the raw-UDP baseline's 6.18 against 6.43 µs.
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
// Receive, Transmit, Wake or timeout. The sendmmsg and recvmmsg calls are raw
// system calls (unix.RawSyscall6), which the Go scheduler does not see: on a
// socket that never blocks they return within microseconds, and with
// unix.Syscall6 the runtime's monitor handed the processor to another thread
// on almost every tick while packets flowed (see recvmmsg). With GSO a
// TxBatch lends up to 256 packets, four full GSO messages, whatever
// Options.Batch (udpsock.GSOTxBatch).
//
// # IPv6 and the IP header of each packet
//
// Listen on an IPv6 address opens an IPv6-only socket (IPV6_V6ONLY) with the
// same options in their IPv6 forms (IPV6_MTU_DISCOVER, IPV6_RECVPKTINFO,
// IPV6_RECVTCLASS, IPV6_TCLASS) and the UDP checksum on, as IPv6 requires;
// GSO and GRO work as over IPv4, without the Identifications (IPv6 has none).
// A Conn sends to addresses of its own family only (packetio.ErrAddress).
// A packet that asks for a traffic class or hop limit of its own
// (Packet.TOS, Packet.HopLimit: an address vector's) leaves with them,
// through IP_TOS and IP_TTL (IPV6_TCLASS and IPV6_HOPLIMIT) control
// messages on its sendmmsg entry; a GSO message holds only packets that ask
// for the same. The flow label of an IPv6 datagram is the kernel's
// (Packet.FlowLabel is not sent: a socket may set only labels it leased
// with IPV6_FLOWLABEL_MGR); the flow label still picks the UDP source port.
//
// The UDP path is implemented on Linux; Listen elsewhere returns an error
// matching packetio.ErrNotSupported.
package udp
