package udp

import (
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/mcast"
	"github.com/goroce/goroce/packetio/internal/pollwait"
	"github.com/goroce/goroce/packetio/internal/udpsock"
	"github.com/goroce/goroce/wire"
)

// Conn is a UDP socket for RoCEv2 over IPv4 or IPv6. It implements
// packetio.Conn.
type Conn struct {
	f         *os.File        // the socket, non-blocking and outside Go's netpoller
	raw       syscall.RawConn // f's: its calls hold the socket open, no more
	local     netip.AddrPort
	v6        bool    // an IPv6 socket
	tos       uint8   // the socket's TOS (IPv6: traffic class)
	noECN     bool    // Options.NoECN: packets' own TOS (Packet.TOS) not-ECT too
	dstPort   [2]byte // network byte order
	maxPacket int

	// Receive side: one goroutine at a time, perhaps while another uses
	// the send side (FullDuplex). rxHdrs[i] points at rxNames[i],
	// rxIovs[i] (a MaxPacket slice of rxMem) and a controlSpace slice of
	// rxControl, for good.
	rx        []packetio.Packet
	rxMem     []byte
	rxHdrs    []mmsghdr
	rxIovs    []unix.Iovec
	rxNames   []udpsock.Sockaddr
	rxControl []byte
	rxBuf     int                   // bytes per receive buffer: MaxPacket, or udpsock.GROBuffer with GRO
	recvFn    func(fd uintptr) bool // c.recv, bound once so that Receive does not allocate a closure
	waitFn    func(fd uintptr) bool // c.recvWait, bound once
	rxN       int                   // recv's results
	rxErrno   unix.Errno
	rxAgain   bool  // recv found nothing (EAGAIN)
	rxErr     error // recvWait's error from the socket's RawConn
	// Receive waits in the netpoller on rxEp, an epoll instance that the
	// socket joins only for a wait (see pollwait.Epoll); Wake ends the
	// wait.
	rxEp *pollwait.Epoll
	wait pollwait.Waiter

	// Send side: one goroutine at a time, perhaps while another uses the
	// receive side (FullDuplex): it shares no memory with it but the
	// atomic counters, and the socket's send and receive calls take
	// separate locks of its file (RawConn.Write and Read), and wait on
	// separate epoll instances (rxEp, txEp). Transmit puts the packets in
	// socket-group order: packet k (txIdx[k] in Transmit's pkts) has the
	// iovecs txIovs[txIov0[k]:txIov0[k+1]] (its Buf, or the pieces of its
	// Buf around its Ext) and txLen[k] bytes in all, txAddr[k]
	// is its destination. txm holds the sendmmsg entries (txm.hdrs[m] points
	// at txNames[m], and at txCtl's m-th UDP_SEGMENT cmsg for a GSO
	// message), txFb those of a refused GSO message sent per datagram.
	txl     packetio.TxLender
	txm     txMsgs
	txFb    txMsgs
	txIovs  []unix.Iovec
	txAddr  []udpsock.Dest
	txNames []udpsock.Sockaddr
	txCtl   []byte
	txIdx   []int                 // packet k -> index in Transmit's pkts
	txIov0  []int                 // packet k -> its first iovec
	txLen   []int                 // packet k -> its datagram's length
	txIovN  int                   // iovecs in use
	sendFn  func(fd uintptr) bool // c.send, bound once
	txSend  []mmsghdr             // send's argument
	txN     int                   // send's results
	txErrno unix.Errno
	// A send that finds a socket's buffer full (EAGAIN) waits on txEp,
	// which that socket joins for the wait (waitWritable).
	txEp     *pollwait.Epoll
	txRaw    syscall.RawConn       // the socket waitWritable waits for
	txErr    error                 // sendWait's error from txRaw
	txWaitFn func(fd uintptr) bool // c.sendWait, bound once

	// Offloads (gso_linux.go): off.GSO() is read by Transmit; ids
	// rewrites the ICRCs of GSO segments.
	off udpsock.OffloadState
	ids wire.ICRCIDCache

	// Extra source ports (ports_linux.go). portsMu serialises the cache
	// between Transmit and Close; txGroupOf[i] is the group of packet i of
	// a Transmit (-1: not sent), groups the sockets it sends on, the main
	// socket's first.
	perPort   bool
	portsMu   sync.Mutex
	ports     portCache
	txGen     uint64
	txGroupOf []int
	txGroups  []txGroup

	closed atomic.Bool
	ctr    packetio.Counters

	mc mcast.Set // multicast groups joined (mcast_linux.go)
}

var (
	_ packetio.Conn          = (*Conn)(nil)
	_ packetio.RxDropCounter = (*Conn)(nil)
)

// Listen opens an unconnected UDP socket bound to local and opts.Port (4791
// by default); see the package documentation for its options. local must be
// an IPv4 address (or IPv4-mapped); it may be 0.0.0.0, in which case each
// received packet's Local tells the address it arrived on. IPv6 returns an
// error matching packetio.ErrNotSupported.
func Listen(local netip.Addr, opts Options) (*Conn, error) {
	o := opts.withDefaults()
	local, err := o.shared().Check("packetio/udp", local)
	if err != nil {
		return nil, err
	}
	// A blocking socket, made non-blocking once wrapped: os.NewFile leaves
	// it out of Go's netpoller (see the package documentation for why not
	// net.UDPConn, and pollwait.Epoll for where Receive waits instead).
	tos := packetio.SendTOS(o.TOS, o.NoECN)
	fd, port, err := udpsock.Open("packetio/udp", local, udpsock.Config{
		Port: o.Port, RecvBuffer: o.RecvBuffer, SendBuffer: o.SendBuffer, TOS: tos,
		Checksum: o.GSO != OffloadOff || local.Is6(),
	})
	if err != nil {
		return nil, err
	}
	if o.DstPort == 0 {
		o.DstPort = int(port)
	}
	name := "udp4:" + netip.AddrPortFrom(local, port).String()
	if local.Is6() {
		name = "udp6:" + netip.AddrPortFrom(local, port).String()
	}
	f := os.NewFile(uintptr(fd), name)
	raw, err := f.SyscallConn()
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("packetio/udp: listen: %w", err)
	}
	c := &Conn{
		f:         f,
		raw:       raw,
		local:     netip.AddrPortFrom(local, port),
		v6:        local.Is6(),
		tos:       tos,
		noECN:     o.NoECN,
		dstPort:   [2]byte{byte(o.DstPort >> 8), byte(o.DstPort)},
		maxPacket: o.MaxPacket,
	}
	if c.rxEp, err = pollwait.NewEpoll("packetio/udp: "+name, unix.EPOLLIN); err == nil {
		if c.txEp, err = pollwait.NewEpoll("packetio/udp: "+name, unix.EPOLLOUT); err != nil {
			c.rxEp.Close()
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := c.off.Probe("packetio/udp", fd, o.GSO, o.GRO); err != nil {
		c.closeFiles()
		return nil, err
	}
	c.initRx(o.Batch)
	tx := o.Batch
	if c.off.GSO() {
		// Room for several whole GSO messages: one sendmmsg entry then
		// carries as many packets as the kernel takes in one, also where a
		// run of equal packets crosses the messages of a stream.
		tx = max(tx, udpsock.GSOTxBatch)
	}
	c.initTx(tx)
	if o.SourcePorts > 0 {
		c.perPort = true
		c.ports.init(o.SourcePorts, fd, tos, c.off.GSO() || c.v6)
	}
	return c, nil
}

// txGroup is the packets of one Transmit that leave from one socket:
// txHdrs[start:start+n].
type txGroup struct {
	raw      syscall.RawConn
	start, n int
}

func (c *Conn) initRx(batch int) {
	mp, segs := c.maxPacket, 1
	if c.off.GRO {
		mp, segs = udpsock.GROBuffer, udpsock.GROMaxSegments
	}
	c.rxBuf = mp
	c.rx = make([]packetio.Packet, batch*segs)
	c.rxMem = make([]byte, batch*mp)
	packetio.Prefault(c.rxMem)
	c.rxHdrs = make([]mmsghdr, batch)
	c.rxIovs = make([]unix.Iovec, batch)
	c.rxNames = make([]udpsock.Sockaddr, batch)
	c.rxControl = make([]byte, batch*controlSpace)
	for i := range c.rxHdrs {
		udpsock.SetIov(&c.rxIovs[i], c.rxMem[i*mp:(i+1)*mp])
		h := &c.rxHdrs[i]
		h.setName(&c.rxNames[i])
		h.setIov(&c.rxIovs[i])
		h.setControl(c.rxControl[i*controlSpace : (i+1)*controlSpace])
	}
	c.recvFn, c.waitFn = c.recv, c.recvWait
	c.wait.Init(c.rxEp.File(), c.rxEp.Raw(), &c.closed, &c.ctr.Wakes)
}

func (c *Conn) initTx(batch int) {
	c.txl = packetio.NewTxLender(batch, c.maxPacket)
	c.txm = newTxMsgs(batch)
	c.txFb = newTxMsgs(wire.GSOMaxSegments)
	c.txIovs = make([]unix.Iovec, 3*batch) // a packet with an Ext takes 3
	c.txIov0 = make([]int, batch+1)
	c.txLen = make([]int, batch)
	c.txAddr = make([]udpsock.Dest, batch)
	c.txNames = make([]udpsock.Sockaddr, batch)
	c.txCtl = make([]byte, batch*txCtlSpace)
	c.txIdx = make([]int, batch)
	c.txGroupOf = make([]int, batch)
	c.txGroups = make([]txGroup, 0, batch+1)
	for i := range c.txm.hdrs {
		c.txNames[i] = udpsock.Sockaddr{Port: c.dstPort}
		c.txm.hdrs[i].setName(&c.txNames[i])
	}
	c.sendFn, c.txWaitFn = c.send, c.sendWait
}

// Receive implements packetio.Conn. It reads up to a batch with one
// recvmmsg; when there is nothing to read and deadline has not passed, it
// waits in Go's netpoller, on an epoll instance that the socket joins for
// the wait (the instance's read deadline is the given deadline), and reads
// then. A socket polled pollwait.IdlePolls times in a row without a wait,
// or whose polls took pollwait.IdleDatagrams datagrams, leaves the
// instance again (pollwait.Epoll).
func (c *Conn) Receive(deadline time.Time) ([]packetio.Packet, error) {
	if c.closed.Load() {
		return nil, packetio.ErrClosed
	}
	if c.mc.Ready() { // datagrams of a multicast group first
		if pk := c.mc.Take(); len(pk) > 0 {
			return pk, nil
		}
	}
	deadline = c.wait.Begin(deadline)
	for {
		c.rxReset()
		if c.wait.Stop() {
			// Only a poll (or a Wake is pending): one recvmmsg.
			if err := c.raw.Read(c.recvFn); err != nil {
				return nil, c.opErr("receive", err)
			}
			c.rxEp.Polled(c.rxN)
		} else {
			// The socket joins before the first read: a datagram queued
			// after that read wakes the wait.
			if err := c.rxEp.Join(c.raw); err != nil {
				return nil, c.opErr("receive", err)
			}
			ok, err := c.wait.Wait(deadline, c.waitFn)
			if err == nil {
				err = c.rxErr
			}
			if err != nil {
				return nil, c.opErr("receive", err)
			}
			if !ok {
				return c.rx[:0], nil
			}
		}
		if c.rxErrno != 0 {
			if udpsock.AsyncErrno(c.rxErrno) {
				c.ctr.AsyncErrors.Add(1)
				continue
			}
			return nil, c.opErr("recvmmsg", c.rxErrno)
		}
		c.wait.Consume()
		return c.collect(c.rxN), nil
	}
}

// rxReset readies the receive headers for a recvmmsg.
func (c *Conn) rxReset() {
	for i := range c.rxHdrs {
		h := &c.rxHdrs[i]
		h.hdr.Namelen = uint32(udpsock.SizeofSockaddr)
		h.hdr.SetControllen(controlSpace)
		h.hdr.Flags = 0
	}
	c.rxErr = nil
}

// recv is Receive's recvmmsg, through the socket's RawConn: it sets rxN,
// or rxErrno, or rxAgain when there is nothing to read, and returns true.
func (c *Conn) recv(fd uintptr) bool {
	c.rxN, c.rxErrno, c.rxAgain = 0, 0, false
	for {
		n, errno := recvmmsg(fd, c.rxHdrs)
		switch errno {
		case 0:
			c.rxN = n
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			c.rxAgain = true
		default:
			c.rxErrno = errno
		}
		return true
	}
}

// recvWait is the netpoller callback of Receive's wait (on rxEp): it reads
// the socket (recv) and reports true when Receive should stop waiting.
func (c *Conn) recvWait(uintptr) bool {
	if err := c.raw.Read(c.recvFn); err != nil {
		c.rxErr = err
		return true
	}
	return !c.rxAgain || c.wait.Stop()
}

// collect turns the first n received messages into packets, dropping
// truncated ones and splitting GRO buffers into their segments.
func (c *Conn) collect(n int) []packetio.Packet {
	k := 0
	var bytes, drops uint64
	var kdrops uint32 // the kernel's drop count, as the last datagram read carried it
	for i := range n {
		h := &c.rxHdrs[i]
		sa := &c.rxNames[i]
		from, ok := sa.IP()
		if h.hdr.Flags&unix.MSG_TRUNC != 0 || !ok {
			drops++
			continue
		}
		ln := int(h.len)
		off := i * c.rxBuf
		p := &c.rx[k]
		p.Addr = from
		p.Port = uint16(sa.Port[0])<<8 | uint16(sa.Port[1])
		p.Local = c.local.Addr()
		cm := udpsock.ParseControl(c.rxControl[i*controlSpace : i*controlSpace+int(h.hdr.Controllen)])
		if cm.HasDst {
			p.Local = cm.Dst
		}
		p.TOS, p.RxTime, p.GROSeg = cm.TOS, cm.RxTime, 0
		if cm.Drops != 0 {
			kdrops = cm.Drops
		}
		buf := c.rxMem[off : off+ln : off+ln]
		if cm.GROSize > 0 && cm.GROSize < ln {
			m, d := udpsock.SplitGRO(c.rx[k:], buf, cm.GROSize, ln, c.maxPacket, c.off.GROIDs, &c.ctr)
			k, drops = k+m, drops+d
			for _, q := range c.rx[k-m : k] {
				bytes += uint64(len(q.Buf))
			}
			continue
		}
		if ln > c.maxPacket {
			drops++
			continue
		}
		p.Buf = buf
		bytes += uint64(ln)
		k++
	}
	if drops > 0 {
		c.ctr.RxDrops.Add(drops)
	}
	c.ctr.NoteKernelRxDrops32(kdrops)
	c.ctr.Received(k, bytes)
	return c.rx[:k]
}

// dest returns the destination of p and the TOS and TTL it asks for, 0
// where those are the socket's own.
func (c *Conn) dest(p *packetio.Packet) udpsock.Dest {
	d := udpsock.Dest{Addr: p.Addr.As16(), TTL: p.HopLimit}
	if p.TOS != 0 {
		if t := packetio.PacketTOS(p.TOS, c.tos, c.noECN); t != c.tos {
			d.TOS = t
		}
	}
	return d
}

// TxBatch implements packetio.Conn.
func (c *Conn) TxBatch(n int) []packetio.Packet {
	return c.txl.Lend(c.closed.Load(), n)
}

// Transmit implements packetio.Conn. It sends with sendmmsg, as few calls as
// the kernel allows; a packet the kernel refuses (EMSGSIZE when it exceeds
// the path MTU, ...) is skipped, counted and reported, and the rest of the
// batch is sent. A pending asynchronous error (ICMP unreachable reported on
// this call) is counted in AsyncErrors and the packet retried once.
//
// A packet whose Port is neither 0 nor the socket's port leaves from an
// extra socket bound to that port (see PerPacketSourcePort); the packets of
// a batch are grouped by socket, in order within each, one sendmmsg per
// group as far as the kernel takes them.
func (c *Conn) Transmit(pkts []packetio.Packet) (int, error) {
	if err := c.txl.Take(c.closed.Load(), len(pkts)); err != nil {
		return 0, err
	}
	var fail packetio.TxFailures
	own := c.local.Port()
	c.txGen++
	groups := append(c.txGroups[:0], txGroup{raw: c.raw})
	locked := false
	var fallbacks, opened uint64
	for i := range pkts {
		p := &pkts[i]
		c.txGroupOf[i] = -1
		a, err := packetio.TxDestGather(p, c.maxPacket)
		if err == nil && a.Is4() == c.v6 {
			err = packetio.ErrAddress
		}
		if err != nil {
			fail.Add(i, err)
			continue
		}
		g := 0
		if port := p.Port; c.perPort && port != 0 && port != own {
			if !locked {
				c.portsMu.Lock()
				locked = true
			}
			e, op := c.ports.get(c, port, c.txGen)
			if op {
				opened++
			}
			if e == nil || e.f == nil {
				// Not bound (or no room left in this batch): from the
				// main socket's port, with the ICRC for it.
				if err := c.refit(p, a); err != nil {
					fail.Add(i, err)
					continue
				}
				fallbacks++
			} else {
				if e.gen != c.txGen {
					e.gen, e.group = c.txGen, len(groups)
					groups = append(groups, txGroup{raw: e.raw})
				}
				g = e.group
			}
		}
		c.txGroupOf[i] = g
		groups[g].n++
	}
	sent, bytes := c.sendGroups(groups, pkts, &fail)
	if locked {
		c.portsMu.Unlock()
	}
	c.txGroups = groups[:0]
	for i := range c.txIovs[:c.txIovN] {
		c.txIovs[i].Base = nil // do not keep the caller's buffers alive
	}
	c.txIovN = 0
	if fallbacks > 0 {
		c.ctr.SourcePortFallbacks.Add(fallbacks)
	}
	if opened > 0 {
		c.ctr.SourcePortSockets.Add(opened)
	}
	return c.ctr.Transmitted(sent, bytes, &fail, pkts)
}

// sendGroups puts the packets of pkts in socket-group order (c.txGroupOf:
// their groups, -1 for none), makes their sendmmsg entries and sends each
// group on its socket. It returns how many packets and bytes it sent.
func (c *Conn) sendGroups(groups []txGroup, pkts []packetio.Packet, fail *packetio.TxFailures) (sent int, bytes uint64) {
	placed := 0
	for g := range groups {
		groups[g].start, placed = placed, placed+groups[g].n
		groups[g].n = 0
	}
	for i := range pkts {
		if c.txGroupOf[i] < 0 {
			continue
		}
		g := &groups[c.txGroupOf[i]]
		k := g.start + g.n
		g.n++
		c.txAddr[k] = c.dest(&pkts[i])
		c.txIdx[k] = i
	}
	// The iovecs in packet order, so that those of a GSO message's
	// packets follow each other.
	v := 0
	for k := range placed {
		p := &pkts[c.txIdx[k]]
		c.txIov0[k] = v
		c.txLen[k] = len(p.Buf) + len(p.Ext)
		v += udpsock.PacketIovecs(c.txIovs[v:], p)
	}
	c.txIov0[placed], c.txIovN = v, v
	msgs := 0
	for g := range groups {
		if groups[g].n > 0 {
			m0 := msgs
			msgs = c.buildMsgs(m0, groups[g].start, groups[g].start+groups[g].n)
			s, b := c.sendMsgs(groups[g].raw, &c.txm, m0, msgs, pkts, fail)
			sent += s
			bytes += b
		}
	}
	return sent, bytes
}

// sendMsgs sends the entries ms.hdrs[off:end] on the socket of raw and
// returns how many packets and bytes it sent, recording the others in fail.
// A GSO message the kernel refuses is sent again one datagram per packet.
func (c *Conn) sendMsgs(raw syscall.RawConn, ms *txMsgs, off, end int, pkts []packetio.Packet, fail *packetio.TxFailures) (sent int, bytes uint64) {
	retried := -1
	var gsoMsgs, gsoSegs uint64
	for off < end {
		c.txSend = ms.hdrs[off:end]
		if err := c.sendOn(raw); err != nil {
			err = c.opErr("transmit", err)
			for m := off; m < end; m++ {
				c.failMsg(ms, m, err, fail)
			}
			break
		}
		if c.txErrno != 0 {
			switch {
			case udpsock.AsyncErrno(c.txErrno) && retried != off:
				c.ctr.AsyncErrors.Add(1)
				retried = off
				continue
			case ms.n[off] > 1 && udpsock.GSORefused(c.txErrno):
				s, b := c.gsoFallback(raw, off, c.txErrno, pkts, fail)
				sent += s
				bytes += b
			default:
				c.failMsg(ms, off, c.txErrno, fail)
			}
			off++
			continue
		}
		for m := off; m < off+c.txN; m++ {
			for k := ms.k[m]; k < ms.k[m]+ms.n[m]; k++ {
				bytes += uint64(c.txLen[k])
			}
			sent += ms.n[m]
			if ms.n[m] > 1 {
				gsoMsgs++
				gsoSegs += uint64(ms.n[m])
			}
		}
		off += c.txN
		c.ctr.TxBatches.Add(1)
	}
	if gsoMsgs > 0 {
		c.ctr.GSOMessages.Add(gsoMsgs)
		c.ctr.GSOSegments.Add(gsoSegs)
	}
	return sent, bytes
}

// failMsg records every packet of entry m of ms as not sent.
func (c *Conn) failMsg(ms *txMsgs, m int, err error, fail *packetio.TxFailures) {
	for k := ms.k[m]; k < ms.k[m]+ms.n[m]; k++ {
		fail.Add(c.txIdx[k], err)
	}
}

// Gathers implements packetio.Gatherer: a packet's Ext goes out as an
// iovec of its own between those of Buf's two pieces, in the GSO message
// of its run as any other packet of its length (the ICRC a GSO segment's
// Identification changes is the end of Buf).
func (c *Conn) Gathers() bool { return true }

// PerPacketSourcePort implements packetio.SourcePorts: it reports true
// unless Options.SourcePorts was negative. A packet whose Port is another
// than the socket's leaves from an extra socket bound to the Conn's address
// and that port; when the port cannot be bound (another socket holds it),
// from the socket's own port with its ICRC recomputed for that port, counted
// in Stats().SourcePortFallbacks.
func (c *Conn) PerPacketSourcePort() bool { return c.perPort }

// sendOn sends txSend on the socket of raw (send), waiting while its send
// buffer is full: it sets txN, or txErrno, and returns an error of the
// socket's RawConn or epoll instance (closed).
func (c *Conn) sendOn(raw syscall.RawConn) error {
	if err := raw.Write(c.sendFn); err != nil {
		return err
	}
	if c.txErrno == unix.EAGAIN {
		return c.waitWritable(raw)
	}
	return nil
}

// waitWritable waits in Go's netpoller, on txEp, which the socket of raw
// joins for the wait, until a send of txSend on it takes something or
// fails otherwise than with EAGAIN.
func (c *Conn) waitWritable(raw syscall.RawConn) error {
	c.ctr.TxWaits.Add(1)
	if err := c.txEp.Join(raw); err != nil {
		return err
	}
	c.txRaw, c.txErr = raw, nil
	err := c.txEp.Raw().Read(c.txWaitFn)
	if err == nil {
		err = c.txErr
	}
	if lerr := c.txEp.Leave(); err == nil {
		err = lerr
	}
	c.txRaw = nil
	return err
}

// sendWait is the netpoller callback of waitWritable: it sends (send) and
// reports true unless the socket's buffer is still full.
func (c *Conn) sendWait(uintptr) bool {
	if err := c.txRaw.Write(c.sendFn); err != nil {
		c.txErr = err
		return true
	}
	return c.txErrno != unix.EAGAIN
}

// send is Transmit's sendmmsg, through a socket's RawConn: it sets txN, or
// txErrno (EAGAIN when the socket's send buffer is full), and returns true.
func (c *Conn) send(fd uintptr) bool {
	c.txN, c.txErrno = 0, 0
	for {
		n, errno := sendmmsg(fd, c.txSend)
		switch errno {
		case 0:
			c.txN = n
		case unix.EINTR:
			continue
		default:
			c.txErrno = errno
		}
		return true
	}
}

// Wake implements packetio.Conn. When a Receive is waiting it sets a read
// deadline in the past, which the netpoller delivers at once; otherwise it
// only sets a flag.
func (c *Conn) Wake() {
	c.wait.Wake()
}

// FullDuplex implements packetio.FullDuplex: a Transmit may run while
// another goroutine's Receive runs or blocks.
func (c *Conn) FullDuplex() bool { return true }

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

// SocketBuffers returns the socket's receive and send buffer sizes as the
// kernel reports them (twice the requested size, for its bookkeeping).
func (c *Conn) SocketBuffers() (recv, send int, err error) {
	cerr := c.raw.Control(func(fd uintptr) {
		recv, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		if err == nil {
			send, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
		}
	})
	if cerr != nil {
		return 0, 0, c.opErr("socket buffers", cerr)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("packetio/udp: getsockopt: %w", err)
	}
	return recv, send, nil
}

// Close implements packetio.Conn. A Receive or Transmit waiting in the
// netpoller returns packetio.ErrClosed.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return packetio.ErrClosed
	}
	err := c.closeFiles()
	c.mc.Close()
	c.portsMu.Lock()
	c.ports.close()
	c.portsMu.Unlock()
	if err != nil {
		return fmt.Errorf("packetio/udp: close: %w", err)
	}
	return nil
}

// closeFiles closes the epoll instances, which ends the waits on them, and
// the socket (its descriptor once no call holds it).
func (c *Conn) closeFiles() error {
	c.rxEp.Close()
	c.txEp.Close()
	return c.f.Close()
}

// opErr turns an error from the file or poller into the package's: ErrClosed
// once Close was called.
func (c *Conn) opErr(op string, err error) error {
	if c.closed.Load() {
		return packetio.ErrClosed
	}
	return fmt.Errorf("packetio/udp: %s: %w", op, err)
}
