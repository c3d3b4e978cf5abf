// Package wire is goroce's RoCEv2 codec: zero-copy views of the InfiniBand
// transport headers as they travel in UDP datagrams to port 4791, the opcode
// table, 24-bit PSN arithmetic, a validating parser, allocation-free packet
// builders, the invariant CRC (ICRC) computed the way Linux's rdma_rxe computes
// it, and the Ethernet / IPv4 / IPv6 / UDP framing for paths that handle whole
// frames.
//
// A RoCEv2 packet on the wire is
//
//	Ethernet | IPv4 or IPv6 | UDP (dst 4791) | BTH | extension headers | payload | pad | ICRC
//
// There is no LRH and no GRH on the wire: the IP header takes the GRH's place.
// This package calls everything from the BTH to the ICRC inclusive the
// "transport packet"; it is exactly the UDP payload.
//
// # Views
//
// Each header type (BTH, RETH, AETH, AtomicETH, AtomicAckETH, DETH, RDETH,
// ImmDt, IETH, and the framing headers Ethernet, IPv4, IPv6, UDP) is a []byte
// whose accessors read and write big-endian fields in place. A view never
// copies and never checks its length: slice it from a Packet returned by Parse,
// or make sure it is long enough with the header's Len constant.
//
// # Parsing
//
// Parse validates a transport packet once and records where each header and the
// payload are. It does not allocate. Its errors are sentinels of this package
// and fall in two classes, both checkable with errors.Is:
//
//   - ErrMalformed: the packet cannot be trusted (truncated header, unknown
//     opcode, TVer not 0, bad pad, reserved AETH syndrome, ...). A receiver
//     drops it silently and counts it.
//   - ErrInvalidRequest: the packet is well formed but breaks a rule a
//     responder answers with a NAK "invalid request" (payload against the path
//     MTU, RETH DMA length against the payload, misaligned atomic). The Packet
//     is still filled in so that the responder can NAK the right PSN.
//
// # ICRC and UDP sockets
//
// The ICRC covers the IP and UDP headers (with TOS/traffic class, TTL/hop
// limit, flow label and checksums masked), so it covers the IPv4 total length,
// flags and Identification. ComputeICRC takes the IP and UDP header that really
// go on the wire. A sender on a UDP socket builds them with PseudoHeader: on an
// unconnected socket with IP_PMTUDISC_DO Linux sends DF set and Identification
// 0, so the ICRC of a datagram is known before the kernel writes the header. A
// receiver on a UDP socket cannot see the sender's Identification (rdma_rxe
// uses non-zero ones); RecoverICRC solves for it: the CRC is linear over GF(2),
// so the 16 Identification bits and the DF bit that make the ICRC match can be
// found directly, leaving a 15-bit check on everything else. Receivers that see
// whole frames (AF_XDP, pcap) use CheckICRC and keep all 32 bits.
package wire
