package pipe

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/wire"
)

// DefaultQueue is the default receive queue length, in packets.
const DefaultQueue = 1024

// Options configures a pair. The zero value gives the defaults.
type Options struct {
	// Queue is the receive queue length of each end, in packets, counting
	// the packets returned by the last Receive. Default DefaultQueue.
	Queue int
	// Batch is the largest number of packets one Receive returns and one
	// TxBatch lends. Default packetio.DefaultBatch.
	Batch int
	// MaxPacket is the largest packet, in bytes. Default
	// packetio.DefaultMaxPacket.
	MaxPacket int
}

func (o Options) withDefaults() Options {
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.Batch <= 0 {
		o.Batch = packetio.DefaultBatch
	}
	if o.MaxPacket <= 0 {
		o.MaxPacket = packetio.DefaultMaxPacket
	}
	return o
}

// Conn is one end of a pipe. It implements packetio.Conn.
type Conn struct {
	local     netip.Addr
	peer      *Conn
	maxPacket int

	// Receive queue: a ring of slots, each with its own buffer. The held
	// slots at head were returned by the last Receive and stay untouched
	// until the next one.
	mu    sync.Mutex
	slots []slot
	head  int
	count int // queued slots, held ones included
	held  int

	rx     []packetio.Packet // what Receive returns
	notify chan struct{}     // capacity 1: "something changed", from the peer's Transmit or Wake
	done   chan struct{}     // closed by Close
	timer  *time.Timer       // Receive's deadline, reused; only the driver touches it
	closed atomic.Bool
	waking atomic.Bool

	// Send side, driver goroutine only.
	txl packetio.TxLender

	ctr packetio.Counters
}

type slot struct {
	buf  []byte // len = packet length, cap = MaxPacket
	from netip.Addr
	port uint16 // source port
	tos  uint8  // the TOS the packet was sent with (Packet.TOS: 0 for none)
}

var _ packetio.Conn = (*Conn)(nil)

// New returns the two ends of a pipe: packets transmitted on the first
// (address a) to b arrive at the second (address b), and back.
func New(a, b netip.Addr, opts Options) (*Conn, *Conn) {
	opts = opts.withDefaults()
	ca, cb := newConn(a, opts), newConn(b, opts)
	ca.peer, cb.peer = cb, ca
	return ca, cb
}

func newConn(local netip.Addr, o Options) *Conn {
	c := &Conn{
		local:     local,
		maxPacket: o.MaxPacket,
		slots:     make([]slot, o.Queue),
		rx:        make([]packetio.Packet, o.Batch),
		notify:    make(chan struct{}, 1),
		done:      make(chan struct{}),
		timer:     time.NewTimer(time.Hour),
		txl:       packetio.NewTxLender(o.Batch, o.MaxPacket),
	}
	c.timer.Stop()
	mem := make([]byte, o.Queue*o.MaxPacket)
	for i := range c.slots {
		c.slots[i].buf = mem[i*o.MaxPacket : i*o.MaxPacket : (i+1)*o.MaxPacket]
	}
	return c
}

// Receive implements packetio.Conn.
func (c *Conn) Receive(deadline time.Time) ([]packetio.Packet, error) {
	c.mu.Lock()
	// The packets returned last time are no longer lent.
	c.head = (c.head + c.held) % len(c.slots)
	c.count -= c.held
	c.held = 0
	for {
		if c.closed.Load() {
			c.mu.Unlock()
			return nil, packetio.ErrClosed
		}
		if c.count > 0 {
			pkts := c.take()
			c.mu.Unlock()
			if c.waking.Swap(false) {
				c.ctr.Wakes.Add(1)
			}
			return pkts, nil
		}
		c.mu.Unlock()
		if c.waking.Swap(false) {
			c.ctr.Wakes.Add(1)
			return c.rx[:0], nil
		}
		var timeout <-chan time.Time
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return c.rx[:0], nil
			}
			c.timer.Reset(d)
			timeout = c.timer.C
		}
		select {
		case <-c.notify:
		case <-c.done:
		case <-timeout:
		}
		if timeout != nil {
			c.timer.Stop()
		}
		c.mu.Lock()
	}
}

// take returns up to a batch of queued packets and marks them held. c.mu is
// held.
func (c *Conn) take() []packetio.Packet {
	k := min(c.count, len(c.rx))
	var bytes uint64
	for i := range k {
		s := &c.slots[(c.head+i)%len(c.slots)]
		c.rx[i] = packetio.Packet{Buf: s.buf, Addr: s.from, Port: s.port, Local: c.local, TOS: s.tos}
		bytes += uint64(len(s.buf))
	}
	c.held = k
	c.ctr.Received(k, bytes)
	return c.rx[:k]
}

// TxBatch implements packetio.Conn.
func (c *Conn) TxBatch(n int) []packetio.Packet {
	return c.txl.Lend(c.closed.Load(), n)
}

// PerPacketSourcePort reports true: a packet arrives with the source port
// its Packet.Port gave (packetio.SourcePorts).
func (c *Conn) PerPacketSourcePort() bool { return true }

// Gathers implements packetio.Gatherer: a packet's Ext is copied into the
// peer's queue with the rest.
func (c *Conn) Gathers() bool { return true }

// Transmit implements packetio.Conn. The packets are copied into the peer's
// queue before it returns.
func (c *Conn) Transmit(pkts []packetio.Packet) (int, error) {
	if err := c.txl.Take(c.closed.Load(), len(pkts)); err != nil {
		return 0, err
	}
	if len(pkts) == 0 {
		return 0, nil
	}
	p := c.peer
	var (
		sent         int
		bytes, drops uint64
		fail         packetio.TxFailures
	)
	p.mu.Lock()
	peerClosed := p.closed.Load()
	for i := range pkts {
		pk := &pkts[i]
		var err error
		switch {
		case packetio.CheckExt(pk) != nil:
			err = packetio.ErrExtAt
		case len(pk.Buf)+len(pk.Ext) > c.maxPacket:
			err = packetio.ErrTooLarge
		case pk.Addr.Unmap() != p.local.Unmap():
			err = packetio.ErrNoRoute
		}
		if err != nil {
			fail.Add(i, err)
			continue
		}
		sent++
		bytes += uint64(len(pk.Buf) + len(pk.Ext))
		switch {
		case peerClosed:
		case p.count == len(p.slots):
			drops++
		default:
			s := &p.slots[(p.head+p.count)%len(p.slots)]
			if pk.Ext != nil {
				s.buf = append(append(append(s.buf[:0], pk.Buf[:pk.ExtAt]...), pk.Ext...), pk.Buf[pk.ExtAt:]...)
			} else {
				s.buf = append(s.buf[:0], pk.Buf...)
			}
			s.from, s.port, s.tos = c.local, pk.Port, pk.TOS
			if s.port == 0 {
				s.port = wire.RoCEv2Port
			}
			p.count++
		}
	}
	p.mu.Unlock()
	if drops > 0 {
		p.ctr.RxDrops.Add(drops)
	}
	if sent > 0 {
		c.ctr.TxBatches.Add(1)
		if !peerClosed {
			select {
			case p.notify <- struct{}{}:
			default:
			}
		}
	}
	return c.ctr.Transmitted(sent, bytes, &fail, pkts)
}

// Wake implements packetio.Conn.
func (c *Conn) Wake() {
	if c.waking.Swap(true) {
		return // a wake is already pending
	}
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// LocalAddr implements packetio.Conn.
func (c *Conn) LocalAddr() netip.Addr { return c.local }

// MaxPacket implements packetio.Conn.
func (c *Conn) MaxPacket() int { return c.maxPacket }

// Stats implements packetio.Conn.
func (c *Conn) Stats() packetio.Stats { return c.ctr.Stats() }

// Close implements packetio.Conn. Queued packets are discarded; the peer
// stays open.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return packetio.ErrClosed
	}
	close(c.done)
	return nil
}
