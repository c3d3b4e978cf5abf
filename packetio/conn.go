package packetio

import (
	"net/netip"
	"time"
)

// DefaultMaxPacket is the default largest transport packet (UDP payload) of a
// Conn: a 4096-byte path-MTU payload plus room for the largest header stack
// (BTH, RETH, ImmDt), pad and ICRC.
const DefaultMaxPacket = 4096 + 64

// DefaultBatch is the default number of packets per Receive and per TxBatch.
const DefaultBatch = 32

// Packet is one RoCEv2 datagram in a batch.
type Packet struct {
	// Buf is the UDP payload, BTH to ICRC. On receive it is a slice of
	// Conn-owned memory, valid until the next Receive. On send it is the
	// buffer lent by TxBatch, filled by the caller; its length is the packet
	// length and must not exceed the Conn's MaxPacket.
	Buf []byte
	// Addr is the remote IP address: the source on receive, the destination
	// on send.
	Addr netip.Addr
	// Port is, on receive, the remote UDP port: the packet's source port.
	// On send it is the UDP source port to send from, which the packet's
	// ICRC covers: 0 means the Conn's own port (its socket's, or the port
	// its options set), as does that port itself. A Conn that implements
	// SourcePorts and reports true sends each packet from its Port (see
	// SourcePorts for what it does when it cannot); any other Conn sends
	// every packet from its own port and ignores Port. The destination
	// port is always the Conn's (4791).
	Port uint16
	// Local is, on receive, the local (destination) address the packet
	// arrived on. Ignored on send.
	Local netip.Addr
	// TOS is, on receive, the IPv4 TOS byte or IPv6 traffic class (DSCP
	// << 2 | ECN) if the Conn learns it, else 0. On send it is the traffic
	// class the packet asks for (its address vector's): 0 sends it with
	// the Conn's own TOS; any other value with SendTOS(TOS, NoECN) of the
	// Conn's options: its DSCP as given and, its ECN field 0, ECT(0) unless
	// NoECN (see PacketTOS). Every Conn of this module honours it.
	TOS uint8
	// HopLimit is, on send, the IPv4 TTL or IPv6 hop limit the packet asks
	// for: 0 sends it with the Conn's (the kernel's default, 64). Ignored
	// on receive.
	HopLimit uint8
	// FlowLabel is, on send, the 20-bit IPv6 flow label the packet asks
	// for. A Conn that writes whole frames (afxdp) puts it in the header;
	// the socket paths leave the label to the kernel (see the package
	// documentation). Ignored over IPv4 and on receive.
	FlowLabel uint32
	// IPv4ID and IPv4DF are, on receive, the datagram's IPv4
	// Identification and don't-fragment flag, valid when HasIPv4ID is set:
	// paths that see whole frames (AF_XDP) set them, sockets cannot. The
	// ICRC covers both, so a receiver given them checks all 32 bits of it;
	// without them it must solve for them (wire.CheckICRCUnknownID), which
	// leaves 15. Ignored on send.
	IPv4ID    uint16
	IPv4DF    bool
	HasIPv4ID bool
	// RxTime is, on receive, when the kernel received the datagram (Unix
	// time in nanoseconds, SO_TIMESTAMPNS: the clock of verbs.Now) if the
	// Conn learns it (udp, uring), else 0. Ignored on send.
	RxTime int64
	// GROSeg is, on receive, the packet's position in the UDP GRO train it
	// arrived in (see package udp): 0 for the first packet of a train and
	// for a datagram received alone, j for the j-th after the first. The
	// kernel coalesces into one train only consecutive datagrams of one
	// flow with equal IPv4 DF and Identifications that go up by one from
	// the first (or, with DF, all equal the first's), so a receiver that
	// learnt the first's Identification knows the others'. Paths without
	// GRO leave it 0. Ignored on send.
	GROSeg uint16
	// Ext is, on send, bytes the datagram carries between Buf[:ExtAt] and
	// Buf[ExtAt:] without being copied into Buf: a large payload sent from
	// where it lies (engine.Engine.OutputGather), which must stay unchanged
	// until Transmit returns. Only a Conn that implements Gatherer and
	// reports true sends it; any other refuses a packet with Ext set
	// (ErrNoGather). Buf[ExtAt:] must hold at least the ICRC, 4 bytes
	// (ErrExtAt); the datagram is len(Buf)+len(Ext) bytes, which MaxPacket
	// bounds. TxBatch lends packets with Ext nil. Ignored on receive.
	Ext   []byte
	ExtAt int
}

// Gatherer is implemented by a Conn that may send a packet in pieces: Buf
// with Packet.Ext inserted at Packet.ExtAt, the kernel gathering them (a
// sendmmsg iovec each), so that a large payload is not copied into Buf
// first.
type Gatherer interface {
	// Gathers reports whether Transmit sends Packet.Ext.
	Gathers() bool
}

// PollDeadline returns a Receive deadline that has long passed, so that
// Receive polls without waiting, as for any past deadline, but finds that out
// without reading the clock (a Conn that checks deadlines against
// time.Now treats every deadline before 1971 as past unread): a driver that
// polls in a loop saves a clock read per round.
func PollDeadline() time.Time { return time.Unix(0, 1) }

// Conn moves batches of RoCEv2 transport packets between a driver goroutine
// and the network. Buffers are lent by the Conn in both directions (see the
// package documentation).
//
// Receive, TxBatch and Transmit are called from one goroutine at a time; the
// other methods from any goroutine.
type Conn interface {
	// Receive waits until at least one packet arrived, the deadline passed
	// (zero time: wait forever; a deadline already past: poll without
	// waiting), or Wake was called, and returns the packets received
	// (possibly none, with a nil error). The returned slice and the buffers
	// its Bufs point into belong to the Conn and stay valid until the next
	// Receive call. After Close it returns ErrClosed.
	Receive(deadline time.Time) ([]Packet, error)

	// TxBatch lends up to n packets whose Buf has length 0 and capacity at
	// least MaxPacket(), to be filled with append(p.Buf[:0], ...) or by
	// slicing, and whose Addr is to be set to the destination. They stay lent
	// until Transmit; a later TxBatch call takes back packets lent earlier
	// and not transmitted. It returns no packets after Close.
	TxBatch(n int) []Packet

	// Transmit sends the first len(pkts) packets of the last TxBatch (pkts
	// is a prefix of that batch, in order) and takes the lent buffers back.
	// It returns how many packets were handed to the kernel (or the peer)
	// and, when some were not, a *TransmitError for the first of them; a
	// packet that cannot be sent does not stop the others. It returns
	// ErrNotLent, sending nothing, if pkts is longer than the lent batch, and
	// ErrClosed after Close.
	Transmit(pkts []Packet) (int, error)

	// Wake makes a Receive blocked in another goroutine return promptly
	// (with zero packets), or the next Receive if none is blocked. It is safe
	// to call from any goroutine and cheap when nobody is blocked.
	Wake()

	// LocalAddr returns the local IP address the Conn is bound to.
	LocalAddr() netip.Addr

	// MaxPacket returns the largest transport packet (UDP payload) the Conn
	// can carry.
	MaxPacket() int

	// Stats returns a snapshot of the Conn's counters.
	Stats() Stats

	// Close closes the Conn and unblocks a pending Receive, which returns
	// ErrClosed. Closing twice returns ErrClosed.
	Close() error
}

// FullDuplex is implemented by a Conn whose two sides may be used at once:
// one goroutine sending (TxBatch, Transmit) while another receives
// (Receive), including while that Receive blocks. Each side still has one
// user at a time. A driver can then leave Receive waiting for packets while
// an application's post sends its packets itself, without waking the
// driver to do it.
type FullDuplex interface {
	// FullDuplex reports whether sending and receiving may overlap.
	FullDuplex() bool
}

// SourcePorts is implemented by a Conn that can send each packet from a
// UDP source port of its own (Packet.Port), as RoCE NICs and rdma_rxe send
// from the port a flow label maps to (wire.SourcePort), so that the
// equal-cost multipath hash of a fabric spreads flows over its paths.
type SourcePorts interface {
	// PerPacketSourcePort reports whether Transmit sends each packet from
	// the source port in its Port. When it cannot send one from that port
	// (another socket holds it), it sends it from its own port with the
	// ICRC recomputed for that port, and counts it in
	// Stats.SourcePortFallbacks: a packet never leaves with an ICRC for
	// another port than the one in its header.
	PerPacketSourcePort() bool
}

// PerPacketSourcePort reports whether c sends each packet from the source
// port in its Packet.Port (c implements SourcePorts and says so). A
// decorator of a Conn (a tee, a fault injector) passes the question on.
func PerPacketSourcePort(c Conn) bool {
	s, ok := c.(SourcePorts)
	return ok && s.PerPacketSourcePort()
}
