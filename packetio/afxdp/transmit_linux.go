package afxdp

import (
	"errors"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/wire"
)

// TxBatch implements packetio.Conn. The lent buffers are UMEM frames past
// the room for the Ethernet, IPv4 and UDP headers, which Transmit writes.
func (c *Conn) TxBatch(n int) []packetio.Packet {
	c.inUse.Add(1)
	defer c.inUse.Add(-1)
	c.free = append(c.free, c.lentF...) // lent before and not transmitted
	c.lentF = c.lentF[:0]
	if c.closed.Load() || n <= 0 {
		return c.txl.Keep(nil)
	}
	s := c.socks[0]
	want := min(n, c.batch)
	c.reclaim(s)
	if len(c.free) < want && s.tx.Outstanding() > 0 {
		c.kick(s)
		c.reclaim(s)
	}
	k := min(want, len(c.free))
	for i := range k {
		f := c.free[len(c.free)-1]
		c.free = c.free[:len(c.free)-1]
		c.lentF = append(c.lentF, f)
		off := int(f) + c.hdrLen
		c.tx[i] = packetio.Packet{Buf: s.umem[off:off:(int(f) + c.slot)]}
	}
	return c.txl.Keep(c.tx[:k])
}

// reclaim takes the frames the kernel has finished sending back from the
// completion ring. In multi-buffer mode a slot is free again once every
// descriptor of its packet has completed.
func (c *Conn) reclaim(s *socket) {
	mask := ^uint64(c.frameSize - 1)
	if c.txPer == 1 {
		start, got := s.comp.Peek(uint32(cap(c.free) - len(c.free)))
		for i := range got {
			c.free = append(c.free, s.comp.Get(start+i)&mask)
		}
		s.comp.Release(got)
		return
	}
	start, got := s.comp.Peek(s.comp.size)
	for i := range got {
		a := s.comp.Get(start+i) & mask
		if a < c.txBase {
			continue // not a transmit frame: the kernel's mistake, not ours to free
		}
		si := (a - c.txBase) / uint64(c.slot)
		if si >= uint64(len(c.pend)) || c.pend[si] == 0 {
			continue
		}
		if c.pend[si]--; c.pend[si] == 0 {
			c.free = append(c.free, c.txBase+si*uint64(c.slot))
		}
	}
	s.comp.Release(got)
}

// PerPacketSourcePort reports true: every frame carries the UDP source port
// of its Packet.Port (packetio.SourcePorts).
func (c *Conn) PerPacketSourcePort() bool { return true }

// Transmit implements packetio.Conn. For each packet it writes the
// Ethernet header (the destination MAC from the neighbour table), the IPv4
// header (DF set, Identification 0, TTL 64, the Conn's TOS) and the UDP
// header (source port Packet.Port, or Options.Port when it is 0; checksum
// 0) in front of the transport packet in its frame, puts the lot on the TX
// ring with one store, and kicks the kernel when it asks.
func (c *Conn) Transmit(pkts []packetio.Packet) (int, error) {
	c.inUse.Add(1)
	defer c.inUse.Add(-1)
	if err := c.txl.Take(c.closed.Load(), len(pkts)); err != nil {
		return 0, err
	}
	s := c.socks[0]
	now := time.Now().UnixNano()
	start, got := s.tx.Reserve(uint32(len(pkts) * c.txPer))
	var fail packetio.TxFailures
	var bytes uint64
	m, loops, chains, framed := uint32(0), 0, 0, 0 // m: descriptors; framed: packets on the TX ring
	for i := range pkts {
		c.used[i] = false
		p := &pkts[i]
		a, err := packetio.TxDest(p, c.maxPacket)
		if err == nil && !packetio.SameFamily(c.local, a) {
			err = packetio.ErrAddress
		}
		n := len(p.Buf)
		sport := p.Port
		if sport == 0 {
			sport = c.port
		}
		switch {
		case err != nil:
			fail.Add(i, err)
			continue
		case a == c.local:
			if !c.loop.push(p.Buf, sport) {
				fail.Add(i, errLoopFull)
				continue
			}
			loops++
			bytes += uint64(n)
			continue
		case m+uint32(c.txPer) > got: // cannot happen: the TX ring has a slot per transmit frame
			fail.Add(i, errTxRingFull)
			continue
		}
		mac, err := c.neigh.lookup(a, now)
		if err != nil {
			fail.Add(i, err)
			continue
		}
		f := c.lentF[i]
		frame := s.umem[f : f+uint64(c.slot)]
		if n > 0 && unsafe.SliceData(p.Buf) != &frame[c.hdrLen] {
			copy(frame[c.hdrLen:], p.Buf) // not written in place (the caller replaced Buf)
		}
		l, err := c.writeHeaders(frame, p, a, sport, mac)
		if err != nil {
			fail.Add(i, err)
			continue
		}
		if l <= c.frameSize {
			s.tx.Set(start+m, unix.XDPDesc{Addr: f, Len: uint32(l)})
			m++
			if c.multi {
				c.pend[(f-c.txBase)/uint64(c.slot)] = 1
			}
		} else {
			m = c.putChain(s, start+m, f, l) - start
			chains++
		}
		c.used[i] = true
		framed++
		bytes += uint64(n)
	}
	s.tx.Cancel(got - m)
	c.submit(s, len(pkts), m > 0, loops, chains)
	sent := framed + loops
	if sent > 0 {
		c.ctr.TxBatches.Add(1)
	}
	return c.ctr.Transmitted(sent, bytes, &fail, pkts)
}

// writeHeaders writes the Ethernet header (to mac), the IP header and the
// UDP header (from sport) in front of the transport packet p in its
// frame, pads a short frame to minFrame, and returns the frame's length.
// IPv6 requires the UDP checksum, which it computes (the socket paths'
// kernel computes theirs).
func (c *Conn) writeHeaders(frame []byte, p *packetio.Packet, a netip.Addr, sport uint16, mac wire.MAC) (int, error) {
	n := len(p.Buf)
	et := uint16(wire.EtherTypeIPv4)
	if c.hdrLen != wire.EthernetLen+wire.IPv4UDPLen {
		et = wire.EtherTypeIPv6
	}
	wire.Ethernet(frame).Set(mac, c.srcMAC, et)
	fl := wire.Flow{Src: c.local, Dst: a, SrcPort: sport, DstPort: c.dstPort, TrafficClass: packetio.PacketTOS(p.TOS, c.tos, c.noECN),
		HopLimit: p.HopLimit, FlowLabel: p.FlowLabel}
	if _, err := fl.PseudoHeader(frame[wire.EthernetLen:wire.EthernetLen], n); err != nil {
		return 0, err
	}
	if et == wire.EtherTypeIPv6 {
		f := wire.Frame{Buf: frame, IPVersion: 6, L3: wire.EthernetLen, L4: wire.EthernetLen + wire.IPv6Len, End: c.hdrLen + n}
		f.SetUDPChecksum()
	}
	l := c.hdrLen + n
	if l < minFrame {
		clear(frame[l:minFrame])
		l = minFrame
	}
	return l, nil
}

// putChain puts a multi-buffer frame of l bytes at UMEM address f on the
// TX ring from position at: one descriptor per frame of the slot, all but
// the last with XDP_PKT_CONTD. It returns the position after them.
func (c *Conn) putChain(s *socket, at uint32, f uint64, l int) uint32 {
	nd := 0
	for off := 0; off < l; off += c.frameSize {
		dl := min(c.frameSize, l-off)
		var opt uint32
		if off+dl < l {
			opt = unix.XDP_PKT_CONTD
		}
		s.tx.Set(at, unix.XDPDesc{Addr: f + uint64(off), Len: uint32(dl), Options: opt})
		at++
		nd++
	}
	c.pend[(f-c.txBase)/uint64(c.slot)] = uint8(nd)
	return at
}

// submit ends a Transmit of n packets: the frames lent for packets that
// did not go back to the free list, the TX ring's descriptors (when any)
// go to the kernel, and the loopback and chain counters count.
func (c *Conn) submit(s *socket, n int, any bool, loops, chains int) {
	for i, f := range c.lentF {
		if i >= n || !c.used[i] {
			c.free = append(c.free, f)
		}
	}
	c.lentF = c.lentF[:0]
	if any {
		s.tx.Submit()
		c.kick(s)
	}
	if loops > 0 {
		c.xctr.looped.Add(uint64(loops))
	}
	if chains > 0 {
		c.xctr.txChains.Add(uint64(chains))
	}
}

var (
	errTxRingFull = errors.New("packetio/afxdp: TX ring full")
	errLoopFull   = errors.New("packetio/afxdp: loopback queue full (packets to the local address not received yet)")
)

// kick has the kernel process the TX ring when it asks to be woken (always
// in copy mode, where the sending happens inside sendto, at most 32 frames
// per call), and takes completed frames back.
func (c *Conn) kick(s *socket) {
	for tries := 0; tries < 64 && s.tx.needWakeup(); tries++ {
		e := kickTx(s.fd)
		c.xctr.txKicks.Add(1)
		switch e {
		case 0, unix.EAGAIN, unix.ENOBUFS, unix.EINTR:
		case unix.EBUSY:
			// The device dropped a frame (NET_XMIT_DROP: a full veth
			// peer ring, a qdisc); the frame is completed.
			c.xctr.txDropped.Add(1)
		default:
			c.ctr.AsyncErrors.Add(1)
			return
		}
		c.reclaim(s)
		if s.tx.Outstanding() == 0 {
			return
		}
	}
	if s.tx.Outstanding() != 0 {
		c.xctr.txStuck.Add(1)
	}
}
