package uring

import (
	"errors"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/udpsock"
)

// TxBatch implements packetio.Conn.
func (c *Conn) TxBatch(n int) []packetio.Packet {
	return c.txl.Lend(c.closed.Load(), n)
}

// Transmit implements packetio.Conn. It queues one SENDMSG per packet, or
// with GSO one per run of packets (see the package documentation), and
// submits them with one io_uring_enter, which also waits for their
// completions; a packet the kernel refuses (EMSGSIZE, ...) is counted and
// reported and the others are sent. A GSO message the kernel refuses
// (EINVAL, EMSGSIZE, EIO) is sent again one datagram per packet, their
// ICRCs restored, and counted in GSOFallbacks. A send that met an
// asynchronous error (an ICMP error of an earlier datagram, reported on
// this send) is counted in AsyncErrors and made once more. Every packet
// leaves from the socket's port; Packet.Port is ignored. A packet in pieces
// (Packet.Ext) goes out as three iovecs of one datagram (Gatherer).
func (c *Conn) Transmit(pkts []packetio.Packet) (int, error) {
	if err := c.txl.Take(c.closed.Load(), len(pkts)); err != nil {
		return 0, err
	}
	if len(pkts) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return 0, packetio.ErrClosed
	}
	var fail packetio.TxFailures
	n, v := 0, 0
	for i := range pkts {
		p := &pkts[i]
		_, err := packetio.TxDestGather(p, c.maxPacket)
		if err == nil && !packetio.SameFamily(c.local.Addr(), p.Addr) {
			err = packetio.ErrAddress
		}
		if err != nil {
			fail.Add(i, err)
			continue
		}
		c.txIov0[n], c.txLen[n], c.txAddr[n], c.txIdx[n] = v, len(p.Buf)+len(p.Ext), c.dest(p), i
		n++
		v += udpsock.PacketIovecs(c.txIovs[v:], p)
	}
	c.txIov0[n] = v
	c.retry = c.retry[:0]
	for k, m := 0, 0; k < n; m++ {
		k += c.buildMsg(m, k, n)
		c.retry = append(c.retry, m)
		c.txTries[m] = 0
	}
	var sent int
	var bytes, gsoMsgs, gsoSegs uint64
	for len(c.retry) > 0 {
		if err := c.send(c.retry); err != nil {
			for _, j := range c.retry {
				if !c.txDone[j] {
					c.failEntry(j, err, &fail)
				}
			}
			break
		}
		c.ctr.TxBatches.Add(1)
		again := c.again[:0]
		for _, j := range c.retry {
			res := c.txRes[j]
			k, cnt := c.entry(j)
			switch errno := unix.Errno(-res); {
			case res >= 0:
				sent += cnt
				for q := k; q < k+cnt; q++ {
					bytes += uint64(c.txLen[q])
				}
				if cnt > 1 {
					gsoMsgs++
					gsoSegs += uint64(cnt)
				}
			case c.txTries[j] == 0 && udpsock.AsyncErrno(errno):
				c.ctr.AsyncErrors.Add(1)
				c.txTries[j]++
				again = append(again, j)
			case cnt > 1 && udpsock.GSORefused(errno):
				// Sent again one datagram each, in this loop's next
				// round.
				again = c.gsoFallback(j, errno, again)
			default:
				c.failEntry(j, errno, &fail)
			}
		}
		c.retry, c.again = again, c.retry
	}
	for k := range v {
		c.txIovs[k].Base = nil // do not keep the caller's buffers alive
	}
	if gsoMsgs > 0 {
		c.ctr.GSOMessages.Add(gsoMsgs)
		c.ctr.GSOSegments.Add(gsoSegs)
	}
	return c.ctr.Transmitted(sent, bytes, &fail, pkts)
}

// Gathers implements packetio.Gatherer: a packet's Ext goes out as an
// iovec of its own, between Buf[:ExtAt] and Buf[ExtAt:], in a GSO message
// like any other packet, so a soft device sends large payloads from where
// they lie (engine.Engine.OutputGather).
func (c *Conn) Gathers() bool { return true }

// txCtlSpace is the control room of one message: a UDP_SEGMENT cmsg and
// the TOS and TTL ones (udpsock.PutIPCmsgs).
var txCtlSpace = udpsock.GSOCmsgSpace + udpsock.IPCmsgSpace

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

// txICRC returns the ICRC of packet k (udpsock.ICRCOf its last iovec).
func (c *Conn) txICRC(k int) []byte { return udpsock.ICRCOf(&c.txIovs[c.txIov0[k+1]-1]) }

// buildMsg makes message m of the packets from packet k on (up to end)
// and returns how many it carries: with GSO, a run of them (udpsock.GSORun,
// as package udp cuts them). A message of several packets gets a
// UDP_SEGMENT cmsg with the segment size, and the ICRC of its packet j
// (which leaves with IPv4 Identification j) is rewritten from
// Identification 0 to j.
func (c *Conn) buildMsg(m, k, end int) int {
	n := 1
	if c.off.GSO() {
		n = udpsock.GSORun(c.txLen, c.txAddr, k, end)
	}
	d := &c.txAddr[k]
	h := &c.txHdrs[m]
	h.Namelen = c.txNames[m].Set(netip.AddrFrom16(d.Addr))
	h.Iov = &c.txIovs[c.txIov0[k]]
	h.SetIovlen(c.txIov0[k+n] - c.txIov0[k])
	h.Control = nil
	h.SetControllen(0)
	ctl := c.txCtl[m*txCtlSpace : (m+1)*txCtlSpace]
	cl := 0
	if n > 1 {
		udpsock.PutSegmentCmsg(ctl, uint16(c.txLen[k]))
		cl = udpsock.GSOCmsgSpace
		for j := 1; j < n && !c.v6; j++ { // IPv6 has no Identification
			c.ids.ChangeIDOf(c.txICRC(k+j), c.txLen[k+j], 0, uint16(j))
		}
	}
	if d.TOS != 0 || d.TTL != 0 {
		cl += udpsock.PutIPCmsgs(ctl[cl:], c.v6, d.TOS, d.TTL)
	}
	if cl > 0 {
		h.Control = unsafe.SliceData(ctl)
		h.SetControllen(cl)
	}
	c.msgK[m], c.msgN[m] = k, n
	return n
}

// entry returns the packets of send entry j: k to k+n-1.
func (c *Conn) entry(j int) (k, n int) {
	if j < c.txCap {
		return c.msgK[j], c.msgN[j]
	}
	return j - c.txCap, 1
}

// entryHdr returns the msghdr of send entry j.
func (c *Conn) entryHdr(j int) *unix.Msghdr {
	if j < c.txCap {
		return &c.txHdrs[j]
	}
	return &c.fbHdrs[j-c.txCap]
}

// failEntry records every packet of send entry j as not sent.
func (c *Conn) failEntry(j int, err error, fail *packetio.TxFailures) {
	k, n := c.entry(j)
	for q := k; q < k+n; q++ {
		fail.Add(c.txIdx[q], err)
	}
}

// gsoFallback turns GSO message m, which the kernel refused with errno,
// into one send entry per packet, appended to again: their ICRCs restored
// for Identification 0, each to the message's address. It counts the
// fallback; EIO turns GSO off for the Conn, as in package udp.
func (c *Conn) gsoFallback(m int, errno unix.Errno, again []int) []int {
	k, n := c.msgK[m], c.msgN[m]
	for j := 1; j < n && !c.v6; j++ {
		c.ids.ChangeIDOf(c.txICRC(k+j), c.txLen[k+j], uint16(j), 0)
	}
	// The message's TOS and TTL control messages, after its UDP_SEGMENT.
	ipCtl := c.txCtl[m*txCtlSpace+udpsock.GSOCmsgSpace : m*txCtlSpace+int(c.txHdrs[m].Controllen)]
	c.ctr.GSOFallbacks.Add(1)
	c.off.TurnOffGSO(errno)
	for q := k; q < k+n; q++ {
		f := &c.fbHdrs[q]
		f.Name = (*byte)(unsafe.Pointer(&c.txNames[m]))
		f.Namelen = c.txHdrs[m].Namelen
		f.Control = nil
		f.SetControllen(0)
		if len(ipCtl) > 0 {
			f.Control = unsafe.SliceData(ipCtl)
			f.SetControllen(len(ipCtl))
		}
		f.Iov = &c.txIovs[c.txIov0[q]]
		f.SetIovlen(c.txIov0[q+1] - c.txIov0[q])
		again = append(again, c.txCap+q)
		c.txTries[c.txCap+q] = 0
	}
	return again
}

// send submits a SENDMSG for each send entry in idx and waits for their
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
		prepSendmsg(s, c.sock, c.entryHdr(j), userData(kindSend, gen, uint32(j)))
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
