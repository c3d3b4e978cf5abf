package uring

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/udpsock"
)

// ErrWrongThread is returned (wrapped) by Receive and Transmit of a Conn
// opened with Options.SingleIssuer when called from an OS thread other than
// the one that made the first call.
var ErrWrongThread = errors.New("packetio/uring: single-issuer ring used from another OS thread (lock the driver goroutine with runtime.LockOSThread)")

// Layout of a receive slot: the recvmsgOut a multishot RECVMSG writes, the
// source address, the control messages, then the payload. Single-shot
// RECVMSGs use the same offsets, so a packet's bytes are always at
// slotPayload.
const (
	slotName    = int(sizeofRecvmsgOut)
	slotControl = slotName + int(udpsock.SizeofSockaddrInet4)
	slotPayload = slotControl + udpsock.ControlSpace
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
}

// Conn is a UDP socket for RoCEv2 over IPv4 driven through io_uring. It
// implements packetio.Conn.
type Conn struct {
	r         *ring
	sock      int
	probe     int      // an unbound UDP socket in the socket's namespace: Close binds it to tell the port is free
	efd       int      // eventfd that Wake writes and a READ in the ring waits on
	efile     *os.File // efd, for Wake and Close: its writes are safe against a concurrent Close
	local     netip.AddrPort
	dstPort   [2]byte
	maxPacket int
	batch     int
	features  Features

	mu sync.Mutex // held by Receive and Transmit; Close takes it to free the rings

	// Receive side. rxMem holds nSlots slots of slotSize bytes, then the
	// eventfd's 8-byte read buffer; kernel-written memory is kept out of
	// the Go heap.
	rxMem      []byte
	slotSize   int
	nSlots     int
	bufs       *bufRing // multishot: the slots, lent to the kernel
	msHdr      unix.Msghdr
	msArmed    bool          // a multishot RECVMSG is outstanding
	msWorked   bool          // a multishot RECVMSG has delivered a datagram
	ssHdrs     []unix.Msghdr // single-shot: one per slot
	ssIovs     []unix.Iovec
	rearm      []uint16 // single-shot: slots to arm again
	ssArmed    int      // single-shot: RECVMSGs outstanding, at most a batch (each datagram wakes every one)
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

	// Send side.
	tx      []packetio.Packet
	txMem   []byte
	txHdrs  []unix.Msghdr
	txIovs  []unix.Iovec
	txNames []udpsock.SockaddrInet4
	txIdx   []int   // txHdrs index -> index in Transmit's pkts
	txRes   []int32 // completion result per txHdrs index
	txDone  []bool
	retry   []int // txHdrs indexes to send again (asynchronous error)
	lent    int
	gen     uint32

	one    [8]byte // the eventfd increment Wake writes
	waking atomic.Bool
	parked atomic.Bool
	closed atomic.Bool
	ctr    packetio.Counters
	nops   int // NOP completions seen (ring tests)
}

var _ packetio.Conn = (*Conn)(nil)

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
	local = local.Unmap()
	if !local.Is4() {
		return nil, fmt.Errorf("packetio/uring: listen on %v: only IPv4 is implemented: %w", local, packetio.ErrNotSupported)
	}
	if o.Port < 0 {
		o.Port = 0
	}
	if o.Port > 0xFFFF || o.DstPort < 0 || o.DstPort > 0xFFFF {
		return nil, fmt.Errorf("packetio/uring: listen: port %d or destination port %d out of range", o.Port, o.DstPort)
	}
	c := &Conn{sock: -1, probe: -1, efd: -1, maxPacket: o.MaxPacket, batch: o.Batch, nSlots: o.RxBuffers}
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
	sqEntries := pow2(max(o.Batch, 8) + 8)
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

	fd, port, err := udpsock.Open("packetio/uring", local, udpsock.Config{
		Port: o.Port, RecvBuffer: o.RecvBuffer, SendBuffer: o.SendBuffer, TOS: o.TOS,
		// Blocking: io_uring tries each operation without waiting and
		// arms a poll when it would block; on an O_NONBLOCK socket some
		// kernels return EAGAIN instead.
		NonBlock: false,
	})
	if err != nil {
		return err
	}
	c.sock = fd
	if c.probe, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP); err != nil {
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
	return nil
}

func (c *Conn) initRx(dis disable) error {
	c.slotSize = (slotPayload + c.maxPacket + 63) &^ 63
	size := c.nSlots*c.slotSize + 64
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("packetio/uring: mmap receive buffers: %w", err)
	}
	c.rxMem = mem
	c.rx = make([]packetio.Packet, c.batch)
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
		c.msHdr.Namelen = uint32(udpsock.SizeofSockaddrInet4)
		c.msHdr.SetControllen(udpsock.ControlSpace)
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
		c.ssIovs[i].SetLen(c.maxPacket)
		h := &c.ssHdrs[i]
		h.Name = &c.rxMem[base+slotName]
		h.Iov = &c.ssIovs[i]
		h.SetIovlen(1)
		h.Control = &c.rxMem[base+slotControl]
		c.rearm = append(c.rearm, uint16(i))
	}
}

func (c *Conn) initTx() {
	b := c.batch
	c.tx = make([]packetio.Packet, b)
	c.txMem = make([]byte, b*c.maxPacket)
	c.txHdrs = make([]unix.Msghdr, b)
	c.txIovs = make([]unix.Iovec, b)
	c.txNames = make([]udpsock.SockaddrInet4, b)
	c.txIdx = make([]int, b)
	c.txRes = make([]int32, b)
	c.txDone = make([]bool, b)
	c.retry = make([]int, 0, b)
	for i := range b {
		c.txNames[i] = udpsock.SockaddrInet4{Family: unix.AF_INET, Port: c.dstPort}
		h := &c.txHdrs[i]
		h.Name = (*byte)(unsafe.Pointer(&c.txNames[i]))
		h.Namelen = uint32(udpsock.SizeofSockaddrInet4)
		h.Iov = &c.txIovs[i]
		h.SetIovlen(1)
	}
}

// Features returns the io_uring features the Conn uses.
func (c *Conn) Features() Features { return c.features }

// Receive implements packetio.Conn. It returns the completions already in
// the ring without a system call; otherwise it waits in io_uring_enter
// until a completion arrives, the deadline passes (a timeout in
// IORING_ENTER_EXT_ARG) or Wake writes the eventfd whose READ is kept
// outstanding in the ring.
func (c *Conn) Receive(deadline time.Time) ([]packetio.Packet, error) {
	if c.closed.Load() {
		return nil, packetio.ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, packetio.ErrClosed
	}
	c.recycle()
	poll := !deadline.IsZero() && !time.Now().Before(deadline)
	entered := false
	for {
		pkts, err := c.harvest()
		if err != nil {
			return nil, err
		}
		if len(pkts) > 0 {
			if c.waking.Swap(false) {
				c.ctr.Wakes.Add(1)
			}
			return pkts, c.flush()
		}
		if c.waking.Swap(false) {
			c.ctr.Wakes.Add(1)
			return c.rx[:0], c.flush()
		}
		if c.closed.Load() {
			return nil, packetio.ErrClosed
		}
		if err := c.arm(); err != nil {
			return nil, err
		}
		wait, arg := uint32(1), (*getEventsArg)(nil)
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if poll || d <= 0 {
				if entered {
					return c.rx[:0], c.flush()
				}
				// Once without waiting: submit the arms, run task work.
				wait = 0
			} else {
				c.ts = unix.NsecToTimespec(int64(d))
				arg = &c.arg
			}
		}
		// Wake sets waking, then writes the eventfd if parked; this side
		// sets parked, then looks at waking: one of the two sees the
		// other.
		c.parked.Store(true)
		if c.waking.Load() || c.closed.Load() {
			c.parked.Store(false)
			continue
		}
		_, errno := c.r.submit(wait, arg)
		c.parked.Store(false)
		entered = true
		switch errno {
		case 0, unix.ETIME, unix.EINTR, unix.EAGAIN, unix.EBUSY:
		case unix.EEXIST:
			return nil, ErrWrongThread
		default:
			return nil, c.opErr("io_uring_enter", errno)
		}
	}
}

// flush submits SQEs queued by arm without waiting.
func (c *Conn) flush() error {
	if c.r.sq.tail == c.r.sq.published && c.r.sq.pendingKernel() == 0 {
		return nil
	}
	for {
		_, errno := c.r.submit(0, nil)
		switch errno {
		case 0:
			return nil
		case unix.EINTR, unix.EAGAIN, unix.EBUSY:
			continue
		case unix.EEXIST:
			return ErrWrongThread
		default:
			return c.opErr("io_uring_enter", errno)
		}
	}
}

// recycle gives the slots of the last Receive back to the kernel.
func (c *Conn) recycle() {
	if c.singleshot {
		c.rearm = append(c.rearm, c.rxSlots...)
	} else {
		for _, s := range c.rxSlots {
			c.giveSlot(s)
		}
		c.bufs.publish()
	}
	c.rxSlots = c.rxSlots[:0]
}

// giveSlot queues slot s back into the provided-buffer ring (publish
// follows).
func (c *Conn) giveSlot(s uint16) {
	c.bufs.add(unsafe.Pointer(&c.rxMem[int(s)*c.slotSize]), uint32(c.slotSize), s)
}

// arm queues what must be outstanding while waiting: the multishot RECVMSG
// (or a single-shot RECVMSG per free slot) and the eventfd READ.
func (c *Conn) arm() error {
	if !c.wakeArmed {
		s := c.r.sq.get()
		if s == nil {
			if err := c.flush(); err != nil {
				return err
			}
			if s = c.r.sq.get(); s == nil {
				return nil // the kernel holds every SQE; try again later
			}
		}
		prepRead(s, c.efd, c.rxMem[c.nSlots*c.slotSize:][:8], userData(kindWake, 0, 0))
		c.wakeArmed = true
		c.inflight++
	}
	if c.singleshot {
		for len(c.rearm) > 0 && c.ssArmed < c.batch {
			s := c.r.sq.get()
			if s == nil {
				if err := c.flush(); err != nil {
					return err
				}
				if s = c.r.sq.get(); s == nil {
					return nil
				}
			}
			slot := c.rearm[len(c.rearm)-1]
			c.rearm = c.rearm[:len(c.rearm)-1]
			h := &c.ssHdrs[slot]
			h.Namelen = uint32(udpsock.SizeofSockaddrInet4)
			h.SetControllen(udpsock.ControlSpace)
			h.Flags = 0
			prepRecvmsg(s, c.sock, h, userData(kindRecv, 0, uint32(slot)))
			c.inflight++
			c.ssArmed++
		}
		return nil
	}
	if !c.msArmed {
		s := c.r.sq.get()
		if s == nil {
			if err := c.flush(); err != nil {
				return err
			}
			if s = c.r.sq.get(); s == nil {
				return nil
			}
		}
		prepRecvmsgMultishot(s, c.sock, &c.msHdr, bgid, userData(kindRecv, 0, 0))
		c.msArmed = true
		c.inflight++
	}
	return nil
}

// nextCQE returns the next completion: first those Transmit set aside,
// then the ring's.
func (c *Conn) nextCQE() (cqe, bool) {
	if c.pendLen > 0 {
		e := c.pend[c.pendHead]
		c.pendHead = (c.pendHead + 1) & (len(c.pend) - 1)
		c.pendLen--
		return e, true
	}
	return c.r.cq.next()
}

// setAside keeps a completion that is not Transmit's for Receive.
func (c *Conn) setAside(e cqe) error {
	if c.pendLen == len(c.pend) {
		return errors.New("packetio/uring: more receive completions outstanding than receive buffers")
	}
	c.pend[(c.pendHead+c.pendLen)&(len(c.pend)-1)] = e
	c.pendLen++
	return nil
}

// harvest turns completions into packets, up to a batch.
func (c *Conn) harvest() ([]packetio.Packet, error) {
	k := 0
	var bytes, drops uint64
	var err error
	for k < c.batch {
		e, ok := c.nextCQE()
		if !ok {
			break
		}
		switch udKind(e.userData) {
		case kindWake:
			c.wakeArmed = false
			c.inflight--
		case kindNop:
			c.nops++
		case kindRecv:
			var ok, drop bool
			if ok, drop, err = c.recvCompletion(e, &c.rx[k]); err != nil {
				break
			}
			if drop {
				drops++
			}
			if ok {
				bytes += uint64(len(c.rx[k].Buf))
				k++
			}
		}
		if err != nil {
			break
		}
	}
	c.r.cq.release()
	if !c.singleshot {
		c.bufs.publish() // slots of dropped packets
	}
	if drops > 0 {
		c.ctr.RxDrops.Add(drops)
	}
	c.ctr.Received(k, bytes)
	return c.rx[:k], err
}

// recvCompletion reads one receive completion into p; ok when p is a
// packet, drop when a datagram was dropped.
func (c *Conn) recvCompletion(e cqe, p *packetio.Packet) (ok, drop bool, err error) {
	var slot int
	if c.singleshot {
		slot = int(udIdx(e.userData))
		if slot >= c.nSlots || udGen(e.userData) != 0 {
			return false, false, nil
		}
		c.inflight--
		c.ssArmed--
	} else {
		if e.flags&cqeFMore == 0 {
			c.msArmed = false
			c.inflight--
		}
		if e.flags&cqeFBuffer == 0 {
			slot = -1
		} else {
			slot = int(e.flags >> 16)
		}
		if slot >= c.nSlots {
			return false, false, fmt.Errorf("packetio/uring: receive completion names buffer %d of %d", slot, c.nSlots)
		}
	}
	if e.res < 0 {
		errno := unix.Errno(-e.res)
		if slot >= 0 {
			c.release(slot)
		}
		switch {
		case errno == unix.ENOBUFS || errno == unix.ECANCELED || errno == unix.EINTR || errno == unix.EAGAIN:
			return false, false, nil // arm again
		case errno == unix.EINVAL && !c.singleshot && !c.msWorked:
			c.toSingleshot() // the kernel has no multishot RECVMSG
			return false, false, nil
		case asyncErrno(errno):
			c.ctr.AsyncErrors.Add(1)
			return false, false, nil
		default:
			return false, false, c.opErr("recvmsg", errno)
		}
	}
	if slot < 0 {
		return false, false, nil
	}
	base := slot * c.slotSize
	var n, controllen int
	var truncated bool
	var name *udpsock.SockaddrInet4
	if c.singleshot {
		h := &c.ssHdrs[slot]
		n = int(e.res)
		controllen = int(h.Controllen)
		truncated = h.Flags&unix.MSG_TRUNC != 0
		if h.Namelen < uint32(udpsock.SizeofSockaddrInet4) {
			truncated = true
		}
	} else {
		c.msWorked = true
		out := (*recvmsgOut)(unsafe.Pointer(&c.rxMem[base]))
		n = int(out.payloadlen)
		controllen = int(min(out.controllen, udpsock.ControlSpace))
		truncated = out.flags&unix.MSG_TRUNC != 0 || int(e.res) < slotPayload ||
			n > int(e.res)-slotPayload || out.namelen < uint32(udpsock.SizeofSockaddrInet4)
	}
	name = (*udpsock.SockaddrInet4)(unsafe.Pointer(&c.rxMem[base+slotName]))
	if truncated || n > c.maxPacket || name.Family != unix.AF_INET {
		c.release(slot)
		return false, true, nil
	}
	off := base + slotPayload
	p.Buf = c.rxMem[off : off+n : off+n]
	p.Addr = netip.AddrFrom4(name.Addr)
	p.Port = uint16(name.Port[0])<<8 | uint16(name.Port[1])
	p.Local = c.local.Addr()
	dst, hasDst, tos := udpsock.ParseControl(c.rxMem[base+slotControl : base+slotControl+controllen])
	if hasDst {
		p.Local = netip.AddrFrom4(dst)
	}
	p.TOS = tos
	c.rxSlots = append(c.rxSlots, uint16(slot))
	return true, false, nil
}

// release gives a slot back at once (a failed or dropped receive).
func (c *Conn) release(slot int) {
	if c.singleshot {
		c.rearm = append(c.rearm, uint16(slot))
	} else {
		c.giveSlot(uint16(slot))
	}
}

// asyncErrno tells errors that report an earlier datagram's fate (ICMP),
// not the current call's.
func asyncErrno(e unix.Errno) bool {
	switch e {
	case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN, unix.ENETDOWN, unix.EPROTO:
		return true
	}
	return false
}

// TxBatch implements packetio.Conn.
func (c *Conn) TxBatch(n int) []packetio.Packet {
	if c.closed.Load() || n <= 0 {
		c.lent = 0
		return nil
	}
	tx := packetio.Lend(c.tx, c.txMem, c.maxPacket, n)
	c.lent = len(tx)
	return tx
}

// Transmit implements packetio.Conn. It queues one SENDMSG per packet and
// submits them with one io_uring_enter, which also waits for their
// completions; a packet the kernel refuses (EMSGSIZE, ...) is counted and
// reported and the others are sent. A packet that met an asynchronous error
// (an ICMP error of an earlier datagram, reported on this send) is counted
// in AsyncErrors and sent once more. Every packet leaves from the socket's
// port; Packet.Port is ignored.
func (c *Conn) Transmit(pkts []packetio.Packet) (int, error) {
	if c.closed.Load() {
		return 0, packetio.ErrClosed
	}
	if len(pkts) > c.lent {
		return 0, packetio.ErrNotLent
	}
	c.lent = 0
	if len(pkts) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return 0, packetio.ErrClosed
	}
	var fail packetio.TxFailures
	m := 0
	for i := range pkts {
		p := &pkts[i]
		a := p.Addr.Unmap()
		switch {
		case !a.Is4() || a.IsUnspecified():
			fail.Add(i, packetio.ErrAddress)
			continue
		case len(p.Buf) > c.maxPacket:
			fail.Add(i, packetio.ErrTooLarge)
			continue
		}
		c.txNames[m].Addr = a.As4()
		c.txIovs[m].Base = unsafe.SliceData(p.Buf)
		c.txIovs[m].SetLen(len(p.Buf))
		c.txIdx[m] = i
		m++
	}
	var sent int
	var bytes uint64
	c.retry = c.retry[:0]
	for j := range m {
		c.retry = append(c.retry, j)
	}
	for round := 0; round < 2 && len(c.retry) > 0; round++ {
		if err := c.send(c.retry); err != nil {
			for _, j := range c.retry {
				if !c.txDone[j] {
					fail.Add(c.txIdx[j], err)
				}
			}
			break
		}
		c.ctr.TxBatches.Add(1)
		again := c.retry[:0]
		for _, j := range c.retry {
			res := c.txRes[j]
			switch {
			case res >= 0:
				sent++
				bytes += uint64(len(pkts[c.txIdx[j]].Buf))
			case round == 0 && asyncErrno(unix.Errno(-res)):
				c.ctr.AsyncErrors.Add(1)
				again = append(again, j)
			default:
				fail.Add(c.txIdx[j], unix.Errno(-res))
			}
		}
		c.retry = again
	}
	for i := range m {
		c.txIovs[i].Base = nil // do not keep the caller's buffers alive
	}
	if sent > 0 {
		c.ctr.PacketsOut.Add(uint64(sent))
		c.ctr.BytesOut.Add(bytes)
	}
	if fail.Len() > 0 {
		c.ctr.TxErrors.Add(uint64(fail.Len()))
		return sent, fail.Err(pkts)
	}
	return sent, nil
}

// send submits a SENDMSG for each txHdrs index in idx and waits for their
// completions, setting txRes; completions of receives met on the way are
// set aside for Receive.
func (c *Conn) send(idx []int) error {
	c.gen++
	gen := c.gen & 0xFFFFFF
	for _, j := range idx {
		c.txDone[j] = false
		s := c.r.sq.get()
		if s == nil {
			// The SQ holds at least a batch; receive arms may fill it.
			if err := c.flush(); err != nil {
				return err
			}
			if s = c.r.sq.get(); s == nil {
				return errors.New("packetio/uring: submission queue full")
			}
		}
		prepSendmsg(s, c.sock, &c.txHdrs[j], userData(kindSend, gen, uint32(j)))
	}
	todo := len(idx)
	for todo > 0 {
		_, errno := c.r.submit(uint32(todo), nil)
		switch errno {
		case 0, unix.EINTR, unix.EAGAIN, unix.EBUSY:
		case unix.EEXIST:
			return ErrWrongThread
		default:
			return c.opErr("io_uring_enter", errno)
		}
		for {
			e, ok := c.r.cq.next()
			if !ok {
				break
			}
			if udKind(e.userData) != kindSend {
				if err := c.setAside(e); err != nil {
					return err
				}
				continue
			}
			j := int(udIdx(e.userData))
			if udGen(e.userData) != gen || j >= len(c.txRes) || c.txDone[j] {
				continue // left over from an aborted Transmit
			}
			c.txRes[j], c.txDone[j] = e.res, true
			todo--
		}
		c.r.cq.release()
	}
	return nil
}

// Wake implements packetio.Conn. When a Receive is waiting it writes the
// eventfd whose READ the ring keeps outstanding; otherwise it only sets a
// flag.
func (c *Conn) Wake() {
	if c.waking.Swap(true) {
		return // already pending
	}
	if c.parked.Load() && !c.closed.Load() {
		c.efile.Write(c.one[:])
	}
}

// LocalAddr implements packetio.Conn.
func (c *Conn) LocalAddr() netip.Addr { return c.local.Addr() }

// LocalAddrPort returns the local address and UDP port.
func (c *Conn) LocalAddrPort() netip.AddrPort { return c.local }

// MaxPacket implements packetio.Conn.
func (c *Conn) MaxPacket() int { return c.maxPacket }

// Stats implements packetio.Conn.
func (c *Conn) Stats() packetio.Stats { return c.ctr.Stats() }

// Close implements packetio.Conn. It wakes a blocked Receive, waits for it
// to return, cancels the ring's outstanding requests, and frees the ring,
// the socket and the buffers.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return packetio.ErrClosed
	}
	c.efile.Write(c.one[:])
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
	sa := &unix.SockaddrInet4{Port: int(c.local.Port()), Addr: c.local.Addr().As4()}
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
