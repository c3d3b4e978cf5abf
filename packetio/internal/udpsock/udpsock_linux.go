package udpsock

import (
	"errors"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/wire"
)

// Config is the socket's configuration.
type Config struct {
	// Port is the local port (0: the kernel chooses).
	Port int
	// RecvBuffer and SendBuffer are the requested SO_RCVBUF and SO_SNDBUF
	// sizes; negative keeps the kernel's default.
	RecvBuffer, SendBuffer int
	// TOS is the IPv4 TOS byte of transmitted packets (0: not set, the
	// kernel's 0). The paths pass packetio.SendTOS of their options: ECT(0)
	// unless told otherwise.
	TOS uint8
	// NonBlock opens the socket with SOCK_NONBLOCK.
	NonBlock bool
	// Checksum keeps the UDP checksum of transmitted datagrams (SO_NO_CHECK
	// is not set): UDP GSO refuses SO_NO_CHECK (EINVAL), and a receiver's
	// UDP GRO coalesces only datagrams with a checksum.
	Checksum bool
}

// Open opens an unconnected UDP socket, IPv4 or IPv6 as local is,
// configures it and binds it to local and cfg.Port. It returns the
// descriptor and the bound port. Errors start with prefix (the calling
// package's name) and match packetio.ErrNotSupported when the kernel lacks
// an option.
func Open(prefix string, local netip.Addr, cfg Config) (fd int, port uint16, err error) {
	typ := unix.SOCK_DGRAM | unix.SOCK_CLOEXEC
	if cfg.NonBlock {
		typ |= unix.SOCK_NONBLOCK
	}
	local = local.Unmap()
	family := unix.AF_INET
	if local.Is6() {
		family = unix.AF_INET6
	}
	fd, err = unix.Socket(family, typ, unix.IPPROTO_UDP)
	if err != nil {
		return -1, 0, SysErr(prefix, "socket", err)
	}
	if local.Is6() {
		err = configure6(prefix, fd, local, cfg)
	} else {
		err = configure(prefix, fd, local, cfg)
	}
	if err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, 0, SysErr(prefix, "getsockname", err)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return fd, uint16(sa.Port), nil
	case *unix.SockaddrInet6:
		return fd, uint16(sa.Port), nil
	}
	unix.Close(fd)
	return -1, 0, fmt.Errorf("%s: getsockname: not an IP address", prefix)
}

// configure sets the socket options of an IPv4 socket and binds.
func configure(prefix string, fd int, local netip.Addr, cfg Config) error {
	opts := []struct {
		name       string
		level, opt int
		value      int
	}{
		// DF set and IPv4 Identification 0 on every datagram of an
		// unconnected socket: the ICRC covers both.
		{"IP_MTU_DISCOVER", unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO},
		{"IP_PKTINFO", unix.IPPROTO_IP, unix.IP_PKTINFO, 1},
		{"IP_RECVTOS", unix.IPPROTO_IP, unix.IP_RECVTOS, 1},
		// The kernel's receive time of each datagram (CLOCK_REALTIME,
		// taken as the packet reached the socket layer): completions
		// are stamped with it, so a probe's network RTT leaves out the
		// time the receiver took to wake up.
		{"SO_TIMESTAMPNS", unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1},
		// The socket's count of datagrams dropped (its receive buffer
		// full), with each datagram received after a drop: the Conn's
		// RxDropped, without a system call of its own.
		{"SO_RXQ_OVFL", unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1},
	}
	if !cfg.Checksum {
		// UDP checksum 0, as rdma_rxe and RoCE NICs send over IPv4: the
		// ICRC protects the packet, and the checksum work is saved.
		opts = append(opts, struct {
			name       string
			level, opt int
			value      int
		}{"SO_NO_CHECK", unix.SOL_SOCKET, unix.SO_NO_CHECK, 1})
	}
	for _, so := range opts {
		if err := unix.SetsockoptInt(fd, so.level, so.opt, so.value); err != nil {
			return SysErr(prefix, "setsockopt "+so.name, err)
		}
	}
	if cfg.TOS != 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, int(cfg.TOS)); err != nil {
			return SysErr(prefix, "setsockopt IP_TOS", err)
		}
	}
	if err := setBuffers(prefix, fd, cfg); err != nil {
		return err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: cfg.Port, Addr: local.As4()}); err != nil {
		return fmt.Errorf("%s: bind %v: %w", prefix, netip.AddrPortFrom(local, uint16(cfg.Port)), err)
	}
	return nil
}

// setBuffers sets the socket's receive and send buffer sizes.
func setBuffers(prefix string, fd int, cfg Config) error {
	if err := setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, cfg.RecvBuffer); err != nil {
		return SysErr(prefix, "setsockopt SO_RCVBUF", err)
	}
	if err := setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, cfg.SendBuffer); err != nil {
		return SysErr(prefix, "setsockopt SO_SNDBUF", err)
	}
	return nil
}

// configure6 sets the socket options of an IPv6 socket, IPv6 only, and
// binds: those of configure in their IPv6 forms (IPV6_MTU_DISCOVER,
// IPV6_RECVPKTINFO, IPV6_RECVTCLASS, IPV6_TCLASS for cfg.TOS), and
// UDP_NO_CHECK6_RX. The UDP checksum of what it sends stays on whatever
// cfg.Checksum says: IPv6 requires it.
func configure6(prefix string, fd int, local netip.Addr, cfg Config) error {
	opts := []struct {
		name       string
		level, opt int
		value      int
	}{
		{"IPV6_V6ONLY", unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1},
		{"IPV6_MTU_DISCOVER", unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO},
		{"IPV6_RECVPKTINFO", unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1},
		{"IPV6_RECVTCLASS", unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1},
		// Take datagrams with UDP checksum 0 (RFC 6936's zero-checksum
		// tunnels: a RoCEv2 sender may rely on the ICRC alone).
		{"UDP_NO_CHECK6_RX", unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1},
		{"SO_TIMESTAMPNS", unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1},
		{"SO_RXQ_OVFL", unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1},
	}
	if cfg.TOS != 0 {
		opts = append(opts, struct {
			name       string
			level, opt int
			value      int
		}{"IPV6_TCLASS", unix.IPPROTO_IPV6, unix.IPV6_TCLASS, int(cfg.TOS)})
	}
	for _, so := range opts {
		if err := unix.SetsockoptInt(fd, so.level, so.opt, so.value); err != nil {
			return SysErr(prefix, "setsockopt "+so.name, err)
		}
	}
	if err := setBuffers(prefix, fd, cfg); err != nil {
		return err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Port: cfg.Port, Addr: local.As16()}); err != nil {
		return fmt.Errorf("%s: bind %v: %w", prefix, netip.AddrPortFrom(local, uint16(cfg.Port)), err)
	}
	return nil
}

// setBuffer sets a socket buffer size, forcing it past the sysctl cap when
// allowed (CAP_NET_ADMIN).
func setBuffer(fd, force, opt, size int) error {
	if size < 0 {
		return nil
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, size)
}

// SysErr wraps a system call's error with prefix and what failed; it
// matches packetio.ErrNotSupported when the error says the kernel lacks the
// feature.
func SysErr(prefix, what string, err error) error {
	if errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%s: %s: %w: %w", prefix, what, packetio.ErrNotSupported, err)
	}
	return fmt.Errorf("%s: %s: %w", prefix, what, err)
}

// SockaddrInet4 is struct sockaddr_in, with the port kept in network byte
// order as bytes.
type SockaddrInet4 struct {
	Family uint16
	Port   [2]byte
	Addr   [4]byte
	Zero   [8]byte
}

// SizeofSockaddrInet4 is the size of struct sockaddr_in.
const SizeofSockaddrInet4 = unsafe.Sizeof(SockaddrInet4{})

// Sockaddr is struct sockaddr_in6, with the port kept in network byte
// order as bytes; with Family AF_INET its first 16 bytes are a struct
// sockaddr_in (Flow then holds the IPv4 address). A socket path keeps its
// addresses in it, whichever the family.
type Sockaddr struct {
	Family uint16
	Port   [2]byte
	Flow   [4]byte // IPv6: the flow information; IPv4: the address
	Addr   [16]byte
	Scope  uint32
}

// SizeofSockaddr is the size of struct sockaddr_in6, the room a Sockaddr
// takes.
const SizeofSockaddr = unsafe.Sizeof(Sockaddr{})

// SockaddrRoom is SizeofSockaddr rounded up to 8 bytes: the room for a
// source address that a receive slot laid out as a multishot RECVMSG's
// (an address, then control messages) reserves, so that the control
// messages after it stay aligned.
const SockaddrRoom = (int(SizeofSockaddr) + 7) &^ 7

// Set writes the address a (IPv4, IPv4-mapped or IPv6) and returns the
// length of the sockaddr it makes, for msg_namelen. The port is left as
// it is. It does not allocate.
func (s *Sockaddr) Set(a netip.Addr) uint32 {
	if a.Is4() || a.Is4In6() {
		s.Family, s.Flow, s.Addr = unix.AF_INET, a.Unmap().As4(), [16]byte{}
		return uint32(SizeofSockaddrInet4)
	}
	s.Family, s.Flow, s.Addr, s.Scope = unix.AF_INET6, [4]byte{}, a.As16(), 0
	return uint32(SizeofSockaddr)
}

// IP returns the address, and false for a family other than AF_INET and
// AF_INET6.
func (s *Sockaddr) IP() (netip.Addr, bool) {
	switch s.Family {
	case unix.AF_INET:
		return netip.AddrFrom4(s.Flow), true
	case unix.AF_INET6:
		return netip.AddrFrom16(s.Addr), true
	}
	return netip.Addr{}, false
}

// IPCmsgSpace is the room PutIPCmsgs takes at most: two int control
// messages.
var IPCmsgSpace = 2 * unix.CmsgSpace(4)

// PutIPCmsgs writes into b (IPCmsgSpace bytes, pointer-aligned) the control
// messages that send a datagram with the TOS (IPv6: traffic class) and
// TTL (IPv6: hop limit) given, each only when not 0 (the socket's own then
// applies): IP_TOS and IP_TTL, or IPV6_TCLASS and IPV6_HOPLIMIT with v6. It
// returns the bytes written. It does not allocate.
func PutIPCmsgs(b []byte, v6 bool, tos, ttl uint8) int {
	n := 0
	put := func(level, typ int32, v uint8) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[n]))
		h.Level, h.Type = level, typ
		h.SetLen(unix.CmsgLen(4))
		*(*int32)(unsafe.Pointer(&b[n+unix.CmsgLen(0)])) = int32(v)
		n += unix.CmsgSpace(4)
	}
	level, tosType, ttlType := int32(unix.IPPROTO_IP), int32(unix.IP_TOS), int32(unix.IP_TTL)
	if v6 {
		level, tosType, ttlType = unix.IPPROTO_IPV6, unix.IPV6_TCLASS, unix.IPV6_HOPLIMIT
	}
	if tos != 0 {
		put(level, tosType, tos)
	}
	if ttl != 0 {
		put(level, ttlType, ttl)
	}
	return n
}

// ControlSpace is the receive control buffer per message, in bytes: room for
// IP_PKTINFO (CmsgSpace(12): 32 bytes on 64-bit), IP_TOS (CmsgSpace(1): 24),
// SCM_TIMESTAMPNS (CmsgSpace(16): 32) and SO_RXQ_OVFL (CmsgSpace(4): 24),
// 112 in all; over IPv6, IPV6_PKTINFO (CmsgSpace(20): 40) and IPV6_TCLASS
// (CmsgSpace(4): 24), 120 in all; and a little more. A smaller room cuts
// off the last (the kernel writes the address and TOS last) and sets
// MSG_CTRUNC.
const ControlSpace = 128

// Control is what ParseControl found in a datagram's control messages.
type Control struct {
	Dst    netip.Addr // the IP_PKTINFO or IPV6_PKTINFO destination address, if HasDst
	HasDst bool
	TOS    uint8 // the IP_TOS byte or IPV6_TCLASS
	RxTime int64 // the SCM_TIMESTAMPNS receive time, Unix ns; 0 if none
	// GROSize is the segment size of a buffer that UDP GRO coalesced
	// from several datagrams (the UDP_GRO cmsg), 0 if none.
	GROSize int
	// Drops is the socket's cumulative count of dropped datagrams when
	// this one was queued (the SO_RXQ_OVFL cmsg, which the kernel adds
	// only once the count is not 0), 0 if none: for
	// packetio.Counters.NoteKernelRxDrops32.
	Drops uint32
}

// ParseControl reads the IP_PKTINFO destination address, the IP_TOS byte,
// the SCM_TIMESTAMPNS receive time, the SO_RXQ_OVFL drop count and the
// UDP_GRO segment size from received control messages. It does not
// allocate.
func ParseControl(b []byte) (c Control) {
	const align = unix.SizeofPtr
	for len(b) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(unsafe.SliceData(b)))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(b) {
			break
		}
		data := b[unix.CmsgLen(0):l]
		if h.Level == unix.IPPROTO_IP {
			switch h.Type {
			case unix.IP_PKTINFO: // struct in_pktinfo: ifindex, spec_dst, addr (the header's destination)
				if len(data) >= unix.SizeofInet4Pktinfo {
					c.Dst, c.HasDst = netip.AddrFrom4([4]byte(data[8:12])), true
				}
			case unix.IP_TOS:
				if len(data) >= 1 {
					c.TOS = data[0]
				}
			}
		}
		if h.Level == unix.IPPROTO_IPV6 {
			parseControl6(&c, h.Type, data)
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 4 {
			c.GROSize = int(*(*int32)(unsafe.Pointer(unsafe.SliceData(data))))
		}
		if h.Level == unix.SOL_SOCKET {
			switch {
			case h.Type == unix.SCM_TIMESTAMPNS && len(data) >= 16:
				ts := (*unix.Timespec)(unsafe.Pointer(unsafe.SliceData(data)))
				c.RxTime = ts.Nano()
			case h.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
				c.Drops = *(*uint32)(unsafe.Pointer(unsafe.SliceData(data)))
			}
		}
		l = (l + align - 1) &^ (align - 1)
		if l >= len(b) {
			break
		}
		b = b[l:]
	}
	return c
}

// parseControl6 reads an IPv6 control message of type typ.
func parseControl6(c *Control, typ int32, data []byte) {
	switch {
	case typ == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo: // struct in6_pktinfo: addr, ifindex
		c.Dst, c.HasDst = netip.AddrFrom16([16]byte(data[:16])), true
	case typ == unix.IPV6_TCLASS && len(data) >= 4:
		c.TOS = uint8(*(*int32)(unsafe.Pointer(unsafe.SliceData(data))))
	}
}

// AsyncErrno tells the errors that report an earlier datagram's fate (an
// ICMP error the kernel queued on the socket), not the current call's.
func AsyncErrno(e unix.Errno) bool {
	switch e {
	case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN, unix.ENETDOWN, unix.EPROTO:
		return true
	}
	return false
}

// SetIov points v at b (which may be empty).
func SetIov(v *unix.Iovec, b []byte) {
	v.Base = unsafe.SliceData(b)
	v.SetLen(len(b))
}

// PacketIovecs points iovs at the datagram of p and returns how many it
// used: one for a whole packet, three for one in pieces (Buf[:ExtAt], Ext,
// Buf[ExtAt:]: packetio.Gatherer). iovs must hold three.
func PacketIovecs(iovs []unix.Iovec, p *packetio.Packet) int {
	if p.Ext == nil {
		SetIov(&iovs[0], p.Buf)
		return 1
	}
	SetIov(&iovs[0], p.Buf[:p.ExtAt])
	SetIov(&iovs[1], p.Ext)
	SetIov(&iovs[2], p.Buf[p.ExtAt:])
	return 3
}

// ICRCOf returns the ICRC of the packet whose last iovec is v: its last
// four bytes (Buf's, whether or not the packet is in pieces).
func ICRCOf(v *unix.Iovec) []byte {
	return unsafe.Slice(v.Base, v.Len)[v.Len-wire.ICRCLen:]
}
