package afxdp

import (
	"errors"
	"time"
)

// Defaults of Options.
const (
	DefaultFrames    = 2048 // UMEM frames
	DefaultFrameSize = 2048 // bytes per frame
	DefaultHeadroom  = 256  // UMEM headroom: bytes the kernel leaves free before received data, besides its own XDP_PACKET_HEADROOM
)

// Attach modes of Options.Attach.
const (
	AttachAuto    = ""        // native (driver) XDP, else generic
	AttachNative  = "native"  // driver XDP only
	AttachGeneric = "generic" // generic (SKB) XDP only
)

// Copy modes of Options.Copy.
const (
	CopyAuto = ""         // zero-copy, else copy
	ZeroCopy = "zerocopy" // XDP_ZEROCOPY only
	Copy     = "copy"     // XDP_COPY only
)

var (
	// ErrMTU is matched by the error of Listen when the interface's MTU
	// does not fit a UMEM frame (single-buffer AF_XDP): a frame of
	// FrameSize bytes holds at most FrameSize - Headroom - 256 bytes of
	// Ethernet frame. It also matches packetio.ErrNotSupported.
	ErrMTU = errors.New("packetio/afxdp: MTU too large for the UMEM frame")
	// ErrPermission is matched by the error of Listen when the kernel
	// refuses for lack of privilege (EPERM: AF_XDP and BPF need
	// CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF or CAP_SYS_ADMIN). It also
	// matches packetio.ErrNotSupported, so that callers fall back to the
	// UDP path.
	ErrPermission = errors.New("packetio/afxdp: not permitted")
	// ErrUnresolved is the cause of a packet not sent because the
	// destination's (or its gateway's) MAC address could not be resolved
	// within Options.ResolveTimeout.
	ErrUnresolved = errors.New("packetio/afxdp: neighbour unresolved")
)

// Options configures Listen. The zero value gives the defaults.
type Options struct {
	// Port is the local UDP port: the port packets are received on and
	// the UDP source port of every transmitted packet whose Packet.Port is
	// 0. Default 4791. The
	// engine's ICRC covers the source port, so a device on this Conn must
	// use the same (provider/soft Options.SourcePort).
	Port uint16
	// DstPort is the destination UDP port of transmitted packets. Default
	// Port.
	DstPort uint16
	// Batch is the largest number of packets one Receive returns and one
	// TxBatch lends. Default packetio.DefaultBatch.
	Batch int
	// MaxPacket caps the largest transport packet (UDP payload). Default
	// packetio.DefaultMaxPacket, lowered to what the interface MTU and the
	// frame size allow.
	MaxPacket int
	// Frames is the number of UMEM frames (at least 8): RxFrames of them
	// are for receiving (kept in the fill ring), the rest for
	// transmitting. Default DefaultFrames.
	Frames int
	// RxFrames is how many frames receive. Default: all but a transmit
	// share of Frames/8, or twice Batch when that is more (up to half
	// the frames): 1792 of the default 2048.
	RxFrames int
	// FrameSize is the UMEM frame (chunk) size: a power of two from 2048
	// to the page size (aligned chunk mode). Default DefaultFrameSize.
	FrameSize int
	// Headroom is the UMEM headroom. Default DefaultHeadroom; negative for
	// none.
	Headroom int
	// Populate pre-faults the UMEM (MAP_POPULATE); Lock locks it in RAM
	// (mlock, needs CAP_IPC_LOCK or RLIMIT_MEMLOCK room).
	Populate, Lock bool
	// Attach chooses native or generic XDP (AttachAuto: native, else
	// generic). Copy chooses zero-copy or copy mode (CopyAuto: zero-copy,
	// else copy).
	Attach, Copy string
	// Queue is the first RX queue bound; Queues how many (one socket
	// each). Default: queue 0, and every RX queue of the interface.
	Queue, Queues int
	// TOS is the IPv4 TOS byte (DSCP << 2 | ECN) of transmitted packets.
	TOS uint8
	// ResolveTimeout bounds how long Transmit waits for the kernel to
	// resolve a neighbour it does not know yet. Default 1 s.
	ResolveTimeout time.Duration
	// NeighbourTTL is how long a resolved MAC address is used before the
	// neighbour table is read again. Default 5 s.
	NeighbourTTL time.Duration
}
