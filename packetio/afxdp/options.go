package afxdp

import (
	"errors"
	"time"
)

// Defaults of Options.
const (
	DefaultFrames    = 2048 // UMEM frames
	DefaultFrameSize = 2048 // bytes per frame, when a frame holds a whole Ethernet frame of the interface's MTU
	JumboFrameSize   = 4096 // bytes per frame, when it does not (multi-buffer: a packet spans frames)
	DefaultHeadroom  = 256  // UMEM headroom: bytes the kernel leaves free before received data, besides its own XDP_PACKET_HEADROOM
)

// How often Receive reads the kernel's drop counts (RxDropped): when it
// returns a full batch (the Conn is behind, and the rings may overflow)
// at most every DropsEvery, else every DropsIdle.
const (
	DropsEvery = 100 * time.Microsecond
	DropsIdle  = 10 * time.Millisecond
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
	// does not fit a UMEM frame (a frame of FrameSize bytes holds at most
	// FrameSize - Headroom - 256 bytes of Ethernet frame) and frames cannot
	// be chained: Options.SingleBuffer is set, or the kernel or driver
	// refused multi-buffer AF_XDP (then the error also matches
	// ErrMultiBuffer). It also matches packetio.ErrNotSupported, so that a
	// caller falls back to the UDP path, which carries any MTU.
	ErrMTU = errors.New("packetio/afxdp: MTU too large for the UMEM frame")
	// ErrMultiBuffer is matched by the error of Listen when the interface's
	// MTU needs packets chained over several UMEM frames and the kernel or
	// driver refused it: loading the XDP program with the frags flag
	// (BPF_F_XDP_HAS_FRAGS, Linux 5.18), attaching it (native: a driver
	// without XDP frags support; generic: Linux 6.8), or binding the socket
	// with XDP_USE_SG (Linux 6.6; in zero-copy mode also driver support).
	// It also matches ErrMTU and packetio.ErrNotSupported.
	ErrMultiBuffer = errors.New("packetio/afxdp: multi-buffer AF_XDP not supported")
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
	// packetio.DefaultMaxPacket (a 4096-byte path MTU's packets), lowered to
	// what the interface MTU allows (and, single-buffer, the frame size).
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
	// to the page size (aligned chunk mode). Default DefaultFrameSize when
	// such a frame holds an Ethernet frame of the interface's MTU (1500),
	// else JumboFrameSize (multi-buffer, unless that frame holds it).
	FrameSize int
	// SingleBuffer refuses (ErrMTU) an interface whose MTU does not fit
	// one frame, instead of chaining a packet's frames (multi-buffer
	// AF_XDP: XDP_USE_SG, descriptors with XDP_PKT_CONTD, an XDP program
	// loaded with frags support).
	SingleBuffer bool
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
	// TOS is the IPv4 TOS byte (DSCP << 2 | ECN) of transmitted packets,
	// as package udp's: its ECN field left 0, packets leave ECT(0) (the
	// default, TOS 0x02, as RoCE NICs send); set, as given
	// (packetio.SendTOS).
	TOS uint8
	// NoECN sends packets not-ECT (ECN field 0, TOS's DSCP kept), for a
	// network that mishandles ECN.
	NoECN bool
	// ResolveTimeout bounds how long Transmit waits for the kernel to
	// resolve a neighbour it does not know yet. Default 1 s.
	ResolveTimeout time.Duration
	// NeighbourTTL is how long a resolved MAC address is used before the
	// neighbour table is read again. Default 5 s.
	NeighbourTTL time.Duration

	// sgFlag is the bind flag that asks for multi-buffer (XDP_USE_SG);
	// tests set a flag the kernel does not know to see Listen refused as
	// on a kernel without multi-buffer AF_XDP.
	sgFlag uint16
}
