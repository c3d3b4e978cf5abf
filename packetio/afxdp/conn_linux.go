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
	"github.com/goroce/goroce/packetio/internal/mcast"
	"github.com/goroce/goroce/packetio/internal/pollwait"
	"github.com/goroce/goroce/wire"
)

var errNotSupported = packetio.ErrNotSupported

// hdrLen is the most room before the transport packet in a transmit frame:
// Ethernet, IPv6 and UDP headers. A Conn on an IPv4 address takes
// Ethernet, IPv4 (no options) and UDP headers' (Conn.hdrLen).
const hdrLen = wire.EthernetLen + wire.IPv6UDPLen

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

	mc mcast.Set // multicast groups joined (mcast_linux.go)

	local     netip.Addr
	srcMAC    wire.MAC
	port      uint16
	dstPort   uint16
	tos       uint8
	hdrLen    int  // the room before the transport packet: Ethernet, IP and UDP headers
	noECN     bool // Options.NoECN: packets' own TOS (Packet.TOS) not-ECT too
	maxPacket int
	batch     int
	frameSize int
	multi     bool // multi-buffer: a packet may span several frames (XDP_USE_SG)
	rxChain   int  // the most frames one received Ethernet frame of the MTU spans

	// Receive side: driver goroutine only.
	rx     []packetio.Packet
	held   [][]uint64 // per socket: frames of the packets Receive returned last, back to the fill ring at the next Receive
	next   int        // socket to look at first (round robin)
	recvFn func(fd uintptr) bool
	rxN    int
	// rxDropped counts what the last harvest read and dropped (frames,
	// or the parts of a chain too long to hold), so that Receive reads on.
	rxDropped int
	wait      pollwait.Waiter // Receive's wait in the netpoller, and Wake
	loop      loopback        // packets sent to the local address
	// Multi-buffer: a packet received in several frames is copied into
	// its batch slot of scratch (rxSlot bytes each), so that its Buf is
	// contiguous; skip[i] is set while the rest of a chain too long to
	// hold is dropped on socket i.
	scratch []byte
	rxSlot  int
	skip    []bool

	// Send side: driver goroutine only. A transmit slot is txPer adjacent
	// frames of socks[0]'s UMEM from txBase on (one frame but in
	// multi-buffer mode), named by its UMEM offset; pend counts each
	// slot's descriptors not completed yet.
	txBase uint64
	slot   int
	txPer  int
	pend   []uint8

	tx    []packetio.Packet
	free  []uint64          // transmit slots not in use
	lentF []uint64          // slots of the packets TxBatch lent, in order
	used  []bool            // Transmit: lentF[i] went to the TX ring
	txl   packetio.TxLender // how many of tx are lent

	// dropsAt is when Receive last read the kernel's drop counts into
	// ctr.KernelRxDrops (refreshDrops).
	dropsAt time.Time

	closed atomic.Bool
	inUse  atomic.Int32 // driver calls under way; Close unmaps only when none
	ctr    packetio.Counters
	xctr   struct {
		fillEmpty, malformed, txDropped, txKicks, rxKicks, txStuck, looped, rxChains, txChains atomic.Uint64
	}
}

var (
	_ packetio.Conn          = (*Conn)(nil)
	_ packetio.RxDropCounter = (*Conn)(nil)
)

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
	if o.sgFlag == 0 {
		o.sgFlag = unix.XDP_USE_SG
	}
	return o
}

// frameSize returns the UMEM frame size for an interface of MTU mtu:
// Options.FrameSize, or DefaultFrameSize when it holds an Ethernet frame of
// the MTU after the headroom, else JumboFrameSize.
func (o Options) frameSize(mtu int) int {
	if o.FrameSize != 0 {
		return o.FrameSize
	}
	if mtu+wire.EthernetLen <= DefaultFrameSize-o.Headroom-unix.XDP_PACKET_HEADROOM || o.SingleBuffer {
		return DefaultFrameSize
	}
	return JumboFrameSize
}

func (o Options) check() error {
	fs := o.FrameSize
	if fs == 0 {
		fs = DefaultFrameSize
	}
	switch {
	case o.Frames < 8 || o.Frames > 1<<20:
		return fmt.Errorf("packetio/afxdp: Frames %d: want 8 to %d", o.Frames, 1<<20)
	case o.RxFrames <= 0 || o.RxFrames >= o.Frames:
		return fmt.Errorf("packetio/afxdp: RxFrames %d of %d frames: want some of them, not all", o.RxFrames, o.Frames)
	case !isPow2(fs) || fs < 2048 || fs > os.Getpagesize():
		return fmt.Errorf("packetio/afxdp: FrameSize %d: want a power of two from 2048 to the page size (%d)", o.FrameSize, os.Getpagesize())
	case fs-o.Headroom-unix.XDP_PACKET_HEADROOM < hdrLen+wire.BTHLen+wire.ICRCLen:
		return fmt.Errorf("packetio/afxdp: Headroom %d leaves no room in a %d-byte frame", o.Headroom, fs)
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
	if !local.IsValid() || local.IsUnspecified() || local.Zone() != "" || local.IsLinkLocalUnicast() {
		return nil, fmt.Errorf("packetio/afxdp: listen on %v: want an IPv4 or IPv6 (not link-local) address of an interface: %w", local, errNotSupported)
	}
	c := &Conn{epfd: -1, local: local, port: o.Port, dstPort: o.DstPort, tos: packetio.SendTOS(o.TOS, o.NoECN), noECN: o.NoECN, batch: o.Batch,
		hdrLen: wire.EthernetLen + wire.IPv4UDPLen}
	family := unix.AF_INET
	if local.Is6() {
		c.hdrLen, family = hdrLen, unix.AF_INET6
	}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	numRx, err := c.findInterface(family)
	if err != nil {
		return nil, err
	}
	if err := c.layout(&o); err != nil {
		return nil, err
	}
	queues := o.Queues
	if queues == 0 {
		queues = max(1, numRx-o.Queue)
	}
	c.neigh = newNeighbours(c.nl, c.ifidx, o.ResolveTimeout, o.NeighbourTTL)

	if c.prog, err = loadProgram(o.Queue+queues, local, o.Port, c.multi); err != nil {
		return nil, c.multiErr(err)
	}
	g := geometry{frames: o.Frames, rxFrames: o.RxFrames, frameSize: o.FrameSize, headroom: o.Headroom, populate: o.Populate, lock: o.Lock}
	if err := c.bindQueues(&o, g, queues); err != nil {
		return nil, err
	}
	if err := c.pollOn(); err != nil {
		return nil, err
	}
	c.allocate(&o, g)
	return c, nil
}

// findInterface finds the interface that holds c.local over netlink (a
// handle kept in c.nl) and sets c.ifidx, c.ifname, c.mtu and c.srcMAC from
// it; it returns how many receive queues the interface reports, and fails
// when no interface holds the address or the one that does is not
// Ethernet.
func (c *Conn) findInterface(family int) (numRxQueues int, err error) {
	if c.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		return 0, fmt.Errorf("packetio/afxdp: netlink: %w", err)
	}
	addrs, err := c.nl.AddrList(nil, family)
	if err != nil {
		return 0, fmt.Errorf("packetio/afxdp: list addresses: %w", err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == c.local {
			c.ifidx = a.LinkIndex
		}
	}
	if c.ifidx == 0 {
		return 0, fmt.Errorf("packetio/afxdp: no interface has address %v", c.local)
	}
	l, err := c.nl.LinkByIndex(c.ifidx)
	if err != nil {
		return 0, fmt.Errorf("packetio/afxdp: interface %d: %w", c.ifidx, err)
	}
	at := l.Attrs()
	c.ifname, c.mtu = at.Name, at.MTU
	if len(at.HardwareAddr) != 6 {
		return 0, fmt.Errorf("packetio/afxdp: %s is not an Ethernet interface: %w", c.ifname, errNotSupported)
	}
	c.srcMAC = wire.MAC(at.HardwareAddr)
	return at.NumRxQueues, nil
}

// bindQueues attaches the XDP program and binds an AF_XDP socket of
// geometry g to each of queues queues from o.Queue, in the copy modes
// o.Copy allows (zero-copy first), registering each with the program, and
// sets c.mode to what it got. With o.Queues 0 (every queue in use) it
// stops at the first queue the device refuses.
func (c *Conn) bindQueues(o *Options, g geometry, queues int) error {
	var binds []uint16
	switch o.Copy {
	case CopyAuto:
		binds = []uint16{unix.XDP_ZEROCOPY, unix.XDP_COPY}
	case ZeroCopy:
		binds = []uint16{unix.XDP_ZEROCOPY}
	case Copy:
		binds = []uint16{unix.XDP_COPY}
	default:
		return fmt.Errorf("packetio/afxdp: unknown copy mode %q", o.Copy)
	}
	if c.multi {
		for i := range binds {
			binds[i] |= o.sgFlag
		}
	}
	// The program goes on first: some drivers accept zero-copy sockets only
	// with XDP running.
	if err := c.prog.attach(c.ifidx, o.Attach); err != nil {
		return c.multiErr(err)
	}
	for q := o.Queue; q < o.Queue+queues; q++ {
		s, err := openQueue(c.ifidx, q, g, binds)
		if err != nil {
			if o.Queues == 0 && q > o.Queue && errors.Is(err, unix.EINVAL) {
				break // past the queues in use (the kernel reports the most the device may have)
			}
			return c.multiErr(fmt.Errorf("packetio/afxdp: %s queue %d: %w", c.ifname, q, err))
		}
		c.socks = append(c.socks, s)
		if err = c.prog.register(q, s.fd); err != nil {
			return err
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
	return nil
}

// pollOn sets up what Go's netpoller waits on: the socket, or an epoll
// instance over the sockets of several queues.
func (c *Conn) pollOn() (err error) {
	pfd := c.socks[0].fd
	if len(c.socks) > 1 {
		if c.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
			return fmt.Errorf("packetio/afxdp: epoll: %w", err)
		}
		for _, s := range c.socks {
			if err = unix.EpollCtl(c.epfd, unix.EPOLL_CTL_ADD, s.fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.fd)}); err != nil {
				return fmt.Errorf("packetio/afxdp: epoll: %w", err)
			}
		}
		if err = unix.SetNonblock(c.epfd, true); err != nil {
			return fmt.Errorf("packetio/afxdp: epoll: %w", err)
		}
		pfd = c.epfd
	}
	if c.f = os.NewFile(uintptr(pfd), "afxdp:"+c.ifname); c.f == nil {
		return fmt.Errorf("packetio/afxdp: bad descriptor %d", pfd)
	}
	if c.raw, err = c.f.SyscallConn(); err != nil {
		return fmt.Errorf("packetio/afxdp: %w", err)
	}
	if err = c.f.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("packetio/afxdp: the socket cannot wait in the netpoller: %w", err)
	}
	return nil
}

// allocate makes the Conn's batches, the receive side's held frames and
// the transmit side's free list of slots in the UMEM of geometry g.
func (c *Conn) allocate(o *Options, g geometry) {
	c.rx = make([]packetio.Packet, o.Batch)
	c.held = make([][]uint64, len(c.socks))
	for i := range c.held {
		c.held[i] = make([]uint64, 0, o.Batch*c.rxChain)
	}
	c.skip = make([]bool, len(c.socks))
	if c.multi {
		c.rxSlot = c.hdrLen + c.maxPacket
		c.scratch = make([]byte, o.Batch*c.rxSlot)
	}
	c.recvFn = c.recv
	c.wait.Init(c.f, c.raw, &c.closed, &c.ctr.Wakes)
	c.loop = loopback{slots: max(o.Batch, o.RxFrames/c.rxChain), size: c.maxPacket}
	slots := g.txFrames() / c.txPer
	c.tx = make([]packetio.Packet, o.Batch)
	c.txBase = uint64(o.RxFrames * o.FrameSize)
	c.pend = make([]uint8, slots)
	c.free = make([]uint64, 0, slots)
	for i := slots - 1; i >= 0; i-- {
		c.free = append(c.free, c.txBase+uint64(i*c.slot))
	}
	c.lentF = make([]uint64, 0, o.Batch)
	c.used = make([]bool, o.Batch)
}

// layout picks the frame size for the interface's MTU (o.FrameSize is set
// to it), whether packets are chained over frames (multi-buffer), the
// largest packet and the transmit slots.
func (c *Conn) layout(o *Options) error {
	o.FrameSize = o.frameSize(c.mtu)
	c.frameSize = o.FrameSize
	if err := o.check(); err != nil {
		return err
	}
	eth := c.mtu + wire.EthernetLen
	rxRoom := o.FrameSize - o.Headroom - unix.XDP_PACKET_HEADROOM
	c.rxChain, c.txPer, c.slot = 1, 1, o.FrameSize
	if eth <= rxRoom {
		c.maxPacket = min(o.MaxPacket, c.mtu-(c.hdrLen-wire.EthernetLen), rxRoom-c.hdrLen, o.FrameSize-c.hdrLen)
		return nil
	}
	if o.SingleBuffer {
		return fmt.Errorf("packetio/afxdp: %s: MTU %d: frames of %d bytes hold %d bytes after the headroom, not %d (single-buffer AF_XDP, Options.SingleBuffer; raise FrameSize or lower the MTU): %w: %w",
			c.ifname, c.mtu, o.FrameSize, rxRoom, eth, ErrMTU, errNotSupported)
	}
	c.multi = true
	c.maxPacket = min(o.MaxPacket, c.mtu-(c.hdrLen-wire.EthernetLen))
	c.rxChain = (eth + rxRoom - 1) / rxRoom
	c.txPer = (c.hdrLen + c.maxPacket + o.FrameSize - 1) / o.FrameSize
	c.slot = c.txPer * o.FrameSize
	if slots := (o.Frames - o.RxFrames) / c.txPer; o.Batch > slots {
		return fmt.Errorf("packetio/afxdp: Batch %d larger than the %d transmit slots (%d frames, %d per %d-byte packet)",
			o.Batch, slots, o.Frames-o.RxFrames, c.txPer, c.maxPacket)
	}
	if (o.RxFrames)/c.rxChain < o.Batch {
		return fmt.Errorf("packetio/afxdp: Batch %d larger than the %d packets of %d receive frames (%d per Ethernet frame of MTU %d)",
			o.Batch, o.RxFrames/c.rxChain, o.RxFrames, c.rxChain, c.mtu)
	}
	return nil
}

// multiErr marks an error of setting up multi-buffer AF_XDP as the kernel's
// or driver's refusal of it (ErrMultiBuffer, ErrMTU,
// packetio.ErrNotSupported), so that a caller falls back.
func (c *Conn) multiErr(err error) error {
	if !c.multi || errors.Is(err, ErrPermission) {
		return err
	}
	return fmt.Errorf("packetio/afxdp: %s: MTU %d needs packets chained over %d-byte frames (multi-buffer AF_XDP: an XDP program with frags, XDP_USE_SG; Linux 6.6 or later, generic XDP 6.8), refused: %w: %w: %w: %w",
		c.ifname, c.mtu, c.frameSize, ErrMultiBuffer, ErrMTU, errNotSupported, err)
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

// MultiBuffer reports whether a packet may span several UMEM frames
// (multi-buffer AF_XDP, for an MTU that one frame does not hold), and
// returns the frame size.
func (c *Conn) MultiBuffer() (bool, int) { return c.multi, c.frameSize }

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

// RxDropped implements packetio.RxDropCounter: the packets the kernel
// dropped for the Conn's sockets because an RX ring was full or no
// fill-ring frame was free (XDP_STATISTICS rx_ring_full and rx_dropped,
// summed over the sockets; Stats' KernelRxDrops). Receive reads them from
// the kernel (a getsockopt per socket) when it returns a full batch, at
// most every DropsEvery, and otherwise every DropsIdle: the count lags the
// kernel's by that much. Drops before the XDP program (the driver's, the
// interface's) are not in it.
func (c *Conn) RxDropped() uint64 { return c.ctr.KernelRxDrops.Load() }

// refreshDrops reads the kernel's drop counts into ctr.KernelRxDrops when
// it is time, after a Receive that returns n packets (see RxDropped).
func (c *Conn) refreshDrops(n int) {
	now := time.Now()
	since := now.Sub(c.dropsAt)
	if since < DropsEvery || n < c.batch && since < DropsIdle {
		return
	}
	c.dropsAt = now
	var sum uint64
	for _, s := range c.socks {
		k, err := s.stats()
		if err != nil {
			return // closing; XDPStats reports the error
		}
		sum += k.Rx_dropped + k.Rx_ring_full
	}
	c.ctr.KernelRxDrops.Store(sum)
}

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
	RxChained     uint64 // multi-buffer: packets received in several frames (copied into one buffer)
	TxChained     uint64 // multi-buffer: packets sent in several frames
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
	st.RxChained = c.xctr.rxChains.Load()
	st.TxChained = c.xctr.txChains.Load()
	return st, nil
}

// Close implements packetio.Conn: it detaches the XDP program, closes the
// sockets and unmaps their memory once no driver call is under way.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return packetio.ErrClosed
	}
	c.mc.Close()
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
