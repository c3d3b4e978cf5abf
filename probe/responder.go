package probe

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// ResponderOptions configures a Responder.
type ResponderOptions struct {
	// QPs is how many UD queue pairs answer (default 1): several for
	// fabrics that hash on the destination QPN too.
	QPs int
	// Depth is the receive depth of each QP (default 256), and the number
	// of probes each QP answers at once (its ACK send slots).
	Depth int
	// GIDIndex is the source GID index of the ACKs (default 0: the port's
	// first IPv4-mapped GID, index 1 on a soft device and on
	// rdma_rxe).
	GIDIndex int
	// TrafficClass is the IP traffic class (TOS byte, DSCP << 2) of the
	// ACKs to probes whose own traffic class the device does not report
	// (software devices report 0); the ACKs of a probe whose traffic class
	// is known carry its DSCP, so that they return in the probe's class.
	TrafficClass uint8
	// BeforeACK1 is a diagnostic hook called before each first ACK is
	// posted, from the responder's goroutine (tests stall here). nil: none.
	BeforeACK1 func()
}

func (o ResponderOptions) withDefaults() ResponderOptions {
	if o.QPs <= 0 {
		o.QPs = 1
	}
	if o.Depth <= 0 {
		o.Depth = 256
	}
	o.Depth = min(o.Depth, maxSendWR)
	return o
}

// ResponderStats counts what a Responder did.
type ResponderStats struct {
	// Received is the number of receive completions that carried a
	// payload (probes, and whatever else arrived).
	Received uint64
	// Answered is the number of probes whose first ACK was posted,
	// Completed those whose second ACK was sent too.
	Answered, Completed uint64
	// Invalid counts payloads dropped as no v1 probe (too short, another
	// version, an ACK, malformed), or without a source GID.
	Invalid uint64
	// Dropped counts probes not answered: no ACK send slot free, no
	// address handle, or a post that failed.
	Dropped uint64
	// RecvErrors and SendErrors count completions with an error status.
	RecvErrors, SendErrors uint64
	// AHs is the number of address handles cached (at most 1024): one
	// per prober GID, QP and responder QP.
	AHs int
}

// Responder answers probes on its UD queue pairs: a first ACK at once
// carrying the probe's T1 and its receive time T3, and a second one with T4,
// the first ACK's send completion. It runs its own goroutine until Close.
type Responder struct {
	e      *endpoint
	o      ResponderOptions
	slots  [][]ackSlot // per QP, per send slot
	free   [][]int32   // per QP: free send slots
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	received, answered, completed, invalid, dropped, recvErrs, sendErrs atomic.Uint64
	ahs                                                                 atomic.Int64
}

// ackSlot is one ACK in flight: the probe it answers and its destination.
type ackSlot struct {
	ah      *ahEntry
	qpn     uint32
	m       Message
	posted  int64 // read just before the first ACK's PostSend
	pending bool
}

// NewResponder creates the responder's queue pairs on vctx and starts
// answering. vctx stays the caller's: Close does not close it.
func NewResponder(vctx verbs.Context, o ResponderOptions) (*Responder, error) {
	o = o.withDefaults()
	e, err := newEndpoint(vctx, o.QPs, o.Depth, o.Depth, o.GIDIndex)
	if err != nil {
		return nil, err
	}
	r := &Responder{e: e, o: o, done: make(chan struct{})}
	for _, q := range e.qps {
		r.slots = append(r.slots, make([]ackSlot, q.sendDepth))
		f := make([]int32, q.sendDepth)
		for i := range f {
			f[i] = int32(len(f) - 1 - i)
		}
		r.free = append(r.free, f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.run(ctx)
	return r, nil
}

// QPNs returns the numbers of the responder's queue pairs.
func (r *Responder) QPNs() []uint32 {
	out := make([]uint32, len(r.e.qps))
	for i, q := range r.e.qps {
		out[i] = q.qp.Num()
	}
	return out
}

// GID returns the GID the responder answers from.
func (r *Responder) GID() verbs.GID { return r.e.gid }

// Timestamps says which clock the responder's T3 and T4 come from.
func (r *Responder) Timestamps() Timestamps {
	if r.e.hw {
		return TimestampsHardware
	}
	return TimestampsSoftware
}

// Stats returns the responder's counters.
func (r *Responder) Stats() ResponderStats {
	return ResponderStats{Received: r.received.Load(), Answered: r.answered.Load(), Completed: r.completed.Load(),
		Invalid: r.invalid.Load(), Dropped: r.dropped.Load(), RecvErrors: r.recvErrs.Load(), SendErrors: r.sendErrs.Load(),
		AHs: int(r.ahs.Load())}
}

// Close stops the responder and destroys its queue pairs, CQ, memory and
// address handles. Closing again returns ErrClosed.
func (r *Responder) Close() error {
	err := ErrClosed
	r.once.Do(func() {
		r.cancel()
		<-r.done
		err = r.e.close()
	})
	return err
}

func (r *Responder) run(ctx context.Context) {
	defer close(r.done)
	wcs := make([]verbs.WC, 32)
	var idle idler
	for {
		if n := r.e.cq.Poll(wcs); n > 0 {
			idle.busy()
			for i := range wcs[:n] {
				r.handle(&wcs[i])
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if idle.spin() {
			continue
		}
		if !r.e.arm() {
			continue
		}
		if n := r.e.cq.Poll(wcs); n > 0 {
			idle.busy()
			for i := range wcs[:n] {
				r.handle(&wcs[i])
			}
			continue
		}
		r.e.wait(ctx, time.Time{})
		idle.busy()
	}
}

// handle processes one completion.
func (r *Responder) handle(wc *verbs.WC) {
	qi, s := int(wc.WRID>>qpShift&0x7FFF_FFFF), int(wc.WRID&slotMask)
	if qi >= len(r.e.qps) {
		return
	}
	if wc.WRID&wrRecv != 0 {
		r.receive(qi, s, wc)
		return
	}
	r.sent(qi, s, wc)
}

// receive answers a probe in receive slot s of QP qi and posts the slot
// again.
func (r *Responder) receive(qi, s int, wc *verbs.WC) {
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCWRFlushErr {
			r.recvErrs.Add(1)
			r.e.postRecv(qi, s)
		}
		return
	}
	t3 := wc.Timestamp
	if t3 == 0 {
		t3 = verbs.Now()
	}
	r.received.Add(1)
	buf := r.e.recvSlot(qi, s)
	n := int(wc.ByteLen)
	if n < grhLen || n > len(buf) {
		r.invalid.Add(1)
		r.e.postRecv(qi, s)
		return
	}
	m, err := ParseMessage(buf[grhLen:n])
	gid, ok := sourceGID(buf[:grhLen])
	tc := sourceTOS(buf[:grhLen]) &^ 3 // the DSCP; ECN is the device's
	if tc == 0 {
		tc = r.o.TrafficClass
	}
	r.e.postRecv(qi, s) // the buffer's content is copied out
	if err != nil || m.Type != TypeProbe || !ok {
		r.invalid.Add(1)
		return
	}
	if r.o.BeforeACK1 != nil {
		r.o.BeforeACK1()
	}
	free := r.free[qi]
	if len(free) == 0 {
		r.dropped.Add(1)
		return
	}
	// The ACKs carry the flow label the kernel derives for a QP pair
	// (rdma_calc_flow_label), so that they leave from a RoCEv2 source
	// port (0xC000-0xFFFF) rather than the device's own.
	label := wire.FlowLabel(wire.QPN(r.e.qps[qi].qp.Num()), wire.QPN(wc.SrcQP))
	if label == 0 {
		label = 1
	}
	ah, err := r.e.ahs.get(ahKey{gid: gid, label: label, tc: tc})
	if err != nil {
		r.dropped.Add(1)
		return
	}
	r.ahs.Store(int64(r.e.ahs.len()))
	slot := int(free[len(free)-1])
	r.free[qi] = free[:len(free)-1]
	a := &r.slots[qi][slot]
	*a = ackSlot{ah: ah, qpn: wc.SrcQP, pending: true,
		m: Message{Version: Version1, Type: TypeAck, AckType: AckFirst, Flags: r.flags(), Seq: m.Seq, T1: m.T1, T3: uint64(t3)}}
	a.posted = verbs.Now()
	if !r.post(qi, slot) {
		r.dropped.Add(1)
		return
	}
	r.answered.Add(1)
}

func (r *Responder) flags() uint8 {
	if r.e.hw {
		return FlagHardwareTimestamps
	}
	return 0
}

// post sends ACK slot s of QP qi; on failure the slot is released.
func (r *Responder) post(qi, s int) bool {
	a := &r.slots[qi][s]
	a.m.Put(r.e.sendSlot(qi, s))
	if err := r.e.postSend(qi, s, a.ah.ah, a.qpn, QKey); err != nil {
		r.release(qi, s)
		return false
	}
	return true
}

func (r *Responder) release(qi, s int) {
	a := &r.slots[qi][s]
	if !a.pending {
		return
	}
	r.e.ahs.put(a.ah)
	*a = ackSlot{}
	r.free[qi] = append(r.free[qi], int32(s))
}

// sent handles the send completion of ACK slot s of QP qi: after the first
// ACK, the second one with T4.
func (r *Responder) sent(qi, s int, wc *verbs.WC) {
	if s >= len(r.slots[qi]) {
		return
	}
	a := &r.slots[qi][s]
	if !a.pending {
		return
	}
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCWRFlushErr {
			r.sendErrs.Add(1)
		}
		r.release(qi, s)
		return
	}
	if a.m.AckType == AckSecond {
		r.completed.Add(1)
		r.release(qi, s)
		return
	}
	// Without a completion timestamp, T4 is read just before the first
	// ACK's PostSend: the ACK cannot leave earlier, whereas the post may
	// return (and its completion be polled) long after it left, which
	// would take more than the responder's share out of the network RTT
	// and could make it negative.
	t4 := wc.Timestamp
	if t4 == 0 {
		t4 = a.posted
	}
	a.m.AckType, a.m.T4 = AckSecond, uint64(t4)
	if !r.post(qi, s) {
		r.dropped.Add(1)
	}
}
