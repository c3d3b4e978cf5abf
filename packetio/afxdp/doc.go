// Package afxdp is goroce's AF_XDP packet path: RoCEv2 frames move between
// the network interface and UMEM memory shared with the kernel through four
// rings, with no system call per packet on receive and one kick per batch on
// transmit (in copy mode; none when a zero-copy driver polls on its own).
// It implements packetio.Conn, so a soft device runs on it unchanged.
//
// # What Listen sets up
//
// Listen(local, opts) finds the interface that has the IPv4 address local
// (in the calling thread's network namespace) and:
//
//   - loads an XDP program, written in eBPF assembly with cilium/ebpf's asm
//     package (no C compiler): an untagged IPv4 frame without options, not
//     a fragment, UDP to port Options.Port (4791) and to local goes to the
//     AF_XDP socket of its RX queue through an XSKMAP (bpf_redirect_map,
//     with XDP_PASS as the action when the queue has no socket); everything
//     else, ARP and ICMP included, goes on to the kernel's stack. The
//     program counts what it redirected in a per-CPU array (XDPStats).
//     When the interface's MTU needs packets chained over frames (see
//     Jumbo frames) it is loaded with the frags flag.
//   - attaches it through a BPF link, natively (in the driver) where the
//     driver can, generically (SKB mode) otherwise (Options.Attach).
//   - opens one AF_XDP socket per RX queue (Options.Queue, Options.Queues;
//     by default every queue in use), each with its own UMEM of
//     Options.Frames frames of Options.FrameSize bytes (default 2048 x 2 KiB,
//     or x 4 KiB when the MTU needs more than a 2 KiB frame) with
//     Options.Headroom (256) bytes of headroom, optionally pre-faulted
//     (MAP_POPULATE) and locked (mlock), and its fill, completion, RX and TX
//     rings mapped from the socket at the offsets XDP_MMAP_OFFSETS reports.
//     It binds zero-copy first and falls back to copy mode
//     (Options.Copy); XDP_USE_NEED_WAKEUP is always asked for, XDP_USE_SG
//     when packets are chained. Receive
//     reads the RX rings of every queue (round robin); Transmit uses the
//     first queue's socket.
//
// Mode reports what is in use, such as "native/copy" (veth) or
// "native/zerocopy" (a NIC whose driver supports it).
//
// In copy mode the kernel does the sending inside the sendto that kicks the
// TX ring: it copies each frame into an skb and hands it to the driver. On
// veth the peer's receive path (its NAPI poll, the XDP program, the copy
// into the peer's UMEM) then runs in that same system call, and native veth
// XDP first copies each skb into a page of its own; generic XDP skips that
// copy and so runs faster on veth (BenchmarkNetnsPackets1K with
// Options.Attach = AttachGeneric). Zero-copy NICs avoid all of these
// copies.
//
// # Frames and rings
//
// Most frames (Options.RxFrames, 1792 of the default 2048) receive: they
// are all in the fill ring at the start, and the frames of the packets a
// Receive returns go back to it, in one batch, at the next Receive, so the
// kernel has a frame for every packet it may deliver until more than
// RxFrames arrive between two Receives (RxFrames/2 of 4174 bytes with 4 KiB
// frames, multi-buffer). When Receive finds that the kernel
// had taken every frame (the fill ring was empty) it counts it
// (XDPStats.FillEmptySeen), beside the kernel's own count of packets that
// found no frame (rx_fill_ring_empty_descs, RxDropped). The other frames
// transmit: TxBatch lends them, Transmit puts them on the TX ring and the
// completion ring gives them back (in copy mode before the sendto that
// kicked the kernel returns). Ring sizes are the powers of two that hold
// every frame.
//
// A received frame's data starts Headroom + XDP_PACKET_HEADROOM (256) bytes
// into its frame: the kernel adds its own headroom to the UMEM's, so a 2 KiB
// frame with the default headroom holds 1536 bytes of Ethernet frame, enough
// for an MTU of 1500, and a 4 KiB frame 3584 bytes, an MTU of up to 3570.
// A larger MTU takes several frames per packet (Jumbo frames).
//
// Each ring is one file (producer_linux.go for the fill and TX rings,
// consumer_linux.go for the RX and completion rings): the producer and
// consumer indices are free-running, each side caches the other's index and
// reads it (an acquire load) only when the cache says the ring is too full
// or too empty, and a batch is published with one store of the index. The
// Conn is set up and closed in conn_linux.go, receives in receive_linux.go
// and transmits in transmit_linux.go.
//
// # Jumbo frames
//
// A 4096-byte path MTU needs Ethernet frames of up to 4174 bytes (14
// Ethernet + 20 IPv4 + 8 UDP + 12 BTH + 16 RETH + 4 ImmDt + 4096 + 4 ICRC)
// and so a link MTU of at least 4160, 9000 in practice; no UMEM frame of
// a 4 KiB page holds one. Linux offers two ways past that: frames (chunks)
// larger than a page, which it accepts only for a UMEM backed by hugetlb
// pages (Linux 6.6; on ordinary pages XDP_UMEM_REG refuses a chunk of
// 8 KiB with EINVAL, aligned or unaligned), or multi-buffer AF_XDP (Linux
// 6.6), in which a packet spans several frames. This package uses
// multi-buffer: it needs no hugetlb pages (a system-wide reservation, none
// by default), and native XDP on veth refuses, at an MTU of 9000, any
// program not loaded with the frags flag (ERANGE: "Peer MTU is too large
// to set XDP"), so larger frames alone would work on veth in generic mode
// only. When the interface's MTU does not fit one frame (Options.FrameSize
// by default 4 KiB then), Listen loads the XDP program with
// BPF_F_XDP_HAS_FRAGS (it reads only the headers, which are in the first
// buffer) and binds the sockets with XDP_USE_SG; MultiBuffer reports it,
// and packetio/paths says "multi-buffer" in the path's detail. MaxPacket is
// then Options.MaxPacket (4160: a 4096-byte path MTU's packets, so that a
// soft device's active MTU is 4096 on a 9000-byte link) or the MTU less
// the IPv4 and UDP headers, whichever is less.
//
// The kernel writes a received packet into as many frames as it needs
// (each after the headroom), with XDP_PKT_CONTD in the options of every
// descriptor but the last. A packet in one frame is returned in place, as
// in single-buffer mode; Receive copies the frames of a longer one, in
// order, into a buffer of its batch slot (allocated by Listen: Batch x
// (42 + MaxPacket) bytes), so that its Buf is contiguous, and counts it in
// XDPStats.RxChained. A packet longer than MaxPacket is dropped and counted
// as malformed. Transmit frames are lent in slots of adjacent frames that
// hold 42 + MaxPacket bytes (two 4 KiB frames), so the engine still writes
// in place; a packet longer than one frame goes on the TX ring as one
// descriptor per frame, chained with XDP_PKT_CONTD (XDPStats.TxChained),
// and its slot is free again once the kernel has completed every one.
// Neither direction allocates. On veth between two namespaces 4158-byte
// packets at MTU 9000 move about 2.4 times the bytes per second of 1 KiB
// packets at MTU 1500, and about as many as packetio/udp at MTU 9000
// (BenchmarkNetnsJumbo, medians of 9 rounds on a busy 2-core machine; the
// AF_XDP/UDP ratio of single rounds ranged from 0.6 to 3): at this size
// the copies (the kernel's into an skb and into the UMEM, native veth
// XDP's, Receive's of a chained packet) weigh as much as the per-packet
// system calls AF_XDP saves.
//
// Where the kernel or driver refuses multi-buffer (the program's frags flag
// before Linux 5.18, XDP_USE_SG before 6.6 or on a zero-copy driver
// without it, a frags program in generic mode before 6.8, a driver without
// XDP frags support), Listen fails with an error matching ErrMultiBuffer,
// ErrMTU and packetio.ErrNotSupported that names the MTU and what was
// refused: packetio/paths' auto then takes the UDP path, which carries any
// MTU, and says why. Options.SingleBuffer refuses such an MTU up front
// (ErrMTU). A smaller MTU on the interface (up to 3570 with 4 KiB frames)
// needs no chaining.
//
// # Receive
//
// Receive reads up to Options.Batch packets from the RX rings and returns
// them with Buf the UDP payload inside the UMEM frame (or, for a packet
// chained over frames, inside Receive's copy of it), valid until the next
// Receive. Addr and Port are the IP source and UDP source port, Local the
// IP destination and TOS the IPv4 TOS byte, all read from the frame. Frames that are not well-formed RoCEv2 (wire.ParseFrame) are
// dropped and counted in RxDrops. With nothing to read, Receive waits in
// Go's netpoller on the socket (or on an epoll instance over the sockets of
// several queues), which the kernel wakes when it fills the RX ring; Wake
// and deadlines work as in packetio/udp.
//
// # Transmit
//
// TxBatch lends frames of the UMEM past 42 bytes of header room, so the
// engine writes its transport packet in place; Transmit writes in front of
// it the Ethernet header, the IPv4 header (DF set and Identification 0, as
// the UDP path's kernel writes them, so that the ICRC the engine computed
// over the pseudo-header is right; TTL 64; Options.TOS, ECT(0) by default,
// not-ECT with Options.NoECN) and the UDP header
// (checksum 0, as rdma_rxe sends over IPv4), pads frames shorter than 60
// bytes, queues the batch on the TX ring with one store and, when the
// kernel asks (in copy mode: always; the sending happens in the sendto
// call, at most 32 frames per call), kicks it with sendto.
//
// The UDP source port of a packet is its Packet.Port, or Options.Port (4791
// by default) when that is 0: the Conn implements packetio.SourcePorts, so
// a soft device over it sends a UD packet whose address handle has a flow
// label from the port the label maps to (wire.SourcePort), as RoCE NICs
// do, and everything else from Options.Port, for which it computes the
// ICRC (provider/soft Options.SourcePort must equal it). Packets to the
// Conn's own address are looped back with their source port.
//
// The destination MAC comes from the kernel: the route to the destination
// (it must leave through this interface; otherwise the packet fails with
// packetio.ErrNoRoute), then the neighbour entry of the next hop, read over
// rtnetlink. An unknown neighbour is resolved by the kernel (an
// RTM_NEWNEIGH request with NTF_USE starts ARP as a packet of its own
// would); Transmit waits for it up to Options.ResolveTimeout and fails the
// packet with ErrUnresolved after that. Resolved addresses are cached for
// Options.NeighbourTTL.
//
// # Errors and fallback
//
// When the kernel, the driver or the privileges say no (no AF_XDP or BPF,
// EPERM, EOPNOTSUPP, an MTU that needs multi-buffer where it is refused),
// Listen's error matches packetio.ErrNotSupported (and ErrPermission, or
// ErrMTU and ErrMultiBuffer), so that a caller falls back to packetio/udp
// and says which path is in use. AF_XDP
// needs CAP_NET_RAW (for the socket, in copy mode as in zero-copy mode),
// and loading and attaching the program CAP_BPF and CAP_NET_ADMIN (or
// CAP_SYS_ADMIN); Options.Lock needs CAP_IPC_LOCK or RLIMIT_MEMLOCK room.
//
// # Loopback
//
// A packet sent to the Conn's own address never reaches the interface (the
// kernel routes it through lo, which AF_XDP does not see): Transmit copies
// it to a queue of Options.RxFrames packets that the next Receive returns
// first, as rdma_rxe loops back packets for a local queue pair.
//
// Only one Conn may serve an interface at a time (one XDP program); it
// serves one address, IPv4 or IPv6 (not link-local). Over IPv6 the program
// takes frames whose next header is UDP (extension headers go to the
// kernel), Transmit writes the IPv6 header (a packet's traffic class, hop
// limit and flow label: Packet.TOS, HopLimit, FlowLabel) and computes the
// UDP checksum IPv6 requires, and neighbours are resolved through the
// kernel's IPv6 neighbour table. Frames of the other family and
// VLAN-tagged ones go to the kernel.
package afxdp
