package udp

import "github.com/goroce/goroce/packetio/internal/udpsock"

// AnyPort, as Options.Port, lets the kernel choose the local port.
const AnyPort = udpsock.AnyPort

// DefaultSocketBuffer is the default SO_RCVBUF and SO_SNDBUF size, in bytes.
const DefaultSocketBuffer = udpsock.DefaultSocketBuffer

// Options configures Listen. The zero value gives the defaults. Port,
// DstPort, Batch, MaxPacket, RecvBuffer, SendBuffer, TOS and NoECN are
// shared with package uring, whose Options mean the same by them.
type Options struct {
	// Port is the local UDP port. Default 4791 (RoCEv2); AnyPort lets the
	// kernel choose one (tests).
	Port int
	// DstPort is the destination UDP port of transmitted packets. Default:
	// the local port, so 4791 in production, and two test Conns bound to the
	// same port on different addresses reach each other.
	DstPort int
	// Batch is the largest number of packets one Receive returns (one
	// recvmmsg) and one TxBatch lends; with GSO on, TxBatch lends up to
	// four GSO messages' packets (256) if Batch is smaller, so that runs of
	// packets fill GSO messages. Default packetio.DefaultBatch; at most
	// 1024 (the kernel's UIO_MAXIOV, the most one recvmmsg or sendmmsg call
	// handles).
	Batch int
	// MaxPacket is the largest transport packet (UDP payload), in bytes:
	// the size of each preallocated buffer. Longer datagrams received are
	// dropped and counted. Default packetio.DefaultMaxPacket.
	MaxPacket int
	// RecvBuffer and SendBuffer are the requested SO_RCVBUF and SO_SNDBUF
	// sizes, in bytes. Default DefaultSocketBuffer; negative keeps the
	// kernel's default. As root SO_RCVBUFFORCE/SO_SNDBUFFORCE are used,
	// which are not capped by net.core.rmem_max/wmem_max.
	RecvBuffer, SendBuffer int
	// TOS is the IPv4 TOS byte (DSCP << 2 | ECN) of transmitted packets
	// (IP_TOS). Its ECN field (the two low bits) left 0, packets leave
	// ECT(0), ECN-capable, as RoCE NICs send them: the default is TOS 0x02,
	// DSCP 0 and ECT(0). An ECN field set (packetio.ECT1, ECT0, CE) is sent
	// as given (packetio.SendTOS).
	TOS uint8
	// NoECN sends packets not-ECT (ECN field 0, TOS's DSCP kept), for a
	// network that mishandles ECN: congested switches then drop them
	// rather than mark them CE.
	NoECN bool
	// SourcePorts is the most extra sockets kept open to send packets from
	// source ports other than Port (Packet.Port; see the package
	// documentation), the least recently used closed to make room. Default
	// DefaultSourcePorts; negative: none, every packet leaves from Port and
	// Packet.Port is ignored (the Conn then reports false from
	// PerPacketSourcePort).
	SourcePorts int
	// GSO says whether Transmit uses UDP segmentation offload: a run of
	// packets of equal size (the last may be shorter) to one destination
	// from one source port leaves as one sendmmsg entry that the kernel (or
	// the NIC) cuts into datagrams. Default OffloadAuto: on when the kernel
	// offers it (Listen probes for it; Offloads says whether it is on and
	// why not). With GSO the socket sends a UDP checksum (see the package
	// documentation), and Transmit rewrites the ICRC of each packet that
	// leaves with a non-zero IPv4 Identification: packets must be RoCEv2
	// transport packets whose last four bytes are their ICRC for
	// Identification 0, as the engine seals them.
	GSO Offload
	// GRO says whether Receive takes UDP GRO trains (UDP_GRO): buffers of
	// up to 64 KiB that the kernel coalesced from consecutive datagrams of
	// one flow, split again into packets (slices of the buffer, no copy),
	// each with its position in the train (Packet.GROSeg). Default
	// OffloadAuto: on when the kernel offers it.
	GRO Offload
}

// Offload says whether a Conn uses a kernel offload. It is the same type
// as package uring's Offload.
type Offload = udpsock.Offload

const (
	// OffloadAuto uses the offload when the kernel offers it (the default).
	OffloadAuto = udpsock.OffloadAuto
	// OffloadOff never uses it.
	OffloadOff = udpsock.OffloadOff
	// OffloadRequire uses it, and Listen fails with an error matching
	// packetio.ErrNotSupported when the kernel does not offer it.
	OffloadRequire = udpsock.OffloadRequire
)

// DefaultSourcePorts is the default Options.SourcePorts: room for the 115
// flow labels that cover 16 equal-cost paths with probability 0.99, twice.
const DefaultSourcePorts = 256

func (o Options) withDefaults() Options {
	o.shared().Defaults()
	if o.SourcePorts == 0 {
		o.SourcePorts = DefaultSourcePorts
	}
	o.SourcePorts = min(o.SourcePorts, 1<<15-1)
	return o
}

// shared returns the options shared with the other socket-based path.
func (o *Options) shared() udpsock.Shared {
	return udpsock.Shared{Port: &o.Port, DstPort: &o.DstPort, Batch: &o.Batch, MaxPacket: &o.MaxPacket,
		RecvBuffer: &o.RecvBuffer, SendBuffer: &o.SendBuffer}
}

// OffloadStatus says whether a Conn uses UDP segmentation offload (GSO) and
// UDP generic receive offload (GRO), and when not, why (its String says
// it in a line). It is the same type as package uring's OffloadStatus.
type OffloadStatus = udpsock.OffloadStatus
