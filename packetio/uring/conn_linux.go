package uring

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/mcast"
	"github.com/goroce/goroce/packetio/internal/udpsock"
	"github.com/goroce/goroce/wire"
)

// ErrWrongThread is returned (wrapped) by Receive and Transmit of a Conn
// opened with Options.SingleIssuer when called from an OS thread other than
// the one that made the first call.
var ErrWrongThread = errors.New("packetio/uring: single-issuer ring used from another OS thread (lock the driver goroutine with runtime.LockOSThread)")

// Layout of a receive slot: the recvmsgOut a multishot RECVMSG writes, the
// source address, the control messages, then the payload. Single-shot
// RECVMSGs use the same offsets, so a packet's bytes are always at
// slotPayload. The control room holds a UDP_GRO cmsg beside udpsock's
// (the kernel writes it before IP_PKTINFO and IP_TOS, which a smaller room
// would cut off).
const (
	slotName     = int(sizeofRecvmsgOut)
	slotControl  = slotName + udpsock.SockaddrRoom
	controlSpace = udpsock.ControlSpace + udpsock.GROCmsgSpace
	slotPayload  = slotControl + controlSpace
)

// bgid is the provided-buffer group of the receive slots.
const bgid = 0x4791 & 0xFFFF

// taskrunMode is how the kernel runs the task work that completes
// requests.
type taskrunMode int

const (
	taskrunNormal taskrunMode = iota // a signal-like notification of the submitting thread
	taskrunCoop                      // IORING_SETUP_COOP_TASKRUN: no interrupt; run at the thread's next kernel entry
	taskrunDefer                     // IORING_SETUP_DEFER_TASKRUN: run only in io_uring_enter by the single issuer
)

// disable are features to leave out, for tests and benchmarks of the
// fallbacks on kernels that have everything.
type disable struct {
	multishot bool        // use batched single-shot RECVMSG
	mode      taskrunMode // task-run mode unless Options say otherwise
	groRoom   int         // payload room of a slot with GRO, if not 0 (tests of truncated trains)
}

// Conn is a UDP socket for RoCEv2 over IPv4 or IPv6 driven through io_uring. It
// implements packetio.Conn.
type Conn struct {
	r     *ring
	sock  int
	probe int      // an unbound UDP socket in the socket's namespace: Close binds it to tell the port is free
	v6    bool     // an IPv6 socket
	tos   uint8    // the socket's TOS (IPv6: traffic class)
	noECN bool     // Options.NoECN: packets' own TOS (Packet.TOS) not-ECT too
	efd   int      // eventfd that Wake writes and a READ in the ring waits on
	efile *os.File // efd, for Wake and Close: its writes are safe against a concurrent Close
	// pfile is a duplicate of the ring's descriptor in Go's netpoller
	// (nil with a single-issuer ring, or where the ring cannot be polled):
	// under one processor Receive waits there for the ring to hold a
	// completion, parking its goroutine, not an OS thread (see waitPoll).
	pfile     *os.File
	praw      syscall.RawConn
	pready    func(uintptr) bool
	pdl       time.Time // pfile's read deadline, valid when pdlSet
	pdlSet    bool
	local     netip.AddrPort
	dstPort   [2]byte
	maxPacket int
	batch     int
	features  Features

	mu sync.Mutex // held by Receive and Transmit; Close takes it to free the rings

	// Receive side. rxMem holds nSlots slots of slotSize bytes, then the
	// eventfd's 8-byte read buffer; kernel-written memory is kept out of
	// the Go heap. A slot has room for rxRoom bytes of payload: MaxPacket,
	// or a GRO train.
	rxMem      []byte
	slotSize   int
	rxRoom     int
	nSlots     int
	bufs       *bufRing // multishot: the slots, lent to the kernel
	msHdr      unix.Msghdr
	msArmed    bool          // a multishot RECVMSG is outstanding
	msWorked   bool          // a multishot RECVMSG has delivered a datagram
	ssHdrs     []unix.Msghdr // single-shot: one per slot
	ssIovs     []unix.Iovec
	rearm      []uint16 // single-shot: slots to arm again
	ssArmed    int      // single-shot: RECVMSGs of the outstanding chain, at most a batch (armChain)
	rx         []packetio.Packet
	rxSlots    []uint16 // slots of the packets returned by the last Receive
	wakeArmed  bool
	inflight   int   // requests whose last completion has not been seen
	pend       []cqe // completions reaped by Transmit for Receive, a ring
	pendHead   int
	pendLen    int
	arg        getEventsArg
	ts         unix.Timespec
	singleshot bool
	rxKDrops   uint32 // the socket's drop count (SO_RXQ_OVFL) as the last datagram read carried it

	// Send side (transmit_linux.go). The k-th packet Transmit sends is
	// txIovs[txIov0[k]:txIov0[k+1]] (one iovec, or three for a packet in
	// pieces: Buf's head, Ext, Buf's tail), txLen[k] bytes to txAddr[k],
	// and txIdx[k] is its index in pkts. A send entry j is either a message (j < txCap:
	// txHdrs[j], to txNames[j], the packets msgK[j] to msgK[j]+msgN[j]-1,
	// with txCtl's j-th UDP_SEGMENT cmsg when it has several) or, j =
	// txCap+k, packet k alone (fbHdrs[k], a refused GSO message's packet
	// sent again). txRes, txDone and txTries are per send entry.
	txl     packetio.TxLender
	txCap   int
	txHdrs  []unix.Msghdr
	txNames []udpsock.Sockaddr
	txCtl   []byte
	msgK    []int
	msgN    []int
	fbHdrs  []unix.Msghdr
	txIovs  []unix.Iovec
	txIov0  []int
	txLen   []int
	txAddr  []udpsock.Dest
	txIdx   []int
	txRes   []int32
	txDone  []bool
	txTries []uint8
	retry   []int // send entries to send (again)
	again   []int // the next round's, swapped with retry
	gen     uint32

	// Offloads: off.GSO() is read by Transmit; ids rewrites the ICRCs of
	// GSO segments.
	off udpsock.OffloadState
	ids wire.ICRCIDCache

	one    [8]byte // the eventfd increment Wake writes
	waking atomic.Bool
	parked atomic.Bool
	// pollParked: a parked Receive waits in the netpoller (waitPoll), which
	// Wake ends by moving pfile's read deadline to the past: that readies
	// the waiting goroutine at once, where the eventfd's completion would
	// reach it only when the runtime next polls the network (up to 10 ms
	// later while another goroutine keeps yielding the one processor).
	pollParked atomic.Bool
	closed     atomic.Bool
	ctr        packetio.Counters
	nops       int // NOP completions seen (ring tests)

	mc mcast.Set // multicast groups joined (mcast_linux.go)
}

var (
	_ packetio.Conn          = (*Conn)(nil)
	_ packetio.RxDropCounter = (*Conn)(nil)
)

// Features tells which io_uring features a Conn uses.
type Features struct {
	Multishot    bool // multishot RECVMSG (Linux 6.0); otherwise batched single-shot RECVMSGs
	BufRing      bool // provided-buffer ring (IORING_REGISTER_PBUF_RING, Linux 5.19)
	DeferTaskrun bool // IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN (Linux 6.1; Options.SingleIssuer)
	CoopTaskrun  bool // IORING_SETUP_COOP_TASKRUN|TASKRUN_FLAG (Linux 5.19)
	SubmitAll    bool // IORING_SETUP_SUBMIT_ALL (Linux 5.18)
	// RegisteredBuffers is always false: SENDMSG and RECVMSG take no fixed
	// buffers, and the send that does (SEND_ZC) pins pages and posts a
	// second completion per packet, which costs more than copying packets
	// of at most a few KiB.
	RegisteredBuffers bool
}

// String lists the features in use.
func (f Features) String() string {
	s := ""
	add := func(on bool, name string) {
		if on {
			if s != "" {
				s += ","
			}
			s += name
		}
	}
	add(f.Multishot, "multishot-recvmsg")
	add(!f.Multishot, "singleshot-recvmsg")
	add(f.BufRing, "pbuf-ring")
	add(f.RegisteredBuffers, "registered-buffers")
	add(f.DeferTaskrun, "single-issuer,defer-taskrun")
	add(f.CoopTaskrun, "coop-taskrun")
	add(f.SubmitAll, "submit-all")
	return s
}

// Listen opens an unconnected UDP socket bound to local and opts.Port (4791
// by default), configured as package udp's, and an io_uring to drive it;
// see the package documentation. local must be an IPv4 address (or
// IPv4-mapped). Without a usable io_uring it returns an error matching
// ErrUnavailable and packetio.ErrNotSupported.
func Listen(local netip.Addr, opts Options) (*Conn, error) {
	return listen(local, opts, disable{mode: taskrunCoop})
}

func listen(local netip.Addr, opts Options, dis disable) (*Conn, error) {
	o := opts.withDefaults()
	local, err := o.shared().Check("packetio/uring", local)
	if err != nil {
		return nil, err
	}
	c := &Conn{sock: -1, probe: -1, efd: -1, maxPacket: o.MaxPacket, batch: o.Batch}
	c.one[0] = 1 // little-endian 1; the eventfd only needs non-zero
	if err := c.open(local, o, dis); err != nil {
		c.free(true)
		return nil, err
	}
	return c, nil
}

func (c *Conn) open(local netip.Addr, o Options, dis disable) error {
	mode := dis.mode
	if o.NoCoopTaskrun {
		mode = taskrunNormal
	}
	if o.SingleIssuer {
		mode = taskrunDefer
	}

	c.v6, c.tos, c.noECN = local.Is6(), packetio.SendTOS(o.TOS, o.NoECN), o.NoECN
	fd, port, err := udpsock.Open("packetio/uring", local, udpsock.Config{
		Port: o.Port, RecvBuffer: o.RecvBuffer, SendBuffer: o.SendBuffer, TOS: c.tos,
		// Blocking: io_uring tries each operation without waiting and
		// arms a poll when it would block; on an O_NONBLOCK socket some
		// kernels return EAGAIN instead.
		NonBlock: false,
		Checksum: o.GSO != OffloadOff || local.Is6(),
	})
	if err != nil {
		return err
	}
	c.sock = fd
	if err := c.off.Probe("packetio/uring", fd, o.GSO, o.GRO); err != nil {
		return err
	}
	c.nSlots = o.rxBuffers(c.off.GRO)
	c.txCap = o.Batch
	if c.off.GSO() {
		// Room for several whole GSO messages, as package udp lends.
		c.txCap = max(c.txCap, udpsock.GSOTxBatch)
	}

	sqEntries := pow2(max(c.txCap, 8) + 8)
	cqEntries := pow2(c.nSlots + sqEntries + 16)
	r, err := newRing(uint32(sqEntries), uint32(cqEntries), mode)
	if err != nil {
		return err
	}
	c.r = r
	c.features.DeferTaskrun = r.flags&setupDeferTaskrun != 0
	c.features.CoopTaskrun = r.flags&setupCoopTaskrun != 0
	c.features.SubmitAll = r.flags&setupSubmitAll != 0
	if ok, err := r.supported(opRecvmsg, opSendmsg, opRead); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: the kernel's io_uring lacks RECVMSG, SENDMSG or READ", ErrUnavailable)
	}
	if c.r.sq.entries < uint32(o.Batch)+4 {
		return fmt.Errorf("packetio/uring: the kernel gave %d SQ entries for a batch of %d", c.r.sq.entries, o.Batch)
	}

	family := unix.AF_INET
	if c.v6 {
		family = unix.AF_INET6
	}
	if c.probe, err = unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP); err != nil {
		return fmt.Errorf("packetio/uring: socket: %w", err)
	}
	if o.DstPort == 0 {
		o.DstPort = int(port)
	}
	c.local = netip.AddrPortFrom(local, port)
	c.dstPort = [2]byte{byte(o.DstPort >> 8), byte(o.DstPort)}

	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("packetio/uring: eventfd: %w", err)
	}
	c.efd = efd
	c.efile = os.NewFile(uintptr(efd), "uring-wake")

	if err := c.initRx(dis); err != nil {
		return err
	}
	c.initTx()
	if mode != taskrunDefer {
		c.openPoll()
	}
	return nil
}

// openPoll puts a duplicate of the ring's descriptor in Go's netpoller,
// where Receive then waits (waitPoll); where that fails, Receive waits in
// io_uring_enter as before. A single-issuer ring runs its task work only
// in io_uring_enter by its one thread, which the netpoller's readiness
// would not do: it keeps waiting there.
func (c *Conn) openPoll() {
	fd, err := unix.FcntlInt(uintptr(c.r.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	// O_NONBLOCK (shared with the ring's own descriptor, one open file)
	// is what the netpoller asks; io_uring_enter does not heed it.
	if unix.SetNonblock(fd, true) != nil {
		unix.Close(fd)
		return
	}
	f := os.NewFile(uintptr(fd), "io_uring")
	raw, err := f.SyscallConn()
	if err != nil || f.SetReadDeadline(time.Time{}) != nil { // not in the netpoller
		f.Close()
		return
	}
	c.pfile, c.praw = f, raw
	c.pready = func(uintptr) bool { return c.r.cq.ready() > 0 }
}

func (c *Conn) initRx(dis disable) error {
	c.rxRoom = c.maxPacket
	segs := 1
	if c.off.GRO {
		c.rxRoom, segs = udpsock.GROBuffer, udpsock.GROMaxSegments
		if dis.groRoom > 0 {
			c.rxRoom = dis.groRoom
		}
	}
	c.slotSize = (slotPayload + c.rxRoom + 63) &^ 63
	size := c.nSlots*c.slotSize + 64
	// MAP_POPULATE: mapped now, not one fault at a time inside the first
	// receives (see packetio.Prefault).
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("packetio/uring: mmap receive buffers: %w", err)
	}
	c.rxMem = mem
	// A completion gives up to segs packets (a GRO train), and Receive
	// reaps up to a batch of completions.
	c.rx = make([]packetio.Packet, c.batch*segs)
	c.rxSlots = make([]uint16, 0, c.batch)
	c.pend = make([]cqe, pow2(c.nSlots+c.batch+16))
	c.arg.ts = uint64(uintptr(unsafe.Pointer(&c.ts)))
	if !dis.multishot {
		c.bufs, err = newBufRing(c.r.fd, c.nSlots, bgid)
		if err != nil && !errors.Is(err, packetio.ErrNotSupported) {
			return err
		}
	}
	if c.bufs != nil {
		for i := range c.nSlots {
			c.bufs.add(unsafe.Pointer(&c.rxMem[i*c.slotSize]), uint32(c.slotSize), uint16(i))
		}
		c.bufs.publish()
		c.msHdr.Namelen = uint32(udpsock.SockaddrRoom)
		c.msHdr.SetControllen(controlSpace)
		c.features.Multishot, c.features.BufRing = true, true
		return nil
	}
	c.toSingleshot()
	return nil
}

// toSingleshot sets up batched single-shot RECVMSGs, one per slot, when
// multishot receive is disabled or the kernel refused it.
func (c *Conn) toSingleshot() {
	c.singleshot = true
	c.features.Multishot = false
	if c.ssHdrs != nil {
		return
	}
	c.ssHdrs = make([]unix.Msghdr, c.nSlots)
	c.ssIovs = make([]unix.Iovec, c.nSlots)
	c.rearm = make([]uint16, 0, c.nSlots)
	for i := range c.nSlots {
		base := i * c.slotSize
		c.ssIovs[i].Base = &c.rxMem[base+slotPayload]
		c.ssIovs[i].SetLen(c.rxRoom)
		h := &c.ssHdrs[i]
		h.Name = &c.rxMem[base+slotName]
		h.Iov = &c.ssIovs[i]
		h.SetIovlen(1)
		h.Control = &c.rxMem[base+slotControl]
		c.rearm = append(c.rearm, uint16(i))
	}
}

func (c *Conn) initTx() {
	b := c.txCap
	c.txl = packetio.NewTxLender(b, c.maxPacket)
	c.txHdrs = make([]unix.Msghdr, b)
	c.txNames = make([]udpsock.Sockaddr, b)
	c.txCtl = make([]byte, b*txCtlSpace)
	c.msgK = make([]int, b)
	c.msgN = make([]int, b)
	c.fbHdrs = make([]unix.Msghdr, b)
	c.txIovs = make([]unix.Iovec, 3*b)
	c.txIov0 = make([]int, b+1)
	c.txLen = make([]int, b)
	c.txAddr = make([]udpsock.Dest, b)
	c.txIdx = make([]int, b)
	c.txRes = make([]int32, 2*b)
	c.txDone = make([]bool, 2*b)
	c.txTries = make([]uint8, 2*b)
	c.retry = make([]int, 0, b)
	c.again = make([]int, 0, b)
	for i := range b {
		c.txNames[i] = udpsock.Sockaddr{Port: c.dstPort}
		h := &c.txHdrs[i]
		h.Name = (*byte)(unsafe.Pointer(&c.txNames[i]))
		h.Namelen = uint32(udpsock.SizeofSockaddr)
		c.fbHdrs[i].Namelen = uint32(udpsock.SizeofSockaddr)
	}
}

// Features returns the io_uring features the Conn uses.
func (c *Conn) Features() Features { return c.features }

// LocalAddr implements packetio.Conn.
func (c *Conn) LocalAddr() netip.Addr { return c.local.Addr() }

// LocalAddrPort returns the local address and UDP port.
func (c *Conn) LocalAddrPort() netip.AddrPort { return c.local }

// MaxPacket implements packetio.Conn.
func (c *Conn) MaxPacket() int { return c.maxPacket }

// Stats implements packetio.Conn.
func (c *Conn) Stats() packetio.Stats { return c.ctr.Stats() }

// RxDropped implements packetio.RxDropCounter: the datagrams the kernel
// dropped because the socket's receive buffer was full (Stats'
// KernelRxDrops), as the last datagram Receive read reported them
// (SO_RXQ_OVFL). Drops after it are learnt with the next datagram read.
func (c *Conn) RxDropped() uint64 { return c.ctr.KernelRxDrops.Load() }

// Close implements packetio.Conn. It wakes a blocked Receive, waits for it
// to return, cancels the ring's outstanding requests, and frees the ring,
// the socket and the buffers.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return packetio.ErrClosed
	}
	c.efile.Write(c.one[:])
	c.mc.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.free(c.drain())
}

// drain cancels the outstanding requests and reaps their last completions,
// so that the kernel no longer holds the socket (its port is free for the
// next Listen when Close returns) nor writes into the receive memory. A
// single-issuer ring refuses this from another thread; drain then reports
// false and the receive memory stays mapped (it is not Go memory), because
// the kernel may still write a datagram into it while it tears the ring
// down.
func (c *Conn) drain() bool {
	for {
		_, errno := c.r.submit(0, nil) // arms queued and not submitted: submit, then cancel
		if errno == 0 {
			break
		}
		if errno != unix.EINTR && errno != unix.EAGAIN && errno != unix.EBUSY {
			return false
		}
	}
	if c.r.cancelAll() != nil {
		return false
	}
	account := func(e cqe) {
		switch udKind(e.userData) {
		case kindWake:
			c.inflight--
		case kindRecv:
			if c.singleshot || e.flags&cqeFMore == 0 {
				c.inflight--
			}
		}
	}
	for ; c.pendLen > 0; c.pendLen-- {
		account(c.pend[c.pendHead])
		c.pendHead = (c.pendHead + 1) & (len(c.pend) - 1)
	}
	for end := time.Now().Add(time.Second); ; {
		for {
			e, ok := c.r.cq.next()
			if !ok {
				break
			}
			account(e)
		}
		if c.inflight <= 0 || !time.Now().Before(end) {
			break
		}
		c.ts = unix.NsecToTimespec(int64(10 * time.Millisecond))
		if _, errno := c.r.submit(1, &c.arg); errno != 0 && errno != unix.ETIME && errno != unix.EINTR {
			return false
		}
	}
	return c.inflight <= 0
}

// free releases what open acquired; the buffers only when the kernel can
// no longer write into them.
func (c *Conn) free(buffers bool) error {
	var err error
	if c.r != nil {
		err = c.r.close()
	}
	if c.sock >= 0 {
		unix.Close(c.sock)
		c.sock = -1
		c.waitPortFree()
	}
	if c.probe >= 0 {
		unix.Close(c.probe)
		c.probe = -1
	}
	if c.efile != nil {
		c.efile.Close()
	} else if c.efd >= 0 {
		unix.Close(c.efd)
	}
	if c.pfile != nil {
		c.pfile.Close()
	}
	if buffers {
		if c.bufs != nil {
			c.bufs.free()
		}
		if c.rxMem != nil {
			unix.Munmap(c.rxMem)
			c.rxMem = nil
		}
	}
	return err
}

// waitPortFree waits (at most 100 ms) until the socket's address and port
// can be bound again. A cancelled receive is completed, and the socket's
// last reference dropped, by the thread that armed it, which may run a few
// microseconds after Close reaped the completion; waiting here makes Close
// as final as closing a plain socket, so that a Listen right after it on the
// same port succeeds.
func (c *Conn) waitPortFree() {
	if c.probe < 0 || !c.local.IsValid() {
		return
	}
	var sa unix.Sockaddr
	if c.v6 {
		sa = &unix.SockaddrInet6{Port: int(c.local.Port()), Addr: c.local.Addr().As16()}
	} else {
		sa = &unix.SockaddrInet4{Port: int(c.local.Port()), Addr: c.local.Addr().As4()}
	}
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
		if err := unix.Bind(c.probe, sa); err != unix.EADDRINUSE {
			return // free (the probe is closed next), or unanswerable
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// opErr turns an error into the package's: ErrClosed once Close was called.
func (c *Conn) opErr(op string, err error) error {
	if c.closed.Load() {
		return packetio.ErrClosed
	}
	return fmt.Errorf("packetio/uring: %s: %w", op, err)
}
