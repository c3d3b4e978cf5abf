// Package uring is goroce's io_uring packet path: RoCEv2 transport packets
// as UDP datagrams on a kernel socket, as in package udp, but submitted and
// reaped through io_uring's shared rings instead of recvmmsg/sendmmsg.
//
// It is experimental: under a soft device it measures slower than package
// udp (RC WRITE about 0.5x, the SEND round trip about twice as long; see
// Threads and Latency below), because a receive completes as task work on
// the thread that armed it, which provider/soft's goroutines share with
// everything else; paths.Auto never picks it. It loses nothing a socket
// would have queued: a receiver that stalls or drains slowly gets every
// datagram that fit in the socket's buffer (TestSlowReceiver). Loss under
// overload (the 64-QP end-to-end case under the race detector on a busy
// machine) is the socket's receive buffer overflowing (UDP RcvbufErrors),
// which package udp shows the same way.
//
// # The socket
//
// Listen opens the same socket as package udp (package udpsock holds the
// shared setup): unconnected, IPv4, bound to the local address and port 4791
// (Options.Port overrides it), with IP_MTU_DISCOVER=IP_PMTUDISC_DO (DF set
// and IPv4 Identification 0, which the ICRC covers), IP_PKTINFO and
// IP_RECVTOS for each packet's local address and TOS, SO_RXQ_OVFL for the
// kernel's drops (RxDropped, Stats().KernelRxDrops, as package udp), SO_NO_CHECK only
// when GSO is off (see Segmentation offloads), UDP_GRO when GRO is on,
// large socket buffers (capped by net.core.rmem_max unless root) and the
// TOS of transmitted packets (ECT(0) by default). Options has the
// fields of udp.Options that do not concern extra source ports, with the
// same meaning, and Listen the same signature, so the two paths are
// interchangeable.
//
// # The ring
//
// The package speaks to the kernel through io_uring_setup, io_uring_enter,
// io_uring_register and mmap on golang.org/x/sys/unix, with the ABI's
// structures written out by hand (sys_linux.go): x/sys has none of them and
// no Go io_uring binding is available from the module proxy. One file per
// concern: ring_linux.go sets the ring up (probing setup flags best first,
// falling back when the kernel refuses one), sq_linux.go and cq_linux.go are
// the submission and completion queues (indices loaded with acquire and
// published with release atomics, once per batch), bufring_linux.go is the
// provided-buffer ring, ops_linux.go fills SQEs; the Conn is set up and
// closed in conn_linux.go, receives in receive_linux.go and transmits in
// transmit_linux.go.
//
// Receive. Where the kernel has them (Linux 6.0), a multishot RECVMSG
// (IORING_RECV_MULTISHOT) stays armed on the socket and takes one buffer
// per datagram from a provided-buffer ring (IORING_REGISTER_PBUF_RING) of
// Options.RxBuffers slots; each buffer starts with the kernel's
// io_uring_recvmsg_out header, then the source address, the control
// messages (IP_PKTINFO, IP_TOS), then the payload, which Receive returns in
// place. The slots of a returned batch go back to the ring at the next
// Receive. When the buffers run out the kernel ends the multishot receive
// (ENOBUFS) and leaves further datagrams in the socket; the next Receive
// gives buffers back and arms it again. On older kernels Receive keeps up to
// a batch of single-shot RECVMSGs outstanding instead, each on its own slot,
// linked into one chain (IOSQE_IO_LINK) so that one at a time reads the
// socket and they complete in the datagrams' order (side by side, every
// datagram woke each of them, and one that kept losing was handed to an
// io-wq worker that completed out of order); Features tells which.
//
// Receive returns completions already in the ring without a system call;
// otherwise it waits in io_uring_enter with IORING_ENTER_GETEVENTS and a
// timeout (IORING_ENTER_EXT_ARG, Linux 5.11) for the deadline. Under one
// processor (GOMAXPROCS=1) it waits instead in Go's netpoller, on a
// duplicate of the ring's descriptor, which polls readable once a
// completion is posted: a wait in io_uring_enter holds the OS thread, and
// the runtime then hands the only processor to another thread and back for
// every wake-up. Wake writes an eventfd on which a READ is kept outstanding
// in the ring, so a waiting Receive wakes either way; like udp's Wake it
// costs only an atomic flag when nobody waits.
//
// Transmit queues one SENDMSG per packet, or per GSO message (below), and
// submits the batch with one io_uring_enter, which also waits for the
// batch's completions so that each packet's fate (EMSGSIZE, ...) is
// reported as package udp reports it; receive completions met meanwhile
// are set aside for Receive.
//
// # Segmentation offloads
//
// Options.GSO and Options.GRO, and Offloads, mean what they mean in package
// udp (see its documentation): Listen probes UDP_SEGMENT with getsockopt
// and sets UDP_GRO, each on unless turned off (OffloadRequire fails Listen
// without it), and the socket keeps its UDP checksum unless GSO is off.
//
// With GSO, Transmit makes each run of consecutive packets to one
// destination, of equal size but the last, which may be shorter, at most
// wire.GSOMaxSegments (64) and 65507 bytes, one SENDMSG whose msghdr has
// one iovec per packet (no copy) and a UDP_SEGMENT cmsg with the size; the
// kernel (or the NIC) cuts it into datagrams, segment k with IPv4
// Identification k and DF, so Transmit first rewrites segment k's ICRC for
// k (wire.ICRCIDCache.ChangeID; packets come sealed for Identification 0).
// A message the kernel refuses (EINVAL, EMSGSIZE, EIO) has its ICRCs
// restored and its packets sent again one SENDMSG each in a second
// submission, each packet's fate reported, counted in
// Stats().GSOFallbacks; EIO turns GSO off. Unlike package udp, whose
// sendmmsg stops at the refused message, the SENDMSGs after it were
// already submitted, so a refused message's packets leave after the rest
// of the batch (the kernel refuses GSO for a misconfiguration, a segment
// beyond the path MTU or a device without checksum offload, not in steady
// state). With GSO a TxBatch lends up to 256 packets (four GSO messages',
// as package udp) whatever Options.Batch.
//
// With GRO each receive slot holds a 64 KiB payload (a whole train) and
// room for the UDP_GRO cmsg, which the kernel writes before IP_PKTINFO and
// IP_TOS. Receive reads the segment size from the control messages (after
// the io_uring_recvmsg_out header of a multishot receive, or through the
// msghdr of a single-shot one) and splits the train into packets, slices
// of the slot with the train's Addr, Port, Local, TOS and RxTime, each with
// its position in Packet.GROSeg (Linux 6.10 and later, which coalesce only
// datagrams whose Identifications count up); a Receive then returns up to
// a batch of trains, more packets than Options.Batch. Slots that large
// make fewer worth having: by default 2 x Batch, at least 64 (about 4
// MiB, the size of the socket's default receive buffer; each holds up to
// 64 datagrams), where without GRO 8 x Batch, at least 256, of MaxPacket
// bytes each (about 1 MiB) are kept; Options.RxBuffers sets the number
// either way. Datagrams that arrive uncoalesced (senders without GSO,
// devices without GRO) take a whole slot each, so the slots run out sooner
// and the multishot receive is armed again more often. The receives ask
// for MSG_TRUNC, so that a train longer than its slot (a device whose
// gro_max_size exceeds 64 KiB) is known by its whole length: the segments
// that lie whole in the slot are returned and the rest counted in
// Stats().RxDrops, none returned in part. Stats().GROBuffers and
// GROSegments count the trains.
//
// The Conn sends packets in pieces (it is a packetio.Gatherer, as package
// udp's): a packet's Packet.Ext goes out as an iovec of its own between
// Buf[:ExtAt] and Buf[ExtAt:], inside GSO messages like any other packet,
// so a soft device over it sends large payloads from where they lie
// (engine.Engine.OutputGather).
//
// Every packet leaves from the socket's own port: Packet.Port is ignored on
// send and the Conn does not implement packetio.SourcePorts, so a soft
// device over it computes every ICRC for that port and sends UD packets
// with a flow label from it too (package udp sends them from the port the
// label maps to).
//
// # Threads
//
// The kernel completes socket requests with task work run by the thread
// that submitted them, and Go moves goroutines between threads;
// provider/soft even calls Receive and Transmit from the goroutines that
// post and poll. The ring is therefore set up for any thread to submit and
// reap, with IORING_SETUP_COOP_TASKRUN where the kernel has it (Linux
// 5.19): when a datagram arrives the kernel does not interrupt the thread
// that armed the multishot receive but completes the receive at that
// thread's next kernel entry (its next system call, interrupt or scheduler
// tick; at once if it sleeps), which batches receive work. When Receive is
// called from another thread it waits for that. Options.NoCoopTaskrun has
// the kernel interrupt the arming thread instead: shorter single-packet
// round trips from moving callers, less bulk throughput (both measured by
// BenchmarkSoftNetns).
//
// With Options.SingleIssuer the caller promises one OS thread
// (runtime.LockOSThread) and the ring uses IORING_SETUP_SINGLE_ISSUER and
// DEFER_TASKRUN (Linux 6.1): task work runs only when that thread reaps,
// and a call from another thread fails with ErrWrongThread. Close from
// another thread then cannot cancel the outstanding receive; it closes the
// ring and leaves the receive memory mapped rather than risk the kernel
// writing into memory reused for something else.
//
// # Latency
//
// A Receive that finds nothing sleeps in io_uring_enter, and a datagram is
// received by task work of the arming thread, so each message of a
// request/response exchange wakes a sleeping thread. Package udp's
// goroutines park in Go's netpoller instead, and the runtime runs the
// woken goroutine on a thread that is already awake (on loopback, the
// sender's), so a single-packet round trip between two waiting ends costs
// less there. The io_uring path's strength is batches: a Receive that finds
// completions in the ring makes no system call, and a Transmit makes one
// per batch. In a stream of datagrams both paths spend their time in the
// kernel's per-datagram UDP work (socket buffers, routing, copies), which
// io_uring does not change; its own submission and completion work is a few
// percent of a profile.
//
// # Registered buffers
//
// SENDMSG and RECVMSG take no registered (fixed) buffers; the operation
// that does, SEND_ZC, pins the pages and posts a second completion per
// packet, which costs more than the copy it saves for packets of a few KiB,
// so the package does not register buffers (Features().RegisteredBuffers).
//
// # Errors
//
// Without a usable io_uring (a kernel built without it: ENOSYS; disabled by
// the kernel.io_uring_disabled sysctl or a seccomp filter: EPERM; older
// than Linux 5.11) Listen returns an error matching ErrUnavailable and
// packetio.ErrNotSupported; callers then fall back to package udp.
//
// # Tests and benchmarks
//
// The tests run package packetiotest's contract suite on every receive
// path (multishot, single-shot, without COOP_TASKRUN) over loopback
// (127.0.7.x) and between two network namespaces over veth (10.79.7.0/24,
// root only), GSO and GRO on loopback and between namespaces whose veths
// cut GSO messages and coalesce them again, with the frames captured and
// their Identifications and ICRCs checked, the ring code on its own (full SQ, wrap-around, CQ overflow
// backlog, buffer-ring tail), a stress run, the refusal of io_uring by a
// seccomp filter, and RC WRITE, READ and SEND between two soft devices over
// io_uring Conns, with GSO and GRO and without, with the frames captured
// and, when GOROCE_WIRE_CHECK names wire-check's check-pcap.sh, judged by
// it. The benchmarks measure packets per second at 64 B and 1 KiB and the
// 64 B round trip, on loopback and between namespaces, and soft-device
// WRITE goodput (with GSO and GRO on and off) and SEND round trip, each
// beside package udp in the same invocation:
//
//	go test ./packetio/uring -run - -bench . -count 6 | tee out.txt
//	benchstat -col /path out.txt
//
// IPv6 and each packet's traffic class and hop limit work as in package udp
// (see its documentation): an IPv6-only socket, and IP_TOS/IP_TTL or
// IPV6_TCLASS/IPV6_HOPLIMIT control messages on the SENDMSG of a packet
// that asks for its own.
//
// The io_uring path is implemented on Linux; Listen elsewhere returns an
// error matching packetio.ErrNotSupported.
package uring
