package uring

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/udpsock"
)

// TxBatch implements packetio.Conn.
func (c *Conn) TxBatch(n int) []packetio.Packet {
	return c.txl.Lend(c.closed.Load(), n)
}

// Transmit implements packetio.Conn. It queues one SENDMSG per packet and
// submits them with one io_uring_enter, which also waits for their
// completions; a packet the kernel refuses (EMSGSIZE, ...) is counted and
// reported and the others are sent. A packet that met an asynchronous error
// (an ICMP error of an earlier datagram, reported on this send) is counted
// in AsyncErrors and sent once more. Every packet leaves from the socket's
// port; Packet.Port is ignored.
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
	m := 0
	for i := range pkts {
		p := &pkts[i]
		a, err := packetio.TxDest(p, c.maxPacket)
		if err != nil {
			fail.Add(i, err)
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
			case round == 0 && udpsock.AsyncErrno(unix.Errno(-res)):
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
	return c.ctr.Transmitted(sent, bytes, &fail, pkts)
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
