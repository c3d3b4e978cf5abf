package udpsock

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/wire"
)

// UDP segmentation (GSO) and receive (GRO) offloads, as both socket-based
// paths use them (see package udp's documentation for what they do).

// MaxGSOBytes is the most UDP payload bytes one GSO message carries: the
// largest IPv4 UDP datagram's (65535 - 20 - 8).
const MaxGSOBytes = 0xFFFF - wire.IPv4UDPLen

// GROBuffer is the payload room of one receive with UDP GRO: the largest
// IPv4 UDP payload, rounded up. A smaller buffer would lose the rest of a
// coalesced train (MSG_TRUNC).
const GROBuffer = 64 << 10

// GROMaxSegments is the most datagrams Linux coalesces into one GRO buffer
// (UDP_GRO_CNT_MAX).
const GROMaxSegments = 64

// GROCmsgSpace is the receive control room a UDP_GRO cmsg takes
// (CmsgSpace(4): 24 bytes on 64-bit), beyond ControlSpace.
const GROCmsgSpace = 24

// GSOTxBatch is the most packets a Conn with GSO lends for one Transmit:
// four GSO messages of wire.GSOMaxSegments. A run of packets of one size
// that crosses the messages of a stream (a 64 KiB SEND is 16 packets at
// path MTU 4096, a GSO message takes 15) then fills the kernel's GSO
// messages instead of ending with the Transmit.
const GSOTxBatch = 4 * wire.GSOMaxSegments

// Dest is what the datagrams of one GSO message share: the destination
// address (IPv4 as IPv4-mapped) and the TOS and TTL asked for (0: the
// socket's), which one message's control messages set for all.
type Dest struct {
	Addr     [16]byte
	TOS, TTL uint8
}

// GSORun returns how many packets from k on (at most end) go in one GSO
// message, packet i being lens[i] bytes to dests[i]: packets to the first's
// destination, all of the first's size but the last, which may be shorter, at
// most wire.GSOMaxSegments and MaxGSOBytes in all. Both socket paths cut
// their batches with it.
func GSORun(lens []int, dests []Dest, k, end int) int {
	size := lens[k]
	total, n := size, 1
	for k+n < end && n < wire.GSOMaxSegments {
		l := lens[k+n]
		if dests[k+n] != dests[k] || l > size || total+l > MaxGSOBytes || l < wire.MinPacketLen {
			break
		}
		total += l
		n++
		if l < size {
			break
		}
	}
	return n
}

// GSOCmsgSpace is the control buffer of one GSO message: a UDP_SEGMENT
// cmsg carrying the segment size as a uint16.
var GSOCmsgSpace = unix.CmsgSpace(2)

// PutSegmentCmsg writes a UDP_SEGMENT cmsg with segment size size into b
// (at least GSOCmsgSpace bytes, pointer-aligned).
func PutSegmentCmsg(b []byte, size uint16) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(unsafe.SliceData(b)))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = size
}

// GSORefused tells the errors with which the kernel refuses a GSO message
// whose packets it would take one datagram each: EINVAL (a segment larger
// than the path MTU, SO_NO_CHECK, too many segments), EMSGSIZE (too
// large), EIO (no checksum offload on the device, before Linux 6.11).
func GSORefused(e unix.Errno) bool {
	return e == unix.EINVAL || e == unix.EMSGSIZE || e == unix.EIO
}

// ProbeGSO reports whether the kernel implements UDP_SEGMENT on fd:
// getsockopt UDP_SEGMENT exists exactly where it does (Linux 4.18).
func ProbeGSO(fd int) error {
	_, err := unix.GetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT)
	return err
}

// EnableGRO sets UDP_GRO on fd (Linux 5.0).
func EnableGRO(fd int) error {
	return unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1)
}

// GROKeepsIDs reports whether the running kernel's UDP GRO coalesces only
// datagrams whose IPv4 Identifications go up by one (or, with DF, stay
// equal): Linux 6.10 and later check them for UDP as for TCP. Before, UDP
// GRO ignored the Identification, so a train's position says nothing of it
// and Packet.GROSeg stays 0.
func GROKeepsIDs() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 6 || major == 6 && minor >= 10
}

// OffloadState is a Conn's use of GSO and GRO: decided at Listen (Probe),
// GSO read by every Transmit and turned off for good when the kernel
// refuses it with EIO (TurnOffGSO), the reasons reported by Status.
type OffloadState struct {
	gso atomic.Bool
	// GRO says whether the socket has UDP_GRO on; set by Probe, read-only
	// afterwards.
	GRO bool
	// GROIDs says whether GRO is on and the kernel's UDP GRO keeps
	// Identifications in order (GROKeepsIDs): Packet.GROSeg is set.
	GROIDs bool

	mu             sync.Mutex // guards the reasons, and orders turning GSO off against Status
	gsoWhy, groWhy string
}

// GSO reports whether Transmit uses GSO.
func (s *OffloadState) GSO() bool { return s.gso.Load() }

// Status reports whether GSO and GRO are on, and why not when they are
// not. It is safe to call from any goroutine.
func (s *OffloadState) Status() OffloadStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return OffloadStatus{GSO: s.gso.Load(), GSOReason: s.gsoWhy, GRO: s.GRO, GROReason: s.groWhy}
}

// Probe decides at Listen whether the socket fd uses GSO and GRO, as gso
// and gro ask. The socket was opened with the UDP checksum on unless gso
// is OffloadOff (Config.Checksum); when GSO turns out unavailable,
// SO_NO_CHECK is set after all. Errors start with prefix (the calling
// package's name); an offload that OffloadRequire asks for and the kernel
// lacks fails with an error matching packetio.ErrNotSupported.
func (s *OffloadState) Probe(prefix string, fd int, gso, gro Offload) error {
	on, why, err := probe(prefix, fd, gso, "GSO", "getsockopt", "UDP_SEGMENT", ProbeGSO)
	if err != nil {
		return err
	}
	s.gso.Store(on)
	s.gsoWhy = why
	if !on && gso != OffloadOff {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); err != nil {
			return SysErr(prefix, "setsockopt SO_NO_CHECK", err)
		}
	}
	if s.GRO, s.groWhy, err = probe(prefix, fd, gro, "GRO", "setsockopt", "UDP_GRO", EnableGRO); err != nil {
		return err
	}
	s.GROIDs = s.GRO && GROKeepsIDs()
	return nil
}

// probe decides whether the offload name (Options.GSO or Options.GRO asked
// for it with mode) is on: unless mode is OffloadOff it tries it on fd
// (the system call call with option opt), and reports why not when it is
// off, or an error when OffloadRequire asked for it and the kernel lacks
// it.
func probe(prefix string, fd int, mode Offload, name, call, opt string, try func(fd int) error) (on bool, whyOff string, err error) {
	if mode == OffloadOff {
		return false, "turned off by Options." + name, nil
	}
	if err := try(fd); err != nil {
		if mode == OffloadRequire {
			return false, "", SysErr(prefix, "UDP "+name+": "+call+" "+opt, fmt.Errorf("%w: %w", packetio.ErrNotSupported, err))
		}
		return false, "the kernel lacks " + opt + ": " + err.Error(), nil
	}
	return true, "", nil
}

// TurnOffGSO turns GSO off for good after the kernel refused a GSO message
// with errno EIO: the device cannot checksum in hardware (before Linux
// 6.11). Other errors leave GSO on.
func (s *OffloadState) TurnOffGSO(errno unix.Errno) {
	if errno != unix.EIO || !s.gso.Load() {
		return
	}
	s.mu.Lock()
	s.gso.Store(false)
	s.gsoWhy = "the kernel refused a GSO message with EIO (no checksum offload on the device): " + errno.Error()
	s.mu.Unlock()
}
