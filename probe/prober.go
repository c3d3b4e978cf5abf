package probe

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Validity limits of a completed probe, rpingmesh's.
const (
	maxNetworkRTT = 10 * time.Second
	maxHostDelay  = time.Second
)

// Reasons of OutcomeError results.
const (
	ReasonSendCompletion = "send_completion" // the probe's send completed with an error
	ReasonZeroTimestamp  = "zero_timestamp"  // a timestamp was missing
	ReasonInvalidRTT     = "invalid_rtt"     // network RTT outside (0, 10 s]
	ReasonInvalidDelay   = "invalid_delay"   // a host delay outside [0, 1 s]
	ReasonClosed         = "closed"          // the prober closed with the probe in flight
)

// ProberOptions configures a Prober.
type ProberOptions struct {
	// Timeout is how long a probe waits for both ACKs before it is lost
	// (default 1 s).
	Timeout time.Duration
	// MaxInFlight bounds the probes waiting for their ACKs (default 4096);
	// Probe fails with ErrTooManyInFlight beyond it. It also bounds the
	// memory of probes lost recently, whose late ACKs are recognised.
	MaxInFlight int
	// OnResult is called from the prober's goroutine with every outcome:
	// OutcomeOK, OutcomeLost, OutcomeError once per probe, and OutcomeLate
	// at most once more for a lost probe whose ACK came after all. It must
	// not block (it may call Probe). nil: results are only counted.
	OnResult func(Result)
	// BeforePoll is a diagnostic hook called before each poll of the CQ,
	// from the prober's goroutine (tests stall here). nil: none.
	BeforePoll func()
	// TrafficClass, when set, gives the IP traffic class (the TOS byte:
	// DSCP << 2; the packet path adds ECN's ECT(0)) of the probes of a
	// class (Probe's class argument), so that probes travel in the
	// (lossless) class they measure. It is called for every probe from
	// Probe's caller and must not block. nil: traffic class 0.
	TrafficClass func(class string) uint8
	// GIDIndex is the source GID index of the probes (default 0: the
	// port's first IPv4-mapped GID).
	GIDIndex int
	// Depth is the receive depth of the prober's QP: the ACKs that can
	// arrive between two polls, two per probe in flight (default
	// 2 x MaxInFlight, at most 1024; each a path MTU and the GRH, so that
	// no UD message overflows it). ACKs beyond it are dropped by the
	// device and their probes lost.
	Depth int
}

func (o ProberOptions) withDefaults() ProberOptions {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 4096
	}
	if o.Depth <= 0 {
		o.Depth = min(2*o.MaxInFlight, 1024)
	}
	o.Depth = min(o.Depth, 8192)
	return o
}

// ProberStats counts what a Prober did.
type ProberStats struct {
	// Sent is the number of probes posted; Completed, Lost and Errors how
	// they ended (OutcomeOK, OutcomeLost, OutcomeError); Late the lost
	// probes whose ACK came after the timeout.
	Sent, Completed, Lost, Late, Errors uint64
	// Invalid counts received payloads dropped as no v1 ACK (too short,
	// another version, a probe, malformed) or without a source GID.
	Invalid uint64
	// Mismatched counts ACKs whose sequence number is that of a probe in
	// flight (or lost) but whose source GID, source QPN or echoed T1 is
	// not the probe's: ignored.
	Mismatched uint64
	// Unmatched counts ACKs for no probe in flight or recently lost, and
	// Duplicates second copies of an ACK.
	Unmatched, Duplicates uint64
	// RecvErrors counts receive completions with an error status.
	RecvErrors uint64
	// InFlight is the number of probes waiting for their ACKs now; AHs the
	// address handles cached (at most 1024).
	InFlight, AHs int
}

// Prober sends probes from one UD queue pair and matches the ACKs that
// come back. Probe may be called from any goroutine; completions are
// processed on the prober's own goroutine, which reports through
// ProberOptions.OnResult.
type Prober struct {
	e       *endpoint
	o       ProberOptions
	timeout int64
	epoch   uint64
	cancel  context.CancelFunc
	done    chan struct{}
	once    sync.Once

	mu      sync.Mutex // everything below
	closed  bool
	counter uint32
	entries []entry
	freeE   []int32
	index   map[uint64]int32 // seq -> entries index
	head    int32            // oldest probe in flight (send order), -1 none
	tail    int32
	slots   []sendSlot
	freeS   []int32
	lost    []lostProbe // ring of recently lost probes
	lostPos int
	lostIdx map[uint64]int32 // seq -> lost index
	out     []Result         // results to deliver after unlocking
	stats   ProberStats
}

// entry is a probe in flight.
type entry struct {
	seq                    uint64
	peer                   Peer
	class                  string
	label                  uint32
	t1, t2, t3, t4, t5, t6 int64
	deadline               int64
	acked1, acked2         bool // the first and second ACKs came
	respHW                 bool
	used                   bool
	prev, next             int32
}

// sendSlot is a posted probe send: its entry and the AH it uses.
type sendSlot struct {
	entry int32
	seq   uint64
	ah    *ahEntry
}

// lostProbe is a probe reported lost, kept to recognise its late ACK.
type lostProbe struct {
	seq   uint64
	peer  Peer
	class string
	label uint32
	t1    int64
	valid bool
}

// NewProber creates the prober's queue pair on vctx and starts its
// goroutine. vctx stays the caller's: Close does not close it.
func NewProber(vctx verbs.Context, o ProberOptions) (*Prober, error) {
	o = o.withDefaults()
	sendDepth := min(o.MaxInFlight, maxSendWR)
	e, err := newEndpoint(vctx, 1, o.Depth, sendDepth, o.GIDIndex)
	if err != nil {
		return nil, err
	}
	sendDepth = e.qps[0].sendDepth
	p := &Prober{e: e, o: o, timeout: int64(o.Timeout), epoch: uint64(rand.Uint32()), done: make(chan struct{}),
		entries: make([]entry, o.MaxInFlight), freeE: make([]int32, o.MaxInFlight),
		index: make(map[uint64]int32, o.MaxInFlight), head: -1, tail: -1,
		slots: make([]sendSlot, sendDepth), freeS: make([]int32, sendDepth),
		lost: make([]lostProbe, o.MaxInFlight), lostIdx: make(map[uint64]int32, o.MaxInFlight),
		out: make([]Result, 0, 64)}
	for i := range p.freeE {
		p.freeE[i] = int32(len(p.freeE) - 1 - i)
	}
	for i := range p.freeS {
		p.freeS[i] = int32(len(p.freeS) - 1 - i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.run(ctx)
	return p, nil
}

// GID returns the GID the prober sends from.
func (p *Prober) GID() verbs.GID { return p.e.gid }

// QPN returns the number of the prober's queue pair.
func (p *Prober) QPN() uint32 { return p.e.qps[0].qp.Num() }

// Timestamps says which clock the prober's T2 and T5 come from.
func (p *Prober) Timestamps() Timestamps {
	if p.e.hw {
		return TimestampsHardware
	}
	return TimestampsSoftware
}

// Stats returns the prober's counters.
func (p *Prober) Stats() ProberStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.InFlight = len(p.index)
	if p.e.ahs.m != nil {
		s.AHs = p.e.ahs.len()
	}
	return s
}

// Probe sends one probe to peer's QP with the flow label flowLabel (its low
// 20 bits; it sets the UDP source port, hence the ECMP path) and returns
// without waiting: the outcome comes to OnResult, tagged with class. It
// fails, reporting nothing, when the prober is closed (ErrClosed), the
// peer has no GID or QPN (ErrBadPeer), MaxInFlight probes are in flight
// (ErrTooManyInFlight), the send queue is full (ErrBusy), or the device
// refuses the address handle or the post.
func (p *Prober) Probe(peer Peer, flowLabel uint32, class string) error {
	_, err := p.ProbeSeq(peer, flowLabel, class)
	return err
}

// ProbeSeq is Probe, returning the probe's sequence number (Result.Seq of
// its outcomes).
func (p *Prober) ProbeSeq(peer Peer, flowLabel uint32, class string) (uint64, error) {
	if peer.QPN == 0 || peer.GID == (verbs.GID{}) {
		return 0, ErrBadPeer
	}
	if peer.QKey == 0 {
		peer.QKey = QKey
	}
	flowLabel &= 0xFFFFF
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return 0, ErrClosed
	case len(p.freeE) == 0:
		return 0, ErrTooManyInFlight
	case len(p.freeS) == 0:
		return 0, ErrBusy
	}
	var tc uint8
	if p.o.TrafficClass != nil {
		tc = p.o.TrafficClass(class)
	}
	ah, err := p.e.ahs.get(ahKey{gid: peer.GID, label: flowLabel, tc: tc})
	if err != nil {
		return 0, err
	}
	idx := p.freeE[len(p.freeE)-1]
	si := p.freeS[len(p.freeS)-1]
	seq := p.epoch<<32 | uint64(p.counter)
	m := Message{Version: Version1, Type: TypeProbe, AckType: AckNone, Seq: seq}
	if p.e.hw {
		m.Flags = FlagHardwareTimestamps
	}
	buf := p.e.sendSlot(0, int(si))
	t1 := verbs.Now()
	m.T1 = uint64(t1)
	m.Put(buf)
	if err := p.e.postSend(0, int(si), ah.ah, peer.QPN, peer.QKey); err != nil {
		p.e.ahs.put(ah)
		return 0, err
	}
	p.counter++
	p.freeE = p.freeE[:len(p.freeE)-1]
	p.freeS = p.freeS[:len(p.freeS)-1]
	p.slots[si] = sendSlot{entry: idx, seq: seq, ah: ah}
	p.entries[idx] = entry{seq: seq, peer: peer, class: class, label: flowLabel, t1: t1, deadline: t1 + p.timeout,
		used: true, prev: p.tail, next: -1}
	if p.tail >= 0 {
		p.entries[p.tail].next = idx
	} else {
		p.head = idx
	}
	p.tail = idx
	p.index[seq] = idx
	p.stats.Sent++
	return seq, nil
}

// Close stops the prober (probes still in flight are reported as
// OutcomeError with ReasonClosed) and destroys its queue pair, CQ, memory
// and address handles. Closing again returns ErrClosed.
func (p *Prober) Close() error {
	err := ErrClosed
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		<-p.done
		p.mu.Lock()
		err = p.e.close()
		p.mu.Unlock()
	})
	return err
}

func (p *Prober) run(ctx context.Context) {
	defer close(p.done)
	wcs := make([]verbs.WC, 32)
	var idle idler
	for {
		if p.o.BeforePoll != nil {
			p.o.BeforePoll()
		}
		if n := p.e.cq.Poll(wcs); n > 0 {
			idle.busy()
			p.process(wcs[:n])
			continue
		}
		p.process(nil) // timeouts
		if ctx.Err() != nil {
			p.shutdown()
			return
		}
		if idle.spin() {
			continue
		}
		if !p.e.arm() {
			continue
		}
		if n := p.e.cq.Poll(wcs); n > 0 {
			idle.busy()
			p.process(wcs[:n])
			continue
		}
		p.e.wait(ctx, p.nextDeadline())
	}
}

// nextDeadline is when the oldest probe in flight times out, or a timeout
// from now when none is (a probe sent later times out later).
func (p *Prober) nextDeadline() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := verbs.Now() + p.timeout
	if p.head >= 0 {
		d = p.entries[p.head].deadline
	}
	return time.Now().Add(time.Duration(d - verbs.Now()))
}

// process handles completions and timeouts, then delivers the results.
func (p *Prober) process(wcs []verbs.WC) {
	p.mu.Lock()
	for i := range wcs {
		p.handle(&wcs[i])
	}
	p.expire(verbs.Now())
	out := p.out
	p.out = p.out[:0]
	p.mu.Unlock()
	p.deliver(out)
}

func (p *Prober) deliver(out []Result) {
	if p.o.OnResult == nil {
		return
	}
	for i := range out {
		p.o.OnResult(out[i])
	}
}

// shutdown reports every probe still in flight as closed.
func (p *Prober) shutdown() {
	p.mu.Lock()
	p.closed = true
	for p.head >= 0 {
		idx := p.head
		r := p.result(idx, OutcomeError)
		r.Reason = ReasonClosed
		p.stats.Errors++
		p.remove(idx)
		p.out = append(p.out, r)
	}
	out := p.out
	p.out = nil
	p.mu.Unlock()
	p.deliver(out)
}

// handle processes one completion (p.mu held).
func (p *Prober) handle(wc *verbs.WC) {
	if wc.WRID&wrRecv == 0 {
		p.sent(wc)
		return
	}
	s := int(wc.WRID & slotMask)
	if s >= p.e.qps[0].depth {
		return
	}
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCWRFlushErr {
			p.stats.RecvErrors++
			p.e.postRecv(0, s)
		}
		return
	}
	ts := wc.Timestamp
	if ts == 0 {
		ts = verbs.Now()
	}
	buf := p.e.recvSlot(0, s)
	n := int(wc.ByteLen)
	if n < grhLen || n > len(buf) {
		p.stats.Invalid++
		p.e.postRecv(0, s)
		return
	}
	m, err := ParseMessage(buf[grhLen:n])
	gid, ok := sourceGID(buf[:grhLen])
	p.e.postRecv(0, s)
	if err != nil || m.Type != TypeAck || !ok {
		p.stats.Invalid++
		return
	}
	p.ack(&m, gid, wc.SrcQP, ts)
}

// ack matches an ACK to its probe by sequence number, source GID, source
// QPN and echoed T1.
func (p *Prober) ack(m *Message, gid verbs.GID, srcQP uint32, ts int64) {
	idx, ok := p.index[m.Seq]
	if !ok {
		li, ok := p.lostIdx[m.Seq]
		if !ok {
			p.stats.Unmatched++
			return
		}
		l := &p.lost[li]
		if l.peer.GID != gid || l.peer.QPN != srcQP || uint64(l.t1) != m.T1 {
			p.stats.Mismatched++
			return
		}
		r := Result{Peer: l.peer, Class: l.class, Seq: l.seq, FlowLabel: l.label, SrcPort: SourcePort(l.label),
			ResponderQPN: l.peer.QPN, Sent: time.Unix(0, l.t1), T1: l.t1, Outcome: OutcomeLate, Timestamps: p.kind(m.Flags)}
		if m.AckType == AckFirst {
			r.T5 = ts
		}
		r.T3 = int64(m.T3)
		r.T4 = int64(m.T4)
		delete(p.lostIdx, m.Seq)
		l.valid = false
		p.stats.Late++
		p.out = append(p.out, r)
		return
	}
	e := &p.entries[idx]
	if e.peer.GID != gid || e.peer.QPN != srcQP || uint64(e.t1) != m.T1 {
		p.stats.Mismatched++
		return
	}
	switch m.AckType {
	case AckFirst:
		if e.acked1 {
			p.stats.Duplicates++
			return
		}
		e.acked1 = true
		e.t5, e.t6 = ts, verbs.Now()
		e.t3 = int64(m.T3)
		e.respHW = m.Flags&FlagHardwareTimestamps != 0
	case AckSecond:
		if e.acked2 {
			p.stats.Duplicates++
			return
		}
		e.acked2 = true
		e.t4 = int64(m.T4)
		if !e.acked1 {
			e.t3 = int64(m.T3)
		}
	}
	p.complete(idx)
}

// sent handles a probe's send completion: T2.
func (p *Prober) sent(wc *verbs.WC) {
	si := int(wc.WRID & slotMask)
	if si >= len(p.slots) || p.slots[si].ah == nil {
		return
	}
	sl := p.slots[si]
	p.slots[si] = sendSlot{}
	p.freeS = append(p.freeS, int32(si))
	if p.e.ahs.m != nil {
		p.e.ahs.put(sl.ah)
	}
	e := &p.entries[sl.entry]
	if !e.used || e.seq != sl.seq {
		return // lost already
	}
	if wc.Status != verbs.WCSuccess {
		r := p.result(sl.entry, OutcomeError)
		r.Reason = ReasonSendCompletion
		p.stats.Errors++
		p.remove(sl.entry)
		p.out = append(p.out, r)
		return
	}
	// Without a completion timestamp, T2 is T1, read just before
	// PostSend: the probe cannot leave earlier, whereas the post may
	// return (and its completion be polled, perhaps with the ACK's) after
	// the ACK came back.
	e.t2 = wc.Timestamp
	if e.t2 == 0 {
		e.t2 = e.t1
	}
	p.complete(sl.entry)
}

// kind is the timestamp kind of a result: hardware when both the
// prober's and the responder's completions are stamped by their devices.
func (p *Prober) kind(respFlags uint8) Timestamps {
	if p.e.hw && respFlags&FlagHardwareTimestamps != 0 {
		return TimestampsHardware
	}
	return TimestampsSoftware
}

// complete finishes probe idx when its send completed and both ACKs came.
func (p *Prober) complete(idx int32) {
	e := &p.entries[idx]
	if e.t2 == 0 || !e.acked1 || !e.acked2 {
		return
	}
	r := p.result(idx, OutcomeOK)
	r.NetworkRTT = time.Duration((e.t5 - e.t2) - (e.t4 - e.t3))
	r.ResponderDelay = time.Duration(e.t4 - e.t3)
	r.ProberDelay = time.Duration((e.t6 - e.t1) - (e.t5 - e.t2))
	switch {
	case e.t1 == 0 || e.t2 == 0 || e.t3 == 0 || e.t4 == 0 || e.t5 == 0 || e.t6 == 0:
		r.Outcome, r.Reason = OutcomeError, ReasonZeroTimestamp
	case r.NetworkRTT <= 0 || r.NetworkRTT > maxNetworkRTT:
		r.Outcome, r.Reason = OutcomeError, ReasonInvalidRTT
	case r.ResponderDelay < 0 || r.ResponderDelay > maxHostDelay || r.ProberDelay < 0 || r.ProberDelay > maxHostDelay:
		r.Outcome, r.Reason = OutcomeError, ReasonInvalidDelay
	}
	if r.Outcome == OutcomeOK {
		p.stats.Completed++
	} else {
		p.stats.Errors++
	}
	p.remove(idx)
	p.out = append(p.out, r)
}

// result returns the Result of probe idx as it stands.
func (p *Prober) result(idx int32, o Outcome) Result {
	e := &p.entries[idx]
	r := Result{Peer: e.peer, Class: e.class, Seq: e.seq, FlowLabel: e.label, SrcPort: SourcePort(e.label),
		ResponderQPN: e.peer.QPN, Sent: time.Unix(0, e.t1), T1: e.t1, T2: e.t2, T3: e.t3, T4: e.t4, T5: e.t5, T6: e.t6,
		Outcome: o, Timestamps: p.Timestamps()} // the prober's own until an ACK tells the responder's
	if e.acked1 {
		var f uint8
		if e.respHW {
			f = FlagHardwareTimestamps
		}
		r.Timestamps = p.kind(f)
	}
	return r
}

// expire reports the probes whose timeout passed as lost.
func (p *Prober) expire(now int64) {
	for p.head >= 0 && p.entries[p.head].deadline <= now {
		idx := p.head
		e := &p.entries[idx]
		p.out = append(p.out, p.result(idx, OutcomeLost))
		p.stats.Lost++
		l := &p.lost[p.lostPos]
		if l.valid && p.lostIdx[l.seq] == int32(p.lostPos) {
			delete(p.lostIdx, l.seq)
		}
		*l = lostProbe{seq: e.seq, peer: e.peer, class: e.class, label: e.label, t1: e.t1, valid: true}
		p.lostIdx[e.seq] = int32(p.lostPos)
		p.lostPos = (p.lostPos + 1) % len(p.lost)
		p.remove(idx)
	}
}

// remove takes probe idx out of the table.
func (p *Prober) remove(idx int32) {
	e := &p.entries[idx]
	if e.prev >= 0 {
		p.entries[e.prev].next = e.next
	} else {
		p.head = e.next
	}
	if e.next >= 0 {
		p.entries[e.next].prev = e.prev
	} else {
		p.tail = e.prev
	}
	delete(p.index, e.seq)
	*e = entry{}
	p.freeE = append(p.freeE, idx)
}
