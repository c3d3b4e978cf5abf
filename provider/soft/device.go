package soft

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/internal/racesync"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// Options configure a soft device. Zero fields take the defaults.
type Options struct {
	// Name of the device (default "soft0").
	Name string
	// Conn is the packet path. Required.
	Conn packetio.Conn
	// SourcePort of the packets the engine builds, which the ICRC covers:
	// the UDP path sends from its socket's port (default 4791). When the
	// Conn can send each packet from a port of its own
	// (packetio.PerPacketSourcePort), a UD send whose address handle has a
	// non-zero flow label leaves from the port the label maps to
	// (wire.SourcePort), as from rdma_rxe and RoCE NICs; everything else
	// from SourcePort.
	SourcePort uint16
	// ActiveMTU is the port's active MTU. The default is derived from the
	// link the device sends on, as rdma_rxe derives it from its network
	// device (PortMTU of the MTU of the interface that holds Conn's local
	// address, looked up in the network namespace of the goroutine calling
	// New), and capped so that a packet of that MTU fits Conn.MaxPacket. A
	// value the link or the Conn cannot carry is refused. QPs cannot be
	// given a larger path MTU.
	ActiveMTU verbs.MTU
	// Spin is how long the driver polls without blocking after activity
	// (default 50µs; negative: never spin).
	Spin time.Duration
	// Busy makes the driver poll the packet path without ever blocking, as
	// a kernel-bypass NIC driver polled in a loop: each round receives with
	// a deadline in the past (packetio.Conn.Receive polls then) and yields
	// the processor with runtime.Gosched, never sleeping, so a packet is
	// handled as soon as the round after it arrives instead of after a
	// wake-up (tens of microseconds on a busy machine). It is for latency
	// measurements and latency-bound programs, which should then also poll
	// their CQs without waiting on a completion channel (`goroce bench`'s
	// latency tests do both unless -e). A busy device also sends the ACKs
	// of a flush after its other packets, in a system call of their own (a
	// reply then leaves ahead of the ACK held back to travel with it; see
	// ackAside). Default off: a busy
	// device keeps a processor fully occupied for as long as it is open,
	// idle or not. Spin is ignored. Close stops the driver as usual.
	//
	// The driver and an application polling its CQ are two spinning
	// goroutines: on a machine without a free processor for each, the
	// kernel time-slices them and a packet can wait milliseconds for the
	// one that would handle it. Run such a program with GOMAXPROCS=1 (as
	// `goroce bench` does in busy mode) so that they take turns on one
	// thread, each yielding to the other with runtime.Gosched.
	Busy bool
	// Path describes the packet path for people (goroce devinfo shows it),
	// such as "uring (multishot-recvmsg,...)". Optional.
	Path string
	// NoInline keeps every use of the packet path in the driver goroutine.
	// By default a PostSend, and a Poll that finds its CQ empty, use the
	// packet path themselves when the driver is not using it (sending what
	// the post made ready, receiving what arrived), which saves a hand-off
	// between goroutines on every message; and while an application keeps
	// polling and posts nothing, the driver stands by and leaves the packet
	// path to it, as Linux's preferred busy polling does (see standBy),
	// taking it back 50 µs after the last empty Poll, at a post, or at a
	// sign of loss.
	NoInline bool
	// NoGather copies every payload into its packet. By default, over a
	// Conn that sends a packet in pieces (packetio.Gatherer: packetio/udp
	// and packetio/uring), SEND and WRITE payloads of engine.GatherMin
	// bytes or more from one SGE are sent from where they lie
	// (engine.Engine.OutputGather), which saves the driver a copy of each:
	// 6% of the sender's CPU time in an RC WRITE of 64 KiB between two
	// namespaces.
	NoGather bool
	// Batch is the most packets the driver sends with one Transmit (the
	// Conn lends at most its own batch size). Default DefaultBatch.
	Batch int
	// Engine settings (limits, window); Local, SourcePort and Clock are
	// set by the device (Clock to verbs.Now: every work completion carries
	// the time the engine produced it, WC.Timestamp). Engine.AckDelay defaults to DefaultAckDelay here;
	// negative turns it off.
	Engine engine.Config
}

// DefaultBatch is Options.Batch's default: four GSO messages of
// wire.GSOMaxSegments packets (packetio/udp lends that many where it has
// GSO). A run of packets of one size that crosses the messages of a stream
// then fills GSO messages rather than ending with each Transmit: a 64 KiB
// SEND is 16 packets at path MTU 4096 (64 at 1024), a GSO message takes 15
// (62), and a batch of one GSO message's 64 packets sent each SEND in two
// or more. Between two namespaces (veth, `goroce bench TEST -s SIZE --path
// udp` against a build with a batch of 64, 5 to 9 interleaved rounds,
// medians): send_bw 64 KiB 1.17x at path MTU 1024 over MTU 1500 and 1.06x
// at 4096 over 9000; write_bw 64 KiB 1.03x and 1.00x, write_bw 64 B and
// 4 KiB and send_lat 64 B 1.00x. Posts to a QP with packets in flight are
// corked to fill a GSO message (corkLimit), not a batch.
const DefaultBatch = 4 * wire.GSOMaxSegments

// corkLimit is how many unsent packets end a cork (kickQP): three quarters
// of a GSO message, 48. pushMin is the fewest corked packets an empty Poll
// sends (push): an eighth of one, 8.
const (
	corkLimit = wire.GSOMaxSegments * 3 / 4
	pushMin   = wire.GSOMaxSegments / 8
)

// DefaultAckDelay is how long a soft device's responder holds back the ACK
// of a message that completed a receive, waiting for the application's
// reply to carry it in the same batch (engine.Config.AckDelay). It halves
// the batches of a request-reply exchange and costs a one-way sender at
// most this much more latency.
const DefaultAckDelay = 5 * time.Microsecond

// Device is a soft RDMA device. It implements verbs.Device.
type Device struct {
	opts Options
	name string
	addr netip.Addr
	// linkLocal is GID 0 (see GIDIndexLinkLocal); gids the GID table, in
	// which the device's own GID is at sgid (gidTable).
	linkLocal verbs.GID
	gids      []verbs.GID
	sgid      int
	conn      packetio.Conn
	eng       *engine.Engine
	mtu       verbs.MTU
	// mtuWhy says where mtu comes from, for the errors that name it.
	mtuWhy string
	start  time.Time

	// io serialises the packet path (Conn calls) between the driver and
	// inline callers. On a packetio.FullDuplex Conn it covers the receive
	// side only, and tx the send side: the driver can then wait in Receive
	// while a post sends inline. Order: io, tx, mu.
	io     sync.Mutex
	tx     sync.Mutex // the send side of a duplex Conn; unused otherwise
	duplex bool
	mu     sync.Mutex // serialises the engine between the driver and control calls; taken after io and tx
	// sleepUntil is the engine time the driver sleeps until (0: no
	// timer), valid while sleeping is set: a post that arms an earlier
	// timer wakes it, others need not (kickQP).
	sleepUntil atomic.Int64
	// flushes counts the calls of flushBatches (corkHint).
	flushes  atomic.Uint64
	doorbell atomic.Uint64
	sleeping atomic.Bool
	// corked is set when a post is corked (kickQP), cleared by a flush: a
	// Poll that finds its CQ empty then looks whether to push.
	corked atomic.Bool
	closed atomic.Bool
	gone   chan struct{} // closed by Close: wakes the contexts' waiters
	done   chan struct{}
	err    error
	async  asyncState
	gsi    gsiState
	// ackScratch holds a flush's ACKs set aside by ackAside (Busy).
	ackScratch []ackCopy
	// first is where a flush builds its first packet (flushBatches).
	first []byte
	// gather: the driver sends payloads from where they lie (NoGather).
	gather bool
	// drops reads the packet path's count of datagrams the kernel dropped
	// before it could read them (packetio.RxDropCounter), nil when it has
	// none; seenDrops is the count input last saw (rxDrops).
	drops     rxDropCounter
	seenDrops uint64
	// sb: the driver stands aside while an application polls (standBy).
	sb standbyState
}

// rxDropCounter is packetio.RxDropCounter, declared here so that a Conn
// implements it by its method alone.
type rxDropCounter interface{ RxDropped() uint64 }

// ackCopy is an ACK set aside by ackAside.
type ackCopy struct {
	buf  [ackScratchLen]byte
	n    int
	addr netip.Addr
	port uint16
	ip   engine.IPHeader
}

// New creates a device on the packet path in opts and starts its driver.
func New(opts Options) (*Device, error) {
	if opts.Conn == nil {
		return nil, errors.New("soft: Options.Conn is required")
	}
	if opts.Name == "" {
		opts.Name = "soft0"
	}
	if opts.SourcePort == 0 {
		opts.SourcePort = wire.RoCEv2Port
	}
	if opts.Spin == 0 {
		opts.Spin = 50 * time.Microsecond
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	cfg := opts.Engine
	switch {
	case cfg.AckDelay == 0:
		cfg.AckDelay = int64(DefaultAckDelay)
	case cfg.AckDelay < 0:
		cfg.AckDelay = 0
	}
	cfg.Local = opts.Conn.LocalAddr()
	cfg.SourcePort = opts.SourcePort
	cfg.PerPacketSourcePort = packetio.PerPacketSourcePort(opts.Conn)
	cfg.Clock = verbs.Now
	mtu, why, err := activeMTU(opts.ActiveMTU, cfg.Local, opts.Conn.MaxPacket())
	if err != nil {
		return nil, err
	}
	cfg.PortMTU = mtu.Bytes()
	var dev *Device // set below, before the driver starts
	cfg.OnAsyncEvent = func(ev engine.AsyncEvent) { dev.onAsyncEvent(ev) }
	cfg.OnGSI = func(now int64, mad []byte, from netip.Addr, port uint16) bool { return dev.onGSI(now, mad, from, port) }
	eng, err := engine.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	d := &Device{opts: opts, name: opts.Name, addr: cfg.Local, conn: opts.Conn, eng: eng, mtu: mtu, mtuWhy: why,
		start: time.Now(), done: make(chan struct{}), gone: make(chan struct{}), sb: standbyState{nudge: make(chan struct{}, 1)},
		first: make([]byte, max(opts.Conn.MaxPacket(), wire.MaxPMTU+64))}
	d.linkLocal = linkLocalGID(d.addr, d.GUID())
	d.gids, d.sgid = gidTable(d.addr, d.linkLocal)
	if fd, ok := opts.Conn.(packetio.FullDuplex); ok {
		d.duplex = fd.FullDuplex()
	}
	if dc, ok := opts.Conn.(rxDropCounter); ok {
		d.drops, d.seenDrops = dc, dc.RxDropped()
	}
	if g, ok := opts.Conn.(packetio.Gatherer); ok && !opts.NoGather {
		d.gather = g.Gathers()
	}
	if opts.Busy {
		d.ackScratch = make([]ackCopy, opts.Batch)
	}
	dev = d
	go d.run()
	return d, nil
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// GUID returns a node GUID derived from the address (EUI-64 style): its
// last three bytes.
func (d *Device) GUID() uint64 {
	a := d.addr.As16() // an IPv4 address's last bytes are its own
	return 0x02_00_5e_ff_fe_00_00_00 | uint64(a[13])<<16 | uint64(a[14])<<8 | uint64(a[15])
}

// Path returns Options.Path: what the packet path is.
func (d *Device) Path() string { return d.opts.Path }

// Addr returns the device's IPv4 or IPv6 address.
func (d *Device) Addr() netip.Addr { return d.addr }

// GID returns the GID of the device's address, the one it sends from: its
// IPv4-mapped GID, index 1 (GIDIndexIPv4), or its IPv6 GID (GIDIndex).
func (d *Device) GID() verbs.GID { return verbs.GIDFromAddr(d.addr) }

// Open returns a context on the device.
func (d *Device) Open() (verbs.Context, error) {
	if d.closed.Load() {
		return nil, verbs.ErrDestroyed
	}
	c := &Context{d: d, gone: make(chan struct{})}
	c.events = newEventQueue(c.gone, d.gone)
	return c, nil
}

// Stats returns the engine's counters.
func (d *Device) Stats() engine.Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.Stats()
}

// Close stops the driver, moves every QP to ERROR and completes its
// outstanding work with WR_FLUSH_ERR (so that CQs still being polled drain),
// and closes the packet path. Every later call on the device's contexts and
// objects fails with an error matching verbs.ErrDestroyed (but Poll, which
// still gives the flushed completions, and the Destroy, Dealloc, Dereg and
// Close methods, which return nil), and goroutines waiting in
// CompChannel.Wait or Context.GetAsyncEvent wake with that error. Closing
// twice returns nil.
func (d *Device) Close() error {
	if d.closed.Load() {
		return nil
	}
	d.closeAttached() // the connection manager, while the device still works
	if d.closed.Swap(true) {
		return nil
	}
	close(d.gone)
	d.conn.Wake()
	<-d.done
	d.io.Lock() // wait out a caller driving the packet path inline
	d.lockTx()
	d.mu.Lock()
	d.eng.Shutdown() // outstanding WRs complete with WR_FLUSH_ERR
	d.mu.Unlock()
	err := d.conn.Close()
	d.unlockTx()
	d.io.Unlock()
	return err
}

// errClosed is returned by calls on a closed device, errCtxClosed by calls
// on a closed context.
var (
	errClosed    = fmt.Errorf("soft: device closed: %w", verbs.ErrDestroyed)
	errCtxClosed = fmt.Errorf("soft: context closed: %w", verbs.ErrDestroyed)
)

func (d *Device) now() int64 { return int64(time.Since(d.start)) }

// ring tells the driver there is work (a posted WR, a modified QP).
func (d *Device) ring() {
	d.sb.rings.Add(1)
	d.doorbell.Add(1)
	d.wake()
}

// wake wakes the driver if it waits in the packet path (sleeping) or
// stands by (standBy).
func (d *Device) wake() {
	if d.sleeping.Load() {
		d.conn.Wake()
	}
	if d.sb.standby.Load() {
		select {
		case d.sb.nudge <- struct{}{}:
		default:
		}
	}
}

// run is the driver: one goroutine per device. It holds io while it uses
// the packet path, including while it blocks in Receive, and lets go of it
// between rounds, when a caller of PostSend or of Poll may drive the path
// inline (see kick and pollInline).
func (d *Device) run() {
	defer close(d.done)
	var seen, rings uint64
	lastBusy := time.Now()
	for !d.closed.Load() {
		seen, rings = d.doorbell.Load(), d.sb.rings.Load()
		d.io.Lock()
		if lossAt := d.eng.LossDeadline(); lossAt != 0 && d.now() >= lossAt && !d.inputBeforeTimers() {
			d.io.Unlock()
			return
		}
		d.lockTx()
		d.mu.Lock()
		now := d.now()
		d.eng.Tick(now)
		sent := d.flush(now)
		deadline := d.eng.NextDeadline()
		d.noteLoss(now)
		d.mu.Unlock()
		d.unlockTx()

		// Wait for packets: poll while recently busy, else block until the
		// next timer or a doorbell.
		var until time.Time
		busy := d.opts.Busy || sent > 0 || time.Since(lastBusy) < d.opts.Spin
		d.notePosts()
		polled := d.polled(now)
		if busy || polled {
			until = packetio.PollDeadline()
		} else {
			if deadline != 0 {
				until = d.start.Add(time.Duration(deadline))
			}
			d.sleepUntil.Store(deadline)
			d.sleeping.Store(true)
			if d.doorbell.Load() != seen {
				until = packetio.PollDeadline()
			}
		}
		pkts, err := d.conn.Receive(until)
		d.sleeping.Store(false)
		if err != nil {
			d.io.Unlock()
			if !d.closed.Load() {
				d.err = err
			}
			return
		}
		if len(pkts) > 0 || sent > 0 || d.doorbell.Load() != seen {
			lastBusy = time.Now()
		}
		if len(pkts) > 0 {
			d.input(pkts)
		}
		d.io.Unlock()
		if polled {
			d.standBy(rings)
		} else if busy {
			runtime.Gosched() // the application and the other drivers need the CPU too
		}
	}
}

// inputBeforeTimers takes in the packets waiting on the packet path, as
// the driver does when a loss timer is due (see
// engine.Engine.LossDeadline), before it runs the timers. Called with io
// held; false when the packet path failed (d.err).
func (d *Device) inputBeforeTimers() bool {
	pkts, err := d.conn.Receive(packetio.PollDeadline())
	if err != nil {
		if !d.closed.Load() {
			d.err = err
		}
		return false
	}
	if len(pkts) > 0 {
		d.input(pkts)
	}
	return true
}

// input hands received packets to the engine and sends what they call for
// (ACKs, READ responses) at once. Called with io held. A busy device leaves
// that to the next flush, its driver's next round or a post's kick,
// whichever comes first: the application then sees what arrived (a
// completion, a WRITE's data) without waiting for the ACK's send, and a
// reply it posts leaves ahead of the ACK (ackAside).
func (d *Device) input(pkts []packetio.Packet) {
	racesync.Acquire() // what the senders did before sending (see racesync)
	if !d.opts.Busy {
		d.lockTx()
		defer d.unlockTx()
	}
	d.mu.Lock()
	now := d.now()
	d.rxDrops(now)
	// Four packets in a row from one source with one length that the
	// four-lane pass takes (a burst of equal-sized small messages, a GRO
	// train of them) have their ICRCs computed together (DiffICRC4):
	// diff[at] is the engine's answer for packet i while left > 0.
	var diff [4]uint32
	left, at := 0, 0
	for i := range pkts {
		p := &pkts[i]
		if left == 0 && i+4 <= len(pkts) {
			q := pkts[i+1 : i+4 : i+4]
			n := len(p.Buf)
			if n >= wire.Lane4MinLen && n <= wire.Lane4MaxLen && len(q[0].Buf) == n && len(q[1].Buf) == n && len(q[2].Buf) == n &&
				q[0].Port == p.Port && q[1].Port == p.Port && q[2].Port == p.Port &&
				q[0].Addr == p.Addr && q[1].Addr == p.Addr && q[2].Addr == p.Addr &&
				d.eng.DiffICRC4(&[4][]byte{p.Buf, q[0].Buf, q[1].Buf, q[2].Buf}, p.Addr, p.Port, &diff) {
				left, at = 4, 0
			}
		}
		rx := engine.RxInfo{IPv4ID: p.IPv4ID, IPv4DF: p.IPv4DF, SeenIPv4: p.HasIPv4ID, Time: p.RxTime, GROSeg: p.GROSeg, CE: p.TOS&3 == 3, Dst: p.Local}
		if left > 0 {
			rx.ICRCDiff, rx.ICRCDiffKnown = diff[at], true
			at++
			left--
		}
		d.eng.InputPacket(now, p.Buf, p.Addr, p.Port, &rx)
		if i&(midFlush-1) == midFlush-1 && !d.opts.Busy && i+1 < len(pkts) {
			d.flush(now)
		}
	}
	if !d.opts.Busy {
		d.flush(now)
	}
	d.mu.Unlock()
}

// transmit hands pkts to the packet path, after telling the race
// detector that what the engine did before (the memory its responders
// wrote) happens before what receivers of the packets do (racesync).
func (d *Device) transmit(pkts []packetio.Packet) (int, error) {
	racesync.Release()
	return d.conn.Transmit(pkts)
}

// midFlush: a batch of received packets (up to 32 GRO buffers of 16 to 64
// packets each: a whole window) sends what its first midFlush packets
// called for (their ACK) before it takes in the rest, so that the
// requester's window reopens while the batch is processed.
const midFlush = 64

// rxDrops tells the engine when the packet path dropped received packets
// since the last look (engine.Engine.NoteRxDrops): the host cannot keep up,
// and under engine.CCECN the engine answers the packets that follow with
// CNPs, so that the senders slow down. Called with mu held; a load.
func (d *Device) rxDrops(now int64) {
	if d.drops == nil {
		return
	}
	if n := d.drops.RxDropped(); n != d.seenDrops {
		d.seenDrops = n
		d.eng.NoteRxDrops(now)
	}
}

// kick follows a post: when nobody is using the packet path, the caller's
// goroutine sends what the engine has to send at once, saving the hand-off
// to the driver; the doorbell rings either way (the driver then learns of
// timers the send armed).
func (d *Device) kick() { d.kickQP(nil, nil, false) }

// kickQP is kick after a post to qp, corked as Nagle's algorithm holds a
// TCP segment back: while a packet qp sent awaits the ACK it asked for
// (engine.QP.AckAwaited), that ACK is on its way (or the retransmission
// timer, which the driver's deadline covers), and whoever takes it in (the
// driver, or a Poll inline) sends what was posted meanwhile. Unlike
// Nagle's, the cork ends once three quarters of a GSO message (corkLimit)
// wait to be sent (QP.Unsent), and those leave at once, while the
// application may still be posting: a burst of posts leaves in a few full
// system calls, the first of them early enough for the peer to work on it
// while the rest are posted.
// perftest's write_bw, which posts bursts of 100 (its CQ moderation) into
// a window of 128: 1.15x the 64-byte message rate of one batch at the
// burst's end, 1.2x at 4 KiB; read_bw 64 B 1.55x. A post to an idle QP (a
// ping-pong, the first of a burst) leaves at once, and so does every post
// of a busy device, whose driver polls anyway.
//
// On a packetio.FullDuplex Conn the post sends while the driver waits in
// Receive, and wakes it only for a timer due before the driver would wake
// (earlier): a burst then costs the driver no wake-up at all.
//
// A post that the cork of hint still holds (corkHint.holds, which the
// caller asks first, in line) does not call kickQP at all, and rings no
// doorbell: the driver learns nothing from it that the ACK it waits for
// (or the retransmission timer it sleeps until) does not tell it, and a
// driver between rounds flushes what is corked in its next round
// regardless.
//
// Two things end a cork early. An awaited post (engine.QP.PostSendAwaited:
// the signaled WR whose completion the application waits for next) is
// never corked: with perftest's CQ moderation the application may post
// only 28 more (its window of 128 past the signaled WR of every 100)
// while that WR's round trip runs, and a cork that held it until
// corkLimit packets had queued up left the window idle for the rest of
// the round trip. And a Poll that finds its CQ empty while it has the
// packet path sends what is corked when that is at least pushMin packets
// (push): the application then waits, and the packets leave while the
// round trip it waits for runs, instead of after it, when the ACK that
// ends the cork comes in and the completion the Poll looks for waits for
// their send. Smaller corks stay, so that a program that polls after
// every post keeps most of its posts batched. 64-byte write_bw between two
// namespaces, 7 interleaved rounds: 157.5 against 149.9 MB/s with both,
// 148.5 with the awaited post alone.
func (d *Device) kickQP(qp *engine.QP, hint *corkHint, awaited bool) {
	d.sb.kicks.Add(1)
	if d.sb.standby.Load() {
		d.wake() // the driver takes the packet path back (postHold)
	}
	l := &d.io
	if d.duplex {
		l = &d.tx
	}
	if d.opts.NoInline || !l.TryLock() {
		d.ring()
		return
	}
	d.mu.Lock()
	corked := false
	if qp != nil && !awaited && !d.opts.Busy && qp.AckAwaited() {
		wrs, pkts := qp.Unsent()
		if corked = pkts < corkLimit; corked {
			if !d.corked.Load() {
				d.corked.Store(true)
			}
			if hint != nil {
				hint.set(d, qp, wrs, pkts, corkLimit)
			}
		}
	}
	var deadline int64
	if !corked {
		d.flushBatches(d.now(), 1)
		deadline = d.eng.NextDeadline()
	}
	d.mu.Unlock()
	l.Unlock()
	// A driver between rounds sends what is corked and learns of the
	// timers the send armed. A sleeping one is woken only for a timer due
	// before it would wake anyway (an ACK or its own timer wakes it for
	// the rest): a stream of posts sent inline then wakes it at most once.
	// The doorbell rings before sleeping is read, as in ring.
	d.doorbell.Add(1)
	if !corked && d.earlier(deadline) {
		d.conn.Wake()
	}
}

// corkHint lets the posts that follow a corked one skip kickQP's locks:
// the cork holds for as long as nothing was flushed since it was decided
// (Device.flushes unchanged: a flush follows every input, so the packets
// in flight then are still unacknowledged) and fewer work requests than
// were room for have been posted since, which the send queue's tail
// (engine.QP.Posted) counts. 5% of a 64-byte write_bw client's time went
// to taking the locks for each corked post; holds takes none, and no
// locked instruction either (loads only: a count of its own would be one
// more atomic add a post).
type corkHint struct {
	gen   atomic.Uint64 // Device.flushes when the cork was decided, plus one; 0: none
	limit atomic.Uint64 // QP.Posted below which posts stay corked
}

// set records a cork decided on qp with wrs work requests of pkts packets
// waiting, under limit. Called with mu held, after the post that decided it.
func (h *corkHint) set(d *Device, qp *engine.QP, wrs, pkts, limit int) {
	room := limit // an empty queue: a packet a WR
	if wrs > 0 {
		room = (limit - pkts) * wrs / pkts
	}
	h.limit.Store(qp.Posted() + uint64(max(room, 0)))
	h.gen.Store(d.flushes.Load() + 1) // after limit: a post that sees this gen sees its limit
}

// holds reports whether a post to qp (already in its send queue) stays
// corked without a look at the engine.
func (h *corkHint) holds(d *Device, qp *engine.QP) bool {
	g := h.gen.Load()
	return g != 0 && g == d.flushes.Load()+1 && qp.Posted() < h.limit.Load()
}

// earlier reports whether the engine's deadline (0: none) is before the
// one a sleeping driver sleeps until: the driver must then be woken to wait
// for it.
func (d *Device) earlier(deadline int64) bool {
	if deadline == 0 || !d.sleeping.Load() {
		return false
	}
	until := d.sleepUntil.Load()
	return until == 0 || deadline < until
}

// lockTx takes the send side of a duplex Conn (tx), with io held; unlockTx
// lets it go. Without a duplex Conn, io covers both sides.
func (d *Device) lockTx() {
	if d.duplex {
		d.tx.Lock()
	}
}

func (d *Device) unlockTx() {
	if d.duplex {
		d.tx.Unlock()
	}
}

// pollInline follows a Poll that found its CQ empty: when nobody is using
// the packet path, the caller's goroutine receives what has arrived and
// hands it to the engine, which may complete the work it polls for.
// Otherwise it wakes a sleeping driver. It reports whether packets came in.
func (d *Device) pollInline() bool {
	if !d.opts.NoInline && !d.opts.Busy {
		d.sb.pollAt.Store(d.now())
	}
	if d.opts.NoInline || !d.io.TryLock() {
		if d.sleeping.Load() {
			d.conn.Wake()
			// The wake-up is a timer (a read deadline) on this goroutine's
			// processor, which a loop that never yields keeps from the
			// scheduler: BenchmarkSendRoundTripTight 32 against 41 µs a
			// round trip (medians of 6), its yielding twin unchanged.
			runtime.Gosched()
		}
		return false
	}
	defer d.io.Unlock()
	if d.closed.Load() {
		return false
	}
	if d.corked.Load() {
		d.push()
	}
	pkts, err := d.conn.Receive(packetio.PollDeadline())
	if err != nil {
		return false
	}
	if len(pkts) > 0 {
		d.input(pkts)
		d.doorbell.Add(1) // the driver recomputes its deadline: the input may have armed timers
	}
	d.runDue(len(pkts) > 0)
	return len(pkts) > 0
}

// push follows an empty Poll while posts may be corked (kickQP): it sends
// them if they are pushMin packets or more. It takes the send side (tx on
// a duplex Conn) and mu: called with io held, or on a duplex Conn.
func (d *Device) push() {
	d.lockTx()
	d.mu.Lock()
	if d.eng.PendingOutput(pushMin) >= pushMin {
		d.flush(d.now())
		d.sb.kicks.Add(1) // posts the cork held: the application posts (postHold)
	}
	d.mu.Unlock()
	d.unlockTx()
}

// flush sends everything the engine has to send now. Called with io and mu
// held.
func (d *Device) flush(now int64) int { return d.flushBatches(now, -1) }

// flushBatches sends what the engine has to send now, in at most max
// batches (no limit when batches < 0). A busy device sets a flush's ACKs
// aside and sends them last, in a Transmit of their own (ackAside). The
// first packet of each batch is built in the device's own buffer (first)
// and copied into the batch: a flush that finds nothing to send, as most
// rounds of a busy driver do, lends no batch (lending 64 packets took 150
// ns). Called with io and mu held.
func (d *Device) flushBatches(now int64, batches int) int {
	d.flushes.Add(1) // ends the corks decided before (corkHint)
	if d.corked.Load() {
		d.corked.Store(false)
	}
	total, aside := 0, 0
	for ; batches != 0; batches-- {
		n, ext, to, sport, ok := d.next(now, d.first, &aside)
		if !ok {
			break
		}
		// Borrow as many packets as the engine has to send (PendingOutput,
		// an estimate that is rarely short), not a whole batch: lending
		// writes each packet's header, 8.7 KB for 64 (170 ns of a
		// ping-pong's 1.1 µs turnaround went to lending 64 for one reply).
		want := 1 + d.eng.PendingOutput(d.opts.Batch-1)
		batch := d.conn.TxBatch(want)
		if len(batch) == 0 {
			break // closed
		}
		batch[0].Buf, batch[0].Addr, batch[0].Port = append(batch[0].Buf[:0], d.first[:n]...), to, sport
		setIP(&batch[0], d.eng.OutputIP())
		if ext != nil {
			batch[0].Ext, batch[0].ExtAt = ext, engine.GatherSplit(d.first, n)
		}
		k := 1
		// The rest are built in the batch's buffers, each its own, and
		// sealed four at a time (BeginOutputBatch) before the Transmit.
		// The ACKs next copies aside are sealed at once (shorter than
		// wire.Lane4MinLen).
		d.eng.BeginOutputBatch()
		for k < len(batch) {
			b := batch[k].Buf[:cap(batch[k].Buf)]
			n, ext, to, sport, ok := d.next(now, b, &aside)
			if !ok {
				break
			}
			batch[k].Buf, batch[k].Addr, batch[k].Port = b[:n], to, sport
			setIP(&batch[k], d.eng.OutputIP())
			if ext != nil {
				batch[k].Ext, batch[k].ExtAt = ext, engine.GatherSplit(b, n)
			}
			k++
		}
		d.eng.EndOutputBatch()
		if _, err := d.transmit(batch[:k]); err != nil {
			d.transmitFailed(batch[:k], err)
		}
		total += k
		if k < len(batch) {
			break
		}
		if len(batch) < d.opts.Batch {
			batches++ // a short estimate filled: not a batch of its own
		}
	}
	return total + d.sendAside(aside)
}

// next writes the engine's next packet to send into b and returns its
// length, the payload it left where it lies (gather: see
// engine.Engine.OutputGather; nil when b holds the whole packet),
// destination and source port (0 for the Conn's own), setting a busy
// device's ACKs aside on the way (ackAside, counted in aside); ok is false
// when there is nothing more to send now.
func (d *Device) next(now int64, b []byte, aside *int) (n int, ext []byte, to netip.Addr, sport uint16, ok bool) {
	for {
		if d.gather {
			n, ext, to, sport, ok = d.eng.OutputGather(now, b)
		} else {
			n, to, sport, ok = d.eng.OutputFrom(now, b)
		}
		if !ok {
			return 0, nil, netip.Addr{}, 0, false
		}
		if sport == d.opts.SourcePort {
			sport = 0 // the Conn's own port
		}
		if ext != nil || !d.ackAside(*aside, b[:n], to, sport) {
			return n, ext, to, sport, true
		}
		d.ackScratch[*aside].ip = d.eng.OutputIP()
		*aside++
	}
}

// ackScratchLen bounds the ACKs ackAside sets aside: an RC ACK or NAK is a
// BTH, an AETH and the ICRC (20 bytes); anything longer is sent in its place.
const ackScratchLen = 32

// ackAside copies b, the packet for to and port just output, aside as the
// flush's i-th ACK when the device is busy, b is an RC ACK or NAK and there is
// room, and reports whether it did. A busy device sends a flush's ACKs after
// its other packets in a sendmmsg of their own (sendAside): in a ping-pong
// the reply posted after a message leaves with the ACK the responder held
// back for that message (Engine.AckDelay), and on its own the reply reaches
// the peer sooner, the ACK's kernel path no longer ahead of the poll that
// finds it (send_lat 64 B between two namespaces: 9.2 to 7.9 µs). ACKs and
// requests belong to different PSN streams, so their relative order carries
// no meaning. Called with io and mu held, allocation-free.
func (d *Device) ackAside(i int, b []byte, to netip.Addr, port uint16) bool {
	if i >= len(d.ackScratch) || len(b) == 0 || len(b) > ackScratchLen || wire.Opcode(b[0]) != wire.RCAcknowledge {
		return false
	}
	a := &d.ackScratch[i]
	a.n = copy(a.buf[:], b)
	a.addr, a.port = to, port
	return true
}

// sendAside transmits the first n ACKs ackAside set aside and returns how
// many packets it gave to Transmit. Called with io and mu held.
func (d *Device) sendAside(n int) int {
	sent := 0
	for sent < n {
		batch := d.conn.TxBatch(n - sent)
		if len(batch) == 0 {
			return sent // closed
		}
		for j := range batch {
			a := &d.ackScratch[sent+j]
			batch[j].Buf = append(batch[j].Buf[:0], a.buf[:a.n]...)
			batch[j].Addr, batch[j].Port = a.addr, a.port
			setIP(&batch[j], a.ip)
		}
		if _, err := d.transmit(batch); err != nil {
			d.transmitFailed(batch, err)
		}
		sent += len(batch)
	}
	return sent
}
