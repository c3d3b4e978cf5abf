package uring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/udpsock"
)

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
	if c.mc.Ready() { // datagrams of a multicast group first
		if pk := c.mc.Take(); len(pk) > 0 {
			return pk, c.flush()
		}
	}
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
		if wait == 1 && c.praw != nil && runtime.GOMAXPROCS(0) == 1 {
			entered = true
			err = c.waitInPoller(deadline)
		} else {
			var in bool
			in, err = c.waitInRing(wait, arg)
			entered = entered || in
		}
		if err != nil {
			return nil, err
		}
		// A Wake, a completion or the deadline: the loop tells which.
	}
}

// waitInPoller submits the arms and runs task work without waiting, then,
// with nothing completed, waits in Go's netpoller until a completion, a
// Wake or the deadline.
func (c *Conn) waitInPoller(deadline time.Time) error {
	if err := c.flush(); err != nil {
		return err
	}
	if c.r.cq.ready() > 0 || c.pendLen > 0 {
		return nil
	}
	// The deadline first: a Wake that sees pollParked then replaces it,
	// never the other way round.
	if err := c.setPollDeadline(deadline); err != nil {
		return c.opErr("poll", err)
	}
	c.parked.Store(true)
	c.pollParked.Store(true)
	if c.waking.Load() || c.closed.Load() {
		c.pollParked.Store(false)
		c.parked.Store(false)
		return nil
	}
	err := c.waitPoll()
	c.pollParked.Store(false)
	c.parked.Store(false)
	if err != nil {
		return c.opErr("poll", err)
	}
	return nil
}

// waitInRing submits the arms and waits in io_uring_enter (wait: for a
// completion; arg: until its timeout), unless a Wake or Close came first.
// It reports whether it entered the ring.
func (c *Conn) waitInRing(wait uint32, arg *getEventsArg) (entered bool, err error) {
	// Wake sets waking, then writes the eventfd if parked; this side sets
	// parked, then looks at waking: one of the two sees the other.
	c.parked.Store(true)
	if c.waking.Load() || c.closed.Load() {
		c.parked.Store(false)
		return false, nil
	}
	_, errno := c.r.submit(wait, arg)
	c.parked.Store(false)
	switch errno {
	case 0, unix.ETIME, unix.EINTR, unix.EAGAIN, unix.EBUSY:
		return true, nil
	case unix.EEXIST:
		return true, ErrWrongThread
	default:
		return true, c.opErr("io_uring_enter", errno)
	}
}

// waitPoll waits in Go's netpoller until the ring holds a completion (the
// ring's descriptor polls readable once one is posted) or the deadline
// setPollDeadline set (zero: none) passes.
// The goroutine parks; its OS thread goes on with others, where a wait in
// io_uring_enter would hold it. Receive waits so under one processor
// (GOMAXPROCS=1, as goroce bench runs each side): a wait in io_uring_enter
// there makes the runtime hand the processor to another thread and back
// for every wake-up (goroce bench write_bw between two namespaces, against
// waiting there: 2.0-2.2x the 64-byte messages, 1.6-1.75x at 4 KiB,
// 1.2-1.5x at 64 KiB; send_lat unchanged). With more processors it
// waits in io_uring_enter, on the thread that armed the receive, whose
// task work then runs at once; in the netpoller a receive armed by a
// thread busy elsewhere waits for that thread's next system call
// (COOP_TASKRUN does not interrupt a running thread; a sleeping one is
// woken), which took a 64-byte round trip between two soft devices
// (BenchmarkNetnsPaths) from about 100 to 250 µs.
//
// A Wake ends the wait by moving the deadline to the past (Conn.pollParked);
// after any deadline the next wait sets its own again.
func (c *Conn) waitPoll() error {
	err := c.praw.Read(c.pready)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.pdlSet = false // passed, or a Wake's
		return nil
	}
	return err
}

// setPollDeadline sets pfile's read deadline for waitPoll, unless it is set
// already.
func (c *Conn) setPollDeadline(deadline time.Time) error {
	if c.pdlSet && c.pdl.Equal(deadline) {
		return nil
	}
	if err := c.pfile.SetReadDeadline(deadline); err != nil {
		return err
	}
	c.pdl, c.pdlSet = deadline, true
	return nil
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
		return c.armChain()
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

// armChain queues the single-shot RECVMSGs, up to a batch of free slots, as
// one chain (IOSQE_IO_LINK), and only when the last chain has completed: a
// RECVMSG starts when the one before it completes, so one at a time reads
// the socket and their completions come in the datagrams' order.
//
// Several RECVMSGs outstanding side by side on the socket, as before, were
// not ordered: each datagram wakes every one of them (io_uring's internal
// poll for RECVMSG is not exclusive); one takes it, the others get EAGAIN
// and wait again, and a RECVMSG that keeps losing so is handed to an io-wq
// worker (io_arm_poll_handler refuses a request that spent its poll
// retries), which then waits in a blocking recvmsg and posts its completion
// itself, beside the task work that completes the others. Such a worker
// took datagram N, the task work N+1, and N+1's completion was posted
// first: Receive returned the datagrams out of order (TestStress's echoes
// under GOMAXPROCS=1, where waiting in the netpoller changed the timing
// enough for requests to lose 128 times).
func (c *Conn) armChain() error {
	if c.ssArmed > 0 || len(c.rearm) == 0 {
		return nil
	}
	n := min(len(c.rearm), c.batch)
	if int(c.r.sq.space()) < n {
		if err := c.flush(); err != nil {
			return err
		}
		if n = min(n, int(c.r.sq.space())); n == 0 {
			return nil // the kernel holds every SQE; try again later
		}
	}
	var prev *sqe
	for range n {
		s := c.r.sq.get()
		slot := c.rearm[len(c.rearm)-1]
		c.rearm = c.rearm[:len(c.rearm)-1]
		h := &c.ssHdrs[slot]
		h.Namelen = uint32(udpsock.SockaddrRoom)
		h.SetControllen(controlSpace)
		h.Flags = 0
		prepRecvmsg(s, c.sock, h, userData(kindRecv, 0, uint32(slot)))
		if prev != nil {
			prev.flags |= sqeIOLink
		}
		prev = s
		c.inflight++
		c.ssArmed++
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

// harvest turns completions into packets, up to a batch of receive
// buffers (with GRO each may hold a train of up to 64 packets).
func (c *Conn) harvest() ([]packetio.Packet, error) {
	k := 0
	var bytes, drops uint64
	var err error
	for bufs := 0; bufs < c.batch; {
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
			var made int
			var drop uint64
			if made, drop, err = c.recvCompletion(e, k); err != nil {
				break
			}
			drops += drop
			for _, p := range c.rx[k : k+made] {
				bytes += uint64(len(p.Buf))
			}
			k += made
			if made > 0 {
				bufs++ // c.rx has room for a batch of trains
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
	c.ctr.NoteKernelRxDrops32(c.rxKDrops)
	c.ctr.Received(k, bytes)
	return c.rx[:k], err
}

// recvCompletion reads one receive completion into packets c.rx[k:]: one,
// or the segments of a GRO train. It returns how many packets it made and
// how many datagrams it dropped.
func (c *Conn) recvCompletion(e cqe, k int) (made int, drops uint64, err error) {
	slot, err := c.recvSlot(e)
	if err != nil || slot == noSlot {
		return 0, 0, err
	}
	if e.res < 0 {
		if slot >= 0 {
			c.release(slot)
		}
		return 0, 0, c.recvFailed(unix.Errno(-e.res))
	}
	if slot < 0 {
		return 0, 0, nil
	}
	base := slot * c.slotSize
	n, got, controllen, truncated, bad := c.recvLengths(e, slot)
	name := (*udpsock.Sockaddr)(unsafe.Pointer(&c.rxMem[base+slotName]))
	from, ok := name.IP()
	if bad || !ok {
		c.release(slot)
		return 0, 1, nil
	}
	cm := udpsock.ParseControl(c.rxMem[base+slotControl : base+slotControl+controllen])
	if cm.Drops != 0 {
		c.rxKDrops = cm.Drops
	}
	seg := cm.GROSize
	if seg <= 0 || seg >= n {
		// One datagram.
		if truncated || n > c.maxPacket {
			c.release(slot)
			return 0, 1, nil
		}
		seg = max(n, 1)
	}
	p := &c.rx[k]
	p.Addr = from
	p.Port = uint16(name.Port[0])<<8 | uint16(name.Port[1])
	p.Local = c.local.Addr()
	if cm.HasDst {
		p.Local = cm.Dst
	}
	p.TOS, p.RxTime, p.GROSeg = cm.TOS, cm.RxTime, 0
	off := base + slotPayload
	if truncated && n <= got {
		// Cut, its length unknown: at least one byte more was lost,
		// so that a cut last segment is not taken for a short one.
		n = got + 1
	}
	made, drops = udpsock.SplitGRO(c.rx[k:], c.rxMem[off:off+got:off+got], seg, n, c.maxPacket, c.off.GROIDs, &c.ctr)
	if made == 0 {
		c.release(slot)
		return 0, drops, nil
	}
	c.rxSlots = append(c.rxSlots, uint16(slot))
	return made, drops, nil
}

// noSlot is recvSlot's answer for a completion that is not a receive's
// (a stale single-shot one).
const noSlot = -2

// recvSlot accounts for the receive completion e (the receives still
// armed) and returns the buffer slot it filled: -1 when it names none (a
// multishot error), noSlot when it is no receive of this ring's, or an
// error when it names a slot that does not exist.
func (c *Conn) recvSlot(e cqe) (int, error) {
	if c.singleshot {
		slot := int(udIdx(e.userData))
		if slot >= c.nSlots || udGen(e.userData) != 0 {
			return noSlot, nil
		}
		c.inflight--
		c.ssArmed--
		return slot, nil
	}
	if e.flags&cqeFMore == 0 {
		c.msArmed = false
		c.inflight--
	}
	if e.flags&cqeFBuffer == 0 {
		return -1, nil
	}
	slot := int(e.flags >> 16)
	if slot >= c.nSlots {
		return 0, fmt.Errorf("packetio/uring: receive completion names buffer %d of %d", slot, c.nSlots)
	}
	return slot, nil
}

// recvFailed says what a receive that failed with errno means: nil when
// the receive is only to be armed again (no buffer, cancelled,
// interrupted; an ICMP error the socket reported, counted; multishot
// RECVMSG refused, which turns the Conn to single-shot receives), else the
// error.
func (c *Conn) recvFailed(errno unix.Errno) error {
	switch {
	case errno == unix.ENOBUFS || errno == unix.ECANCELED || errno == unix.EINTR || errno == unix.EAGAIN:
		return nil // arm again
	case errno == unix.EINVAL && !c.singleshot && !c.msWorked:
		c.toSingleshot() // the kernel has no multishot RECVMSG
		return nil
	case udpsock.AsyncErrno(errno):
		c.ctr.AsyncErrors.Add(1)
		return nil
	default:
		return c.opErr("recvmsg", errno)
	}
}

// recvLengths reads what the receive completion e left in slot: n the
// datagram's (or train's) length, got the bytes of it in the slot (fewer
// when the kernel cut it, MSG_TRUNC), the control messages' length, and
// whether it was cut or is malformed (no IPv4 source address).
func (c *Conn) recvLengths(e cqe, slot int) (n, got, controllen int, truncated, bad bool) {
	if c.singleshot {
		h := &c.ssHdrs[slot]
		n = int(e.res) // the whole length: the RECVMSG asks for MSG_TRUNC
		got = min(n, c.rxRoom)
		controllen = int(h.Controllen)
		truncated = h.Flags&unix.MSG_TRUNC != 0 || n > got
		bad = h.Namelen < uint32(udpsock.SizeofSockaddrInet4)
		return
	}
	c.msWorked = true
	out := (*recvmsgOut)(unsafe.Pointer(&c.rxMem[slot*c.slotSize]))
	n = int(out.payloadlen)
	got = max(min(n, int(e.res)-slotPayload), 0)
	controllen = int(min(out.controllen, controlSpace))
	truncated = out.flags&unix.MSG_TRUNC != 0 || n > got
	bad = int(e.res) < slotPayload || out.namelen < uint32(udpsock.SizeofSockaddrInet4)
	return
}

// release gives a slot back at once (a failed or dropped receive).
func (c *Conn) release(slot int) {
	if c.singleshot {
		c.rearm = append(c.rearm, uint16(slot))
	} else {
		c.giveSlot(uint16(slot))
	}
}

// Wake implements packetio.Conn. When a Receive is waiting it writes the
// eventfd whose READ the ring keeps outstanding; otherwise it only sets a
// flag.
func (c *Conn) Wake() {
	if c.waking.Swap(true) {
		return // already pending
	}
	if c.parked.Load() && !c.closed.Load() {
		if c.pollParked.Load() {
			c.pfile.SetReadDeadline(time.Unix(1, 0)) // passed: ends waitPoll at once
			return
		}
		c.efile.Write(c.one[:])
	}
}
