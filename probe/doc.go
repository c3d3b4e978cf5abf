// Package probe is a pingmesh-style RoCE fabric prober and responder over
// unreliable-datagram queue pairs, on any verbs provider (goroce's soft
// device, or an RNIC and rdma_rxe through libibverbs). It speaks rpingmesh's
// v1 protocol, so a goroce prober measures rpingmesh responders and the
// other way round. It measures and reports; exporting the results
// (Prometheus, a pinglist scheduler) is left to other packages.
//
// # The protocol
//
// A probe is a RoCEv2 UD SEND ONLY without immediate data, Q_Key QKey
// (0x11111111), carrying a 40-byte Message (see Message for the layout, big
// endian): version 1, type probe, a sequence number (a random 32-bit epoch
// per Prober in the high half, a counter in the low half) and T1. The
// Responder answers each probe from the queue pair that received it, to
// the sender's GID (read from the GRH area of the receive buffer) and
// source QPN, with two ACKs: the first at once, echoing seq and T1 and
// carrying T3; the second once the first's send completion gave T4,
// carrying T1, T3 and T4. The ACKs carry the flow label the kernel derives
// for their QP pair (rdma_calc_flow_label), so that they leave from a RoCEv2
// source port. The flags byte, ignored by rpingmesh, carries
// FlagHardwareTimestamps when the sender's completion times are its
// device's hardware timestamps. Malformed or foreign payloads (too short,
// another version, the wrong type) are dropped and counted, on both sides.
//
// # The six timestamps
//
//	T1  prober    host clock (verbs.Now) just before PostSend of the probe
//	T2  prober    the probe's send completion
//	T3  responder the probe's receive completion
//	T4  responder the first ACK's send completion
//	T5  prober    the first ACK's receive completion
//	T6  prober    host clock when the prober processes the first ACK
//
// From them, each a difference of readings of one host's clock, so that
// hosts need no clock synchronisation:
//
//	NetworkRTT     = (T5 - T2) - (T4 - T3)
//	ResponderDelay = T4 - T3
//	ProberDelay    = (T6 - T1) - (T5 - T2)
//
// NetworkRTT is the time the probe and the first ACK spent between the two
// devices; the delays are the time each host took around it (posting,
// polling, scheduling). They are reported apart so that a stalled host does
// not read as a slow network. A result is OutcomeOK only when, as rpingmesh
// requires, every timestamp is non-zero, NetworkRTT is in (0, 10 s] and each
// delay in [0, 1 s]; otherwise it is OutcomeError with a Reason.
//
// # Timestamp kinds
//
// T2..T5 are the work completions' timestamps (verbs.WC.Timestamp) when the
// device gives them, else the host clock read by the prober or responder:
// T3 and T5 when their receive completion is polled (no earlier than the
// arrival), T2 and T4 just before the PostSend of the probe and the first
// ACK (no later than the departure; T2 is then T1). A post may return, and
// its completion be polled, long after the packet left (after the ACK came
// back, on a busy or virtual host), so these bounds keep the network RTT
// from reading less than it was: without completion timestamps it is an
// upper bound that includes the posts and polls of both hosts.
//
// Each Result says which kind it used: TimestampsHardware when both sides'
// devices stamp completions in hardware (verbs.TimestampHardware; the ACK's
// flags tell the responder's), so that the network RTT is the time between
// the devices, wire and switches only. TimestampsSoftware otherwise: with a
// provider that stamps completions itself (verbs.TimestampSoftware,
// goroce's soft device) the send times T2 and T4 are taken as the engine
// builds the packet, just before the packet path's sendmmsg, and on the udp
// (and uring) path the receive times T3 and T5 are the kernel's receive
// times of the packets (SO_TIMESTAMPNS): the network RTT then holds the
// kernels' UDP send and receive paths and the wire, and the time each host
// took to wake up and read a packet counts in its host delay, where
// R-Pingmesh wants it (on AF_XDP the receive times are taken when the engine
// processes the packet, so the receiver's wake-up stays in the network RTT).
// With times read by the host it also holds the posts and the waits between
// a completion and its poll, so a stalled prober inflates it.
//
// # Matching and timeouts
//
// An ACK is taken for a probe only when its sequence number, its source GID
// (the GRH), its source QPN and its echoed T1 are all the probe's; other ACKs
// are ignored and counted (Mismatched, Unmatched). A probe completes when its
// send completion and both ACKs are in; when ProberOptions.Timeout (default
// 1 s; rpingmesh waits 30 s) passes first it is OutcomeLost, and an ACK
// that arrives for it later gives one OutcomeLate result. Every probe posted
// gets exactly one result among OutcomeOK, OutcomeLost and OutcomeError
// (ReasonClosed for the probes in flight when the Prober closes). Memory is
// bounded whatever the number of peers: MaxInFlight probes in flight, as
// many recently lost ones remembered for their late ACKs, and at most 1024
// address handles (destination GID and flow label) cached, least recently
// used evicted.
//
// # ECMP paths
//
// Switches hash a RoCEv2 packet's 5-tuple, whose entropy is the UDP source
// port, and the source port follows the flow label of the address handle
// (SourcePort, as the kernel maps it). Probing with several labels takes
// several paths: LabelCount says how many distinct labels cover N
// equal-cost paths with probability P (16 paths at 0.99: 115), and
// FlowLabels gives that many distinct labels with distinct source ports,
// the same for every node given the same seed. On rdma_rxe a UD QP's source
// port is fixed at creation, so there only the responder's several QPs
// (ResponderOptions.QPs) vary the path, as they do on fabrics that hash the
// destination QPN.
//
// # Discovery
//
// A node serves its Self (GID, QPNs, Q_Key, provider, timestamp kind) as
// JSON at SelfPath with SelfHandler, by default on DefaultHTTPPort;
// FetchSelf reads it and Self.Peer turns it into the Peer to probe, so
// that probers find responders by IP address alone. NewSelfServer runs a
// Responder with its Self served over HTTP (`goroce probe responder`).
package probe
