//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/pollwait"
	"github.com/goroce/goroce/wire"
)

var errNotSupported = packetio.ErrNotSupported

// hdrLen is the room before the transport packet in a transmit frame:
// Ethernet, IPv4 (no options) and UDP headers.
const hdrLen = wire.EthernetLen + wire.IPv4UDPLen

// minFrame is the shortest Ethernet frame (without FCS); shorter ones are
// padded with zeros, as the kernel's drivers do.
const minFrame = 60

// Conn is an AF_XDP packet path for RoCEv2 over IPv4 on one interface. It
// implements packetio.Conn.
type Conn struct {
	socks  []*socket
	f      *os.File        // socks[0]'s socket, or an epoll instance over all of them, registered with Go's netpoller
	raw    syscall.RawConn // f's
	epfd   int             // the epoll instance, or -1
	prog   *xdpProgram
	nl     *netlink.Handle
	neigh  *neighbours
	mode   string
	ifname string
	ifidx  int
	mtu    int

	local     netip.Addr
	srcMAC    wire.MAC
	port      uint16
	dstPort   uint16
	tos       uint8
	maxPacket int
	batch     int
	frameSize int

	// Receive side: driver goroutine only.
	rx     []packetio.Packet
	held   [][]uint64 // per socket: frames of the packets Receive returned last, back to the fill ring at the next Receive
	next   int        // socket to look at first (round robin)
	recvFn func(fd uintptr) bool
	rxN    int
	wait   pollwait.Waiter // Receive's wait in the netpoller, and Wake
	loop   loopback        // packets sent to the local address

	// Send side: driver goroutine only. Frames are UMEM offsets of socks[0].
	tx    []packetio.Packet
	free  []uint64          // transmit frames not in use
	lentF []uint64          // frames of the packets TxBatch lent, in order
	used  []bool            // Transmit: lentF[i] went to the TX ring
	txl   packetio.TxLender // how many of tx are lent

	closed atomic.Bool
	inUse  atomic.Int32 // driver calls under way; Close unmaps only when none
	ctr    packetio.Counters
	xctr   struct {
		fillEmpty, malformed, txDropped, txKicks, rxKicks, txStuck, looped atomic.Uint64
	}
}

var _ packetio.Conn = (*Conn)(nil)

func (o Options) withDefaults() Options {
	if o.Port == 0 {
		o.Port = wire.RoCEv2Port
	}
	if o.DstPort == 0 {
		o.DstPort = o.Port
	}
	if o.Batch <= 0 {
		o.Batch = packetio.DefaultBatch
	}
	if o.MaxPacket <= 0 {
		o.MaxPacket = packetio.DefaultMaxPacket
	}
	if o.Frames == 0 {
		o.Frames = DefaultFrames
	}
	if o.RxFrames == 0 {
		// Transmit frames go back to the free list as soon as a send
		// completes (in copy mode within the sendto), so a few batches'
		// worth do; every other frame absorbs receive bursts.
		o.RxFrames = o.Frames - max(o.Frames/8, min(2*o.Batch, o.Frames/2))
	}
	if o.FrameSize == 0 {
		o.FrameSize = DefaultFrameSize
	}
	if o.Headroom == 0 {
		o.Headroom = DefaultHeadroom
	} else if o.Headroom < 0 {
		o.Headroom = 0
	}
	if o.ResolveTimeout <= 0 {
		o.ResolveTimeout = time.Second
	}
	if o.NeighbourTTL <= 0 {
		o.NeighbourTTL = 5 * time.Second
	}
	return o
}

func (o Options) check() error {
	switch {
	case o.Frames < 8 || o.Frames > 1<<20:
		return fmt.Errorf("packetio/afxdp: Frames %d: want 8 to %d", o.Frames, 1<<20)
	case o.RxFrames <= 0 || o.RxFrames >= o.Frames:
		return fmt.Errorf("packetio/afxdp: RxFrames %d of %d frames: want some of them, not all", o.RxFrames, o.Frames)
	case !isPow2(o.FrameSize) || o.FrameSize < 2048 || o.FrameSize > os.Getpagesize():
		return fmt.Errorf("packetio/afxdp: FrameSize %d: want a power of two from 2048 to the page size (%d)", o.FrameSize, os.Getpagesize())
	case o.FrameSize-o.Headroom-unix.XDP_PACKET_HEADROOM < hdrLen+wire.BTHLen+wire.ICRCLen:
		return fmt.Errorf("packetio/afxdp: Headroom %d leaves no room in a %d-byte frame", o.Headroom, o.FrameSize)
	case o.Batch > o.RxFrames || o.Batch > o.Frames-o.RxFrames:
		return fmt.Errorf("packetio/afxdp: Batch %d larger than the receive or transmit frames", o.Batch)
	case o.Attach != AttachAuto && o.Attach != AttachNative && o.Attach != AttachGeneric:
		return fmt.Errorf("packetio/afxdp: unknown attach mode %q", o.Attach)
	case o.Copy != CopyAuto && o.Copy != ZeroCopy && o.Copy != Copy:
		return fmt.Errorf("packetio/afxdp: unknown copy mode %q", o.Copy)
	case o.Queue < 0 || o.Queues < 0:
		return fmt.Errorf("packetio/afxdp: queue %d, %d queues", o.Queue, o.Queues)
	}
	return nil
}

// Listen opens the AF_XDP path on the interface that has the IPv4 address
// local: it loads and attaches the XDP program that redirects RoCEv2
// packets for local:opts.Port to its sockets, one per RX queue, each with
// its UMEM and rings. The namespace of the calling thread is the one used,
// also for later neighbour look-ups.
//
// Errors when the kernel, driver or privileges say no (no AF_XDP or BPF,
// EPERM, an MTU too large for the frames) match packetio.ErrNotSupported, so
// that a caller can fall back to the UDP path.
func Listen(local netip.Addr, opts Options) (_ *Conn, err error) {
	o := opts.withDefaults()
	if err := o.check(); err != nil {
		return nil, err
	}
	local = local.Unmap()
	if !local.Is4() || local.IsUnspecified() {
		return nil, fmt.Errorf("packetio/afxdp: listen on %v: want the IPv4 address of an interface: %w", local, errNotSupported)
	}
	c := &Conn{epfd: -1, local: local, port: o.Port, dstPort: o.DstPort, tos: o.TOS, batch: o.Batch, frameSize: o.FrameSize}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if c.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		return nil, fmt.Errorf("packetio/afxdp: netlink: %w", err)
	}
	addrs, err := c.nl.AddrList(nil, unix.AF_INET)
	if err != nil {
		return nil, fmt.Errorf("packetio/afxdp: list addresses: %w", err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == local {
			c.ifidx = a.LinkIndex
		}
	}
	if c.ifidx == 0 {
		return nil, fmt.Errorf("packetio/afxdp: no interface has address %v", local)
	}
	l, err := c.nl.LinkByIndex(c.ifidx)
	if err != nil {
		return nil, fmt.Errorf("packetio/afxdp: interface %d: %w", c.ifidx, err)
	}
	at := l.Attrs()
	c.ifname, c.mtu = at.Name, at.MTU
	if len(at.HardwareAddr) != 6 {
		return nil, fmt.Errorf("packetio/afxdp: %s is not an Ethernet interface: %w", c.ifname, errNotSupported)
	}
	c.srcMAC = wire.MAC(at.HardwareAddr)
	rxRoom := o.FrameSize - o.Headroom - unix.XDP_PACKET_HEADROOM
	if c.mtu+wire.EthernetLen > rxRoom {
		return nil, fmt.Errorf("packetio/afxdp: %s: MTU %d: frames of %d bytes hold %d bytes after the headroom, not %d (single-buffer AF_XDP; raise FrameSize or lower the MTU): %w: %w",
			c.ifname, c.mtu, o.FrameSize, rxRoom, c.mtu+wire.EthernetLen, ErrMTU, errNotSupported)
	}
	c.maxPacket = min(o.MaxPacket, c.mtu-wire.IPv4UDPLen, rxRoom-hdrLen, o.FrameSize-hdrLen)
	queues := o.Queues
	if queues == 0 {
		queues = max(1, at.NumRxQueues-o.Queue)
	}
	c.neigh = newNeighbours(c.nl, c.ifidx, o.ResolveTimeout, o.NeighbourTTL)

	if c.prog, err = loadProgram(o.Queue+queues, local, o.Port); err != nil {
		return nil, err
	}
	g := geometry{frames: o.Frames, rxFrames: o.RxFrames, frameSize: o.FrameSize, headroom: o.Headroom, populate: o.Populate, lock: o.Lock}
	var binds []uint16
	switch o.Copy {
	case CopyAuto:
		binds = []uint16{unix.XDP_ZEROCOPY, unix.XDP_COPY}
	case ZeroCopy:
		binds = []uint16{unix.XDP_ZEROCOPY}
	case Copy:
		binds = []uint16{unix.XDP_COPY}
	default:
		return nil, fmt.Errorf("packetio/afxdp: unknown copy mode %q", o.Copy)
	}
	// The program goes on first: some drivers accept zero-copy sockets only
	// with XDP running.
	if err = c.prog.attach(c.ifidx, o.Attach); err != nil {
		return nil, err
	}
	for q := o.Queue; q < o.Queue+queues; q++ {
		s, err := openQueue(c.ifidx, q, g, binds)
		if err != nil {
			if o.Queues == 0 && q > o.Queue && errors.Is(err, unix.EINVAL) {
				break // past the queues in use (the kernel reports the most the device may have)
			}
			return nil, fmt.Errorf("packetio/afxdp: %s queue %d: %w", c.ifname, q, err)
		}
		c.socks = append(c.socks, s)
		if err = c.prog.register(q, s.fd); err != nil {
			return nil, err
		}
	}
	c.mode = AttachGeneric
	if c.prog.native {
		c.mode = AttachNative
	}
	if c.socks[0].zerocopy {
		c.mode += "/" + ZeroCopy
	} else {
		c.mode += "/" + Copy
	}

	// What Go's netpoller waits on: the socket, or an epoll instance over
	// the sockets of several queues.
	pfd := c.socks[0].fd
	if len(c.socks) > 1 {
		if c.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
			return nil, fmt.Errorf("packetio/afxdp: epoll: %w", err)
		}
		for _, s := range c.socks {
			if err = unix.EpollCtl(c.epfd, unix.EPOLL_CTL_ADD, s.fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.fd)}); err != nil {
				return nil, fmt.Errorf("packetio/afxdp: epoll: %w", err)
			}
		}
		if err = unix.SetNonblock(c.epfd, true); err != nil {
			return nil, fmt.Errorf("packetio/afxdp: epoll: %w", err)
		}
		pfd = c.epfd
	}
	if c.f = os.NewFile(uintptr(pfd), "afxdp:"+c.ifname); c.f == nil {
		return nil, fmt.Errorf("packetio/afxdp: bad descriptor %d", pfd)
	}
	if c.raw, err = c.f.SyscallConn(); err != nil {
		return nil, fmt.Errorf("packetio/afxdp: %w", err)
	}
	if err = c.f.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("packetio/afxdp: the socket cannot wait in the netpoller: %w", err)
	}

	c.rx = make([]packetio.Packet, o.Batch)
	c.held = make([][]uint64, len(c.socks))
	for i := range c.held {
		c.held[i] = make([]uint64, 0, o.Batch)
	}
	c.recvFn = c.recv
	c.wait.Init(c.f, c.raw, &c.closed, &c.ctr.Wakes)
	c.loop = loopback{slots: o.RxFrames, size: c.maxPacket}
	txN := g.txFrames()
	c.tx = make([]packetio.Packet, o.Batch)
	c.free = make([]uint64, 0, txN)
	for i := txN - 1; i >= 0; i-- {
		c.free = append(c.free, uint64((o.RxFrames+i)*o.FrameSize))
	}
	c.lentF = make([]uint64, 0, o.Batch)
	c.used = make([]bool, o.Batch)
	return c, nil
}

// openQueue opens the socket of one queue, trying the bind modes in order.
// A queue whose previous socket was just closed stays busy until the kernel
// has released it (deferred work), so EBUSY is retried for a while.
func openQueue(ifidx, q int, g geometry, binds []uint16) (*socket, error) {
	var errs []error
	for _, b := range binds {
		for try := 0; ; try++ {
			s, err := openSocket(ifidx, q, g, b)
			if err == nil {
				return s, nil
			}
			if errors.Is(err, unix.EBUSY) && try < 100 {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			errs = append(errs, err)
			break
		}
	}
	return nil, errors.Join(errs...)
}

// release frees everything Listen set up.
func (c *Conn) release() {
	if c.f != nil {
		c.f.Close()
	}
	c.closeRest()
}

// closeRest frees everything but f, which has been closed (and with it
// socks[0]'s socket or the epoll instance).
func (c *Conn) closeRest() {
	if c.prog != nil {
		c.prog.close()
	}
	if c.f != nil {
		if c.epfd >= 0 {
			c.epfd = -1
		} else {
			c.socks[0].fd = -1
		}
	}
	if c.epfd >= 0 {
		unix.Close(c.epfd)
	}
	for _, s := range c.socks {
		s.close()
	}
	if c.nl != nil {
		c.nl.Close()
	}
}

// Mode tells how the path runs: "native/copy", "native/zerocopy",
// "generic/copy" (XDP attach mode / AF_XDP bind mode actually in use).
func (c *Conn) Mode() string { return c.mode }

// Interface returns the name of the interface.
func (c *Conn) Interface() string { return c.ifname }

// Queues returns how many RX queues (sockets) the Conn serves.
func (c *Conn) Queues() int { return len(c.socks) }

// LocalAddr implements packetio.Conn.
func (c *Conn) LocalAddr() netip.Addr { return c.local }

// LocalAddrPort returns the local address and UDP port.
func (c *Conn) LocalAddrPort() netip.AddrPort { return netip.AddrPortFrom(c.local, c.port) }

// MaxPacket implements packetio.Conn: the interface MTU less the IPv4 and
// UDP headers, or less when the frames or Options.MaxPacket are smaller.
func (c *Conn) MaxPacket() int { return c.maxPacket }

// Stats implements packetio.Conn.
func (c *Conn) Stats() packetio.Stats { return c.ctr.Stats() }

// XDPStats are the AF_XDP path's own counters: the XDP program's, the
// kernel's (XDP_STATISTICS, summed over the sockets) and the Conn's.
type XDPStats struct {
	Redirected uint64 // packets the XDP program redirected to a socket
	NoSocket   uint64 // RoCEv2 packets for the Conn on a queue without a socket (passed to the kernel)

	RxDropped       uint64 // kernel: received packets dropped (no frame, too long, ...)
	RxInvalidDescs  uint64 // kernel: bad fill-ring entries
	TxInvalidDescs  uint64 // kernel: bad TX descriptors
	RxRingFull      uint64 // kernel: packets dropped because the RX ring was full
	RxFillRingEmpty uint64 // kernel: times it found the fill ring empty
	TxRingEmpty     uint64 // kernel: times it found the TX ring empty

	FillEmptySeen uint64 // times Receive found every fill-ring frame taken before refilling
	Malformed     uint64 // frames redirected but not well-formed RoCEv2 (also in Stats().RxDrops)
	TxDropped     uint64 // frames the device dropped after the kernel took them (sendto EBUSY)
	TxKicks       uint64 // sendto calls that woke the kernel's transmit
	RxKicks       uint64 // recvfrom calls that woke a driver waiting for fill-ring frames
	TxStuck       uint64 // Transmits that left frames on the TX ring after their kicks (sent by a later kick)
	Looped        uint64 // packets sent to the local address and looped back (in PacketsOut and, once received, PacketsIn)
}

// XDPStats returns the counters of the AF_XDP path.
func (c *Conn) XDPStats() (XDPStats, error) {
	c.inUse.Add(1)
	defer c.inUse.Add(-1)
	if c.closed.Load() {
		return XDPStats{}, packetio.ErrClosed
	}
	var st XDPStats
	var err error
	if st.Redirected, st.NoSocket, err = c.prog.count(); err != nil {
		return st, err
	}
	for _, s := range c.socks {
		k, err := s.stats()
		if err != nil {
			return st, fmt.Errorf("packetio/afxdp: getsockopt XDP_STATISTICS: %w", err)
		}
		st.RxDropped += k.Rx_dropped
		st.RxInvalidDescs += k.Rx_invalid_descs
		st.TxInvalidDescs += k.Tx_invalid_descs
		st.RxRingFull += k.Rx_ring_full
		st.RxFillRingEmpty += k.Rx_fill_ring_empty_descs
		st.TxRingEmpty += k.Tx_ring_empty_descs
	}
	st.FillEmptySeen = c.xctr.fillEmpty.Load()
	st.Malformed = c.xctr.malformed.Load()
	st.TxDropped = c.xctr.txDropped.Load()
	st.TxKicks = c.xctr.txKicks.Load()
	st.RxKicks = c.xctr.rxKicks.Load()
	st.TxStuck = c.xctr.txStuck.Load()
	st.Looped = c.xctr.looped.Load()
	return st, nil
}

// Close implements packetio.Conn: it detaches the XDP program, closes the
// sockets and unmaps their memory once no driver call is under way.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return packetio.ErrClosed
	}
	err := c.f.Close() // waits for a netpoller callback under way
	for c.inUse.Load() != 0 {
		time.Sleep(50 * time.Microsecond)
	}
	c.closeRest()
	if err != nil {
		return fmt.Errorf("packetio/afxdp: close: %w", err)
	}
	return nil
}

func (c *Conn) opErr(op string, err error) error {
	if c.closed.Load() {
		return packetio.ErrClosed
	}
	return fmt.Errorf("packetio/afxdp: %s: %w", op, err)
}
