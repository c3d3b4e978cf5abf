// Package capture decodes RoCEv2 traffic recorded in pcap and pcapng files:
// it reads the records, finds the RoCEv2 packets in them, checks them with
// package wire, prints them, and rebuilds the conversations they belong to.
//
// # Reading
//
// NewReader tells pcap from pcapng by the magic number (a gzip-compressed
// file is opened transparently) and Reader.Next returns one Record at a time.
// The link types understood are Ethernet (1, with up to two 802.1Q/802.1ad
// tags), Linux cooked capture v1 (113) and v2 (276), raw IP (101, and DLT_RAW
// as 12 or 14), and bare IPv4 (228) and IPv6 (229). A damaged file gives an
// error, never a panic.
//
// # Decoding
//
// Decoder.Decode turns a Record into a Packet. Records that are not UDP to
// port 4791 are not RoCEv2 and are skipped (Packet.RoCE is false). Every
// RoCEv2 packet is checked: framing (IPv4 header checksum, options,
// fragments, lengths), wire.Parse, the path MTU, and the ICRC. A packet that
// breaks one of those rules is still decoded as far as it goes and carries
// the first problem in Packet.Err; a bad ICRC is reported apart, in
// Packet.ICRC. The UDP checksum is shown but not held against a packet:
// senders with checksum offload capture their own packets before the NIC
// fills it in.
//
// The path MTU is either given (Decoder.PMTU) or inferred per flow from the
// payload of the flow's first valid FIRST or MIDDLE packet, which must be an
// InfiniBand MTU (wire.ValidMTU).
//
// AppendLine, AppendVerbose and AppendJSON format a Packet; Dump runs a whole
// file through one of them, or through the flow model, and DumpFile does so
// for a file named by its path ("-" for standard input).
//
// # Flows, messages and responses
//
// A flow (FlowKey) is one direction of traffic to one queue pair: source and
// destination IP address and the BTH destination QP. Flows groups packets
// into flows and the request packets of each flow into messages: FIRST,
// MIDDLE... LAST, or a single ONLY packet, READ REQUEST or atomic. It then
// matches each request message with the responses that answer it.
//
// RoCEv2 carries no source QP in RC packets, so the pairing of requests and
// responses is a heuristic. Requests from A to B carry B's QPN as their
// destination QP; the responses B sends back carry A's QPN. A flow of
// responses from B to A is therefore paired with a flow of requests from A to
// B (any destination QP) that is not paired yet and whose outstanding PSNs
// (from the oldest message not yet acknowledged to the end of the newest)
// contain the PSN of the first response; failing that, one with any message
// at that PSN. Once made, a pairing holds for the rest of the capture.
// Responses that find no request flow are counted as unmatched.
//
// Within a pair, responses are matched by PSN:
//
//   - An ACK for PSN n acknowledges every SEND and RDMA WRITE that ends at or
//     before n (ACKs may be coalesced). READs and atomics are completed only
//     by their own responses.
//   - A NAK or RNR NAK for PSN n acknowledges what ends before n and is the
//     answer to the message holding n. A PSN sequence error NAK only marks
//     the message (the requester goes back to it and retries); an RNR NAK
//     stands until a retry is acknowledged; any other NAK ends the message.
//   - An RDMA READ REQUEST reserves ceil(DMA length / path MTU) PSNs (at
//     least one) and its READ RESPONSE packets carry those PSNs; the last one
//     completes the READ. When the path MTU is not known when the request is
//     seen, the reservation is settled by the next request's PSN, by the
//     first response's payload, or by the last response.
//   - An ATOMIC ACKNOWLEDGE answers the atomic at its PSN and carries the
//     original remote value.
//
// A request packet whose PSN comes before the next new PSN of its flow is a
// retransmission. It is counted against the message holding the PSN; a
// go-back-N pass that resends several packets of one message counts once.
// UC and UD messages are never answered and never retransmitted.
//
// Flows keeps every message of the capture in memory.
package capture
