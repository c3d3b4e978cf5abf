// Package cm is goroce's connection setup: the out-of-band exchanges that
// tell two queue pairs about each other (QP number, first PSN, GID) before
// they can talk, in the formats rdma-core's tools use, so that goroce meets
// them.
//
// # rdma-core's pingpong exchange
//
// ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong
// (libibverbs/examples/rc_pingpong.c and friends, pingpong.c) exchange one
// text message each way over TCP, port 18515 by default:
//
//	client -> server   "%04x:%06x:%06x:%s" (LID, QPN, PSN, GID) + NUL   52 bytes
//	server -> client   the same, once the server's QP is ready          52 bytes
//	client -> server   "done" + NUL                                       5 bytes
//
// The GID is 32 hex digits: the 16 bytes of the GID in order (pingpong.c's
// gid_to_wire_gid prints each 32-bit word of the GID, read in host order, as
// htonl of it with %08x, which on any host is the word's four bytes in memory
// order). The server brings its QP to RTR and RTS before it answers, so the
// client may send as soon as it has the answer. Message formats and the
// exchange are in pingpong.go: Dest, Dest.AppendMessage, ParseMessage,
// ClientExchange and ServerExchange, with Dial and Accept for TCP.
//
// perftest's exchange (ib_write_bw, ib_send_lat, ...) is package
// cm/perftest. Connections the way rdma_cm makes them (the InfiniBand
// communication manager's protocol in MADs on QP 1, as rping, perftest -R
// and other librdmacm programs use it) are package cm/rdmacm, over the wire
// format of package cm/ib.
//
// # goroce's endpoint exchange
//
// Between two goroce programs, ExchangeEndpoints swaps verbs.Endpoint
// values (QPN, PSN, GID, MTU, READ/atomic depth, and the RKey, address and
// length of memory a side exposes) over a TCP connection, one 56-byte
// message each way (AppendEndpoint, ParseEndpoint); DialEndpoint and
// AcceptEndpoint make the connection. All three give up when their context
// ends. verbs.Connect then takes each QP to RTS toward the other.
//
// FormatGID prints a GID the way the tools print it in their "local address"
// and "remote address" lines (glibc's inet_ntop for AF_INET6), which differs
// from verbs.GID.String.
package cm
