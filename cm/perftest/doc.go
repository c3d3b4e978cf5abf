// Package perftest speaks perftest's out-of-band exchange (perftest 4.5,
// src/perftest_communication.c), so that a goroce benchmark and ib_write_bw,
// ib_send_lat and the other perftest programs can be the two sides of one
// test.
//
// The exchange runs over one TCP connection, port 18515 by default; the
// client (the side given a server name) connects. Every step is a pair of
// equal-sized messages: the client writes its message and then reads the
// server's; the server reads first and then answers. The steps, in order:
//
//	version         16 bytes: a version string ("6.06"), NUL-padded
//	cycle_buffer     4 bytes: big-endian int (the page size, 4096)
//	cache_line_size  4 bytes: big-endian int (64)
//	MTU              2 bytes: the path MTU enum (1..5) as "%d" and its NUL
//	keys           108 bytes per message, once per QP and then again as
//	                         sync handshakes (see KeyMsgLen):
//	                         "%04x:%04x:%06x:%06x:%08x:%016llx:" lid, out_reads, qpn, psn, rkey, vaddr
//	                         16 x "%02x:" the GID bytes, "%08x:" srqn, NUL
//	reports        8 bytes x 5 (bandwidth tests): size, iterations, peak,
//	                         average, message rate; big-endian, the
//	                         last three IEEE 754 doubles
//	"done\0"         5 bytes, written by both sides after a last handshake;
//	                         neither reads it
//
// Each perftest program uses these steps in its own order (see Script); Conn
// has one method per step and leaves the order to its caller. Each side
// takes the larger cycle_buffer and cache_line_size and the smaller MTU.
//
// perftest without a GID (gid_index -1, InfiniBand) sends 59-byte key
// messages without the GID; RoCE always carries the GID, so only the 108-byte
// form is spoken here.
//
// # -R: rdma_cm
//
// perftest's -R connects through rdma_cm instead (DialCM, AcceptCM: soft
// devices, which run goroce's connection manager on QP 1): one RC
// connection in rdma_cm's TCP port space, port 18515 by default, carries
// every step above as a SEND into the peer's one posted receive, the same
// bytes but for the key messages, which are perftest's struct
// pingpong_dest in binary (CMKeyMsgLen, AppendCMKeyMsg), and for "done",
// which is not sent. The data QPs then connect by rdma_cm to the same port,
// one connection each, between two handshakes (Conn.CM tells the port).
package perftest
