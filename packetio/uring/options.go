package uring

import "github.com/goroce/goroce/packetio/internal/udpsock"

// AnyPort, as Options.Port, lets the kernel choose the local port.
const AnyPort = udpsock.AnyPort

// DefaultSocketBuffer is the default SO_RCVBUF and SO_SNDBUF size, in bytes.
const DefaultSocketBuffer = udpsock.DefaultSocketBuffer

// maxRxBuffers bounds Options.RxBuffers: buffer IDs are 16 bits and a
// provided-buffer ring has at most 32768 entries.
const maxRxBuffers = 1 << 15

// Options configures Listen. The zero value gives the defaults.
type Options struct {
	// Port, DstPort, MaxPacket, RecvBuffer, SendBuffer, TOS and NoECN are
	// package udp's, with its defaults: the local UDP port (4791; AnyPort
	// lets the kernel choose), the destination port of transmitted packets
	// (the local port), the largest transport packet
	// (packetio.DefaultMaxPacket; longer datagrams received are dropped
	// and counted), the requested SO_RCVBUF and SO_SNDBUF sizes
	// (DefaultSocketBuffer, forced as root, else capped by
	// net.core.rmem_max and wmem_max; negative keeps the kernel's), and the
	// IPv4 TOS byte (IP_TOS): ECT(0) when its ECN field is left 0 (the
	// default, TOS 0x02), as given when set, not-ECT with NoECN
	// (packetio.SendTOS).
	Port, DstPort          int
	MaxPacket              int
	RecvBuffer, SendBuffer int
	TOS                    uint8
	NoECN                  bool
	// Batch is the largest number of packets one Receive returns and one
	// TxBatch lends (one SQE each, one io_uring_enter per Transmit).
	// Default packetio.DefaultBatch; at most 1024.
	Batch int
	// RxBuffers is the number of receive buffers the kernel fills (the
	// provided-buffer ring's size, or the slots of the single-shot
	// RECVMSGs, armed a batch at a time), rounded up to a power of two.
	// Each holds MaxPacket bytes of payload, or 64 KiB (a whole GRO train)
	// when GRO is on.
	// Default 8 x Batch, at least 256; with GRO 2 x Batch, at least 64
	// (about 4 MiB, see the package documentation); at most 32768.
	RxBuffers int
	// SingleIssuer promises that every Receive, TxBatch and Transmit call
	// comes from one OS thread: the goroutine that makes them called
	// runtime.LockOSThread before the first and keeps the thread. The ring
	// then uses IORING_SETUP_SINGLE_ISSUER and IORING_SETUP_DEFER_TASKRUN
	// (Linux 6.1), where the kernel completes receives only when that
	// thread waits for them. A call from another thread fails with
	// ErrWrongThread. Default false: Go moves goroutines between threads,
	// so the ring is set up for any thread to submit and reap.
	SingleIssuer bool
	// NoCoopTaskrun leaves IORING_SETUP_COOP_TASKRUN out. With it (the
	// default, Linux 5.19) the kernel does not interrupt the thread that
	// armed the receive when a datagram arrives but completes the receive
	// at that thread's next kernel entry, which batches receive work;
	// without it the kernel interrupts that thread at once, wherever it
	// is, which shortens single-packet round trips when Receive is called
	// from goroutines on other threads (provider/soft calls it from
	// PostSend and Poll too) and costs bulk throughput (see the package
	// documentation).
	NoCoopTaskrun bool
	// GSO says whether Transmit uses UDP segmentation offload, as package
	// udp's Options.GSO: a run of packets of equal size (the last may be
	// shorter) to one destination leaves as one SENDMSG that the kernel
	// (or the NIC) cuts into datagrams. Default OffloadAuto: on when the
	// kernel offers it (Listen probes for it; Offloads says whether it is
	// on and why not). With GSO the socket sends a UDP checksum, and
	// Transmit rewrites the ICRC of each packet that leaves with a non-zero
	// IPv4 Identification: packets must be RoCEv2 transport packets whose
	// last four bytes are their ICRC for Identification 0, as the engine
	// seals them.
	GSO Offload
	// GRO says whether Receive takes UDP GRO trains (UDP_GRO), as package
	// udp's Options.GRO: buffers of up to 64 KiB that the kernel coalesced
	// from consecutive datagrams of one flow, split again into packets
	// (slices of the buffer, no copy), each with its position in the train
	// (Packet.GROSeg). Default OffloadAuto: on when the kernel offers it.
	GRO Offload
}

// Offload says whether a Conn uses a kernel offload. It is the same type
// as package udp's Offload.
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

// OffloadStatus says whether a Conn uses UDP segmentation offload (GSO) and
// UDP generic receive offload (GRO), and when not, why (its String says
// it in a line). It is the same type as package udp's OffloadStatus.
type OffloadStatus = udpsock.OffloadStatus

func (o Options) withDefaults() Options {
	o.shared().Defaults()
	return o
}

// rxBuffers returns the number of receive buffers: Options.RxBuffers, or
// its default for slots of MaxPacket bytes, or of a GRO train each.
func (o Options) rxBuffers(gro bool) int {
	n := o.RxBuffers
	switch {
	case n > 0:
	case gro:
		// A slot holds a whole train, up to 64 datagrams: fewer slots
		// hold more packets than the 256 small ones, and 64 of 64 KiB
		// are about the socket's default receive buffer (4 MiB).
		n = max(2*o.Batch, 64)
	default:
		n = max(8*o.Batch, 256)
	}
	return pow2(min(n, maxRxBuffers))
}

// pow2 rounds n (> 0) up to a power of two.
func pow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// shared returns the options shared with the other socket-based path.
func (o *Options) shared() udpsock.Shared {
	return udpsock.Shared{Port: &o.Port, DstPort: &o.DstPort, Batch: &o.Batch, MaxPacket: &o.MaxPacket,
		RecvBuffer: &o.RecvBuffer, SendBuffer: &o.SendBuffer}
}
