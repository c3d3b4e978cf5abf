package udpsock

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/wire"
)

// AnyPort, as Options.Port, lets the kernel choose the local port.
const AnyPort = -1

// DefaultSocketBuffer is the default SO_RCVBUF and SO_SNDBUF size, in bytes.
const DefaultSocketBuffer = 4 << 20

// MaxBatch is the kernel's UIO_MAXIOV, the most messages one recvmmsg or
// sendmmsg call handles: the largest Options.Batch.
const MaxBatch = 1024

// Shared points at the options that the socket-based packet paths
// (packetio/udp, packetio/uring) share, fields of each path's own Options
// (documented there), so that their defaults and checks are made here.
type Shared struct {
	Port, DstPort          *int
	Batch, MaxPacket       *int
	RecvBuffer, SendBuffer *int
}

// Defaults fills the zero options with their defaults: port 4791,
// packetio.DefaultBatch (at most MaxBatch), packetio.DefaultMaxPacket,
// DefaultSocketBuffer.
func (o Shared) Defaults() {
	if *o.Port == 0 {
		*o.Port = wire.RoCEv2Port
	}
	if *o.Batch <= 0 {
		*o.Batch = packetio.DefaultBatch
	}
	*o.Batch = min(*o.Batch, MaxBatch)
	if *o.MaxPacket <= 0 {
		*o.MaxPacket = packetio.DefaultMaxPacket
	}
	if *o.RecvBuffer == 0 {
		*o.RecvBuffer = DefaultSocketBuffer
	}
	if *o.SendBuffer == 0 {
		*o.SendBuffer = DefaultSocketBuffer
	}
}

// Check validates what Listen was given, after Defaults: local must be an
// IPv4 address (or IPv4-mapped: it returns it unmapped) or an IPv6 address
// without a zone, the ports in range; AnyPort becomes 0 for the kernel to
// choose. Errors start with prefix (the calling package's name).
func (o Shared) Check(prefix string, local netip.Addr) (netip.Addr, error) {
	local = local.Unmap()
	if !local.IsValid() || local.Zone() != "" {
		return local, fmt.Errorf("%s: listen on %v: an IPv4 or IPv6 address without a zone is needed", prefix, local)
	}
	if *o.Port < 0 {
		*o.Port = 0
	}
	if *o.Port > 0xFFFF || *o.DstPort < 0 || *o.DstPort > 0xFFFF {
		return local, fmt.Errorf("%s: listen: port %d or destination port %d out of range", prefix, *o.Port, *o.DstPort)
	}
	return local, nil
}
