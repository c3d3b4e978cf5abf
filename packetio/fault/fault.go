// Package fault is a packetio.Conn decorator that injects faults into the
// packets a Conn sends: loss (single or in bursts), duplication, reordering
// and corruption, drawn from a seeded generator so that a failing run can be
// repeated. It is for tests and for `goroce demo --loss` and the like.
package fault

import (
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/packetio"
)

// Options set the probability of each fault, per packet sent.
type Options struct {
	Seed      uint64
	Drop      float64 // drop the packet
	BurstLen  int     // a drop takes this many packets in a row (default 1)
	Duplicate float64 // send it twice
	Corrupt   float64 // flip one random bit
	Reorder   float64 // hold it back and send it after up to ReorderDepth later packets
	// ReorderDepth is how many later packets may overtake a held one
	// (default 3); MaxHold bounds how long it is held (default 1 ms).
	ReorderDepth int
	MaxHold      time.Duration
}

// Stats counts the faults injected.
type Stats struct {
	Sent, Dropped, Duplicated, Corrupted, Reordered uint64
}

type held struct {
	buf   []byte
	addr  netip.Addr
	port  uint16
	after int // release after this many more packets
	until time.Time
}

// Conn injects faults into what the wrapped Conn transmits. Like every
// packetio.Conn, its Receive and Transmit belong to one goroutine.
type Conn struct {
	packetio.Conn
	o                                               Options
	rng                                             *rand.Rand
	lent                                            []packetio.Packet
	out                                             []packetio.Packet // what goes to the wrapped Conn, in order
	held                                            []held
	free                                            [][]byte
	burst                                           int
	sent, dropped, duplicated, corrupted, reordered atomic.Uint64
}

// New wraps c.
func New(c packetio.Conn, o Options) *Conn {
	if o.BurstLen <= 0 {
		o.BurstLen = 1
	}
	if o.ReorderDepth <= 0 {
		o.ReorderDepth = 3
	}
	if o.MaxHold <= 0 {
		o.MaxHold = time.Millisecond
	}
	return &Conn{Conn: c, o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))}
}

// Stats returns the faults injected so far.
func (c *Conn) FaultStats() Stats {
	return Stats{Sent: c.sent.Load(), Dropped: c.dropped.Load(), Duplicated: c.duplicated.Load(),
		Corrupted: c.corrupted.Load(), Reordered: c.reordered.Load()}
}

func (c *Conn) buf() []byte {
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free = c.free[:n-1]
		return b[:0]
	}
	return make([]byte, 0, c.MaxPacket())
}

// TxBatch lends buffers of the decorator's own.
func (c *Conn) TxBatch(n int) []packetio.Packet {
	for _, p := range c.lent {
		c.free = append(c.free, p.Buf[:0])
	}
	c.lent = c.lent[:0]
	for i := 0; i < n; i++ {
		c.lent = append(c.lent, packetio.Packet{Buf: c.buf()})
	}
	return c.lent
}

// PerPacketSourcePort reports whether the wrapped Conn sends each packet
// from its Packet.Port (packetio.SourcePorts); the faults keep each
// packet's port.
func (c *Conn) PerPacketSourcePort() bool { return packetio.PerPacketSourcePort(c.Conn) }

// Transmit applies the faults and sends what survives.
func (c *Conn) Transmit(pkts []packetio.Packet) (int, error) {
	now := time.Now()
	c.out = c.out[:0]
	for i := range pkts {
		p := pkts[i]
		c.sent.Add(1)
		if c.burst > 0 {
			c.burst--
			c.dropped.Add(1)
			continue
		}
		if c.rng.Float64() < c.o.Drop {
			c.burst = c.o.BurstLen - 1
			c.dropped.Add(1)
			continue
		}
		if c.rng.Float64() < c.o.Corrupt && len(p.Buf) > 0 {
			bit := c.rng.IntN(len(p.Buf) * 8)
			p.Buf[bit/8] ^= 1 << (bit % 8)
			c.corrupted.Add(1)
		}
		if c.rng.Float64() < c.o.Reorder {
			b := append(c.buf(), p.Buf...)
			c.held = append(c.held, held{buf: b, addr: p.Addr, port: p.Port, after: 1 + c.rng.IntN(c.o.ReorderDepth), until: now.Add(c.o.MaxHold)})
			c.reordered.Add(1)
			continue
		}
		c.out = append(c.out, p)
		if c.rng.Float64() < c.o.Duplicate {
			c.out = append(c.out, p)
			c.duplicated.Add(1)
		}
		c.release(now, true)
	}
	c.release(now, false)
	return len(pkts), c.send()
}

// release moves held packets whose turn has come to c.out; step counts one
// packet gone by.
func (c *Conn) release(now time.Time, step bool) {
	k := 0
	for _, h := range c.held {
		if step {
			h.after--
		}
		if h.after <= 0 || now.After(h.until) {
			c.out = append(c.out, packetio.Packet{Buf: h.buf, Addr: h.addr, Port: h.port})
			continue
		}
		c.held[k] = h
		k++
	}
	c.held = c.held[:k]
}

// send hands c.out to the wrapped Conn in batches, copying into its buffers.
func (c *Conn) send() error {
	var first error
	for len(c.out) > 0 {
		batch := c.Conn.TxBatch(len(c.out))
		if len(batch) == 0 {
			return packetio.ErrClosed
		}
		n := min(len(batch), len(c.out))
		for i := 0; i < n; i++ {
			batch[i].Buf = append(batch[i].Buf[:0], c.out[i].Buf...)
			batch[i].Addr, batch[i].Port = c.out[i].Addr, c.out[i].Port
		}
		if _, err := c.Conn.Transmit(batch[:n]); err != nil && first == nil {
			first = err
		}
		c.out = c.out[n:]
	}
	// Buffers of released held packets go back to the pool.
	return first
}

// Receive releases held packets that waited long enough, then receives.
func (c *Conn) Receive(deadline time.Time) ([]packetio.Packet, error) {
	if len(c.held) > 0 {
		c.out = c.out[:0]
		c.release(time.Now(), false)
		c.send()
		if len(c.held) > 0 {
			if d := c.held[0].until; deadline.IsZero() || d.Before(deadline) {
				deadline = d
			}
		}
	}
	return c.Conn.Receive(deadline)
}
