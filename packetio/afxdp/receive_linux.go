package afxdp

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/wire"
)

// Receive implements packetio.Conn. Frames of the packets returned by the
// previous Receive go back to the fill ring first (one batch, one store);
// then it reads the RX rings, waiting in Go's netpoller when they are empty.
func (c *Conn) Receive(deadline time.Time) ([]packetio.Packet, error) {
	c.inUse.Add(1)
	defer c.inUse.Add(-1)
	if c.closed.Load() {
		return nil, packetio.ErrClosed
	}
	if c.mc.Ready() { // datagrams of a multicast group first
		if pk := c.mc.Take(); len(pk) > 0 {
			return pk, nil
		}
	}
	pkts, err := c.receive(deadline)
	if err == nil {
		c.refreshDrops(len(pkts))
	}
	return pkts, err
}

// receive is Receive, the kernel's drop counts left to it.
func (c *Conn) receive(deadline time.Time) ([]packetio.Packet, error) {
	deadline = c.wait.Begin(deadline)
	c.loop.release()
	if c.loop.pending() > 0 {
		// Looped-back packets first, then whatever the rings hold, without
		// waiting.
		k := c.takeLoop()
		k = c.harvest(k)
		c.wait.Consume()
		return c.rx[:k], nil
	}
	c.rxN = 0
	if ok, err := c.wait.Wait(deadline, c.recvFn); err != nil {
		return nil, c.opErr("receive", err)
	} else if !ok {
		return c.rx[:0], nil
	}
	c.wait.Consume()
	return c.rx[:c.rxN], nil
}

// recv is the netpoller callback of Receive: true when Receive should stop
// waiting.
func (c *Conn) recv(uintptr) bool {
	// A harvest that only dropped what it read (malformed packets, a
	// chain too long to hold) may have left more in the RX ring, which no
	// new readiness will announce: read on while it makes progress.
	for {
		if c.rxN = c.harvest(0); c.rxN > 0 {
			return true
		}
		if c.rxDropped == 0 {
			return c.wait.Stop()
		}
	}
}

// recycle returns the frames of the last batch to the fill rings.
func (c *Conn) recycle() {
	for i, s := range c.socks {
		h := c.held[i]
		if len(h) == 0 {
			continue
		}
		if s.fill.Outstanding() == 0 {
			// The kernel took every frame it was given: a packet arriving
			// now would find none (the kernel counts those drops in
			// rx_fill_ring_empty_descs).
			c.xctr.fillEmpty.Add(1)
		}
		start, got := s.fill.Reserve(uint32(len(h)))
		for j := range got {
			s.fill.Set(start+j, h[j])
		}
		s.fill.Submit()
		// The fill ring has room for every receive frame, so got is
		// len(h); keep any rest for the next time all the same.
		c.held[i] = h[:copy(h, h[got:])]
	}
}

// takeLoop puts up to a batch of looped-back packets in c.rx and returns
// how many.
func (c *Conn) takeLoop() int {
	k := min(c.loop.pending(), c.batch)
	var bytes uint64
	for i := range k {
		b, port := c.loop.take()
		c.rx[i] = packetio.Packet{Buf: b, Addr: c.local, Port: port, Local: c.local, TOS: c.tos}
		bytes += uint64(len(b))
	}
	c.ctr.Received(k, bytes)
	return k
}

// harvest returns the frames of the last batch (the packets the previous
// Receive returned, or frames dropped since) to the fill rings and reads
// packets from the RX rings into c.rx[k0:], up to a batch in all; it
// returns the new total.
func (c *Conn) harvest(k0 int) int {
	c.recycle()
	c.rxDropped = 0
	k := k0
	var bytes uint64
	for range len(c.socks) {
		i := c.next
		if c.next++; c.next == len(c.socks) {
			c.next = 0
		}
		s := c.socks[i]
		if s.fill.needWakeup() {
			// A zero-copy driver waits for a kick to look at the fill
			// ring again.
			kickRx(s.fd)
			c.xctr.rxKicks.Add(1)
		}
		if c.multi {
			var b uint64
			k, b = c.harvestChains(i, s, k)
			bytes += b
			continue
		}
		room := min(c.batch-k, cap(c.held[i])-len(c.held[i]))
		if room <= 0 {
			continue
		}
		start, got := s.rx.Peek(uint32(room))
		drops := 0
		for j := range got {
			d := s.rx.Get(start + j)
			c.held[i] = append(c.held[i], d.Addr&^uint64(c.frameSize-1))
			if d.Addr+uint64(d.Len) > uint64(len(s.umem)) || !c.parse(s.umem[d.Addr:d.Addr+uint64(d.Len)], &c.rx[k]) {
				drops++
				continue
			}
			bytes += uint64(len(c.rx[k].Buf))
			k++
		}
		s.rx.Release(got)
		if drops > 0 {
			c.rxDropped += drops
			c.xctr.malformed.Add(uint64(drops))
			c.ctr.RxDrops.Add(uint64(drops))
		}
	}
	c.ctr.Received(k-k0, bytes)
	return k
}

// harvestChains reads packets from socket i's RX ring into c.rx[k:], up
// to a batch in all, in multi-buffer mode: a packet is one descriptor, or
// several whose every one but the last has XDP_PKT_CONTD. A one-frame
// packet is returned in place; the frames of a longer one are copied, in
// order, into its slot of c.scratch. It returns the new total and the
// bytes received.
func (c *Conn) harvestChains(i int, s *socket, k int) (int, uint64) {
	h := c.held[i]
	limit := uint32(cap(h) - len(h)) // at least rxChain descriptors: recycle emptied h
	start, got := s.rx.Peek(limit)
	mask := ^uint64(c.frameSize - 1)
	var bytes uint64
	drops, chains := 0, 0
	j := uint32(0)
	for j < got && k < c.batch {
		e := j // the packet's last descriptor
		for e < got && s.rx.Get(start+e).Options&unix.XDP_PKT_CONTD != 0 {
			e++
		}
		if e == got {
			// The rest of the packet is not in view. The kernel publishes
			// whole packets, so this is a packet longer than the
			// descriptors Receive holds (the MTU grew since Listen): it
			// is dropped, with the rest of it when that comes.
			if j > 0 || got < limit {
				break
			}
			for ; j < got; j++ {
				h = append(h, s.rx.Get(start+j).Addr&mask)
			}
			if !c.skip[i] {
				drops++
			}
			c.skip[i] = true
			c.rxDropped++ // progress, though counted once
			break
		}
		if c.skip[i] { // the end of a packet dropped above
			for ; j <= e; j++ {
				h = append(h, s.rx.Get(start+j).Addr&mask)
			}
			c.skip[i] = false
			c.rxDropped++ // progress
			continue
		}
		var b []byte
		if e == j {
			d := s.rx.Get(start + j)
			h = append(h, d.Addr&mask)
			if d.Addr+uint64(d.Len) <= uint64(len(s.umem)) {
				b = s.umem[d.Addr : d.Addr+uint64(d.Len)]
			}
			j++
		} else {
			chains++
			dst := c.scratch[k*c.rxSlot : (k+1)*c.rxSlot]
			n, ok := 0, true
			for ; j <= e; j++ {
				d := s.rx.Get(start + j)
				h = append(h, d.Addr&mask)
				if !ok || d.Addr+uint64(d.Len) > uint64(len(s.umem)) || n+int(d.Len) > len(dst) {
					ok = false // out of the UMEM, or longer than MaxPacket
					continue
				}
				n += copy(dst[n:], s.umem[d.Addr:d.Addr+uint64(d.Len)])
			}
			if ok {
				b = dst[:n]
			}
		}
		if b == nil || !c.parse(b, &c.rx[k]) {
			drops++
			continue
		}
		bytes += uint64(len(c.rx[k].Buf))
		k++
	}
	s.rx.Release(j)
	c.held[i] = h
	if drops > 0 {
		c.rxDropped += drops
		c.xctr.malformed.Add(uint64(drops))
		c.ctr.RxDrops.Add(uint64(drops))
	}
	if chains > 0 {
		c.xctr.rxChains.Add(uint64(chains))
	}
	return k, bytes
}

// parse fills p from a received frame; false when it is not a well-formed
// RoCEv2 frame of the Conn's IP version within MaxPacket.
func (c *Conn) parse(b []byte, p *packetio.Packet) bool {
	var f wire.Frame
	if wire.ParseFrame(b, &f) != nil || (f.IPVersion == 4) != c.local.Is4() {
		return false
	}
	t := f.Transport()
	if len(t) > c.maxPacket {
		return false
	}
	if f.IPVersion == 6 {
		ip := f.IPv6()
		p.Buf = t[:len(t):len(t)]
		p.Addr, p.Port, p.Local, p.TOS = ip.Src(), f.UDP().SrcPort(), ip.Dst(), ip.TrafficClass()
		p.IPv4ID, p.IPv4DF, p.HasIPv4ID = 0, false, false
		return true
	}
	ip := f.IPv4()
	p.Buf = t[:len(t):len(t)]
	p.Addr = ip.Src()
	p.Port = f.UDP().SrcPort()
	p.Local = ip.Dst()
	p.TOS = ip.TOS()
	p.IPv4ID, p.IPv4DF, p.HasIPv4ID = ip.ID(), ip.DF(), true
	return true
}

// Wake implements packetio.Conn.
func (c *Conn) Wake() {
	c.wait.Wake()
}
