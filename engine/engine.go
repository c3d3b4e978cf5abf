package engine

import (
	"errors"
	"net/netip"
	"sync/atomic"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// Config configures an Engine. Zero fields take the documented defaults.
type Config struct {
	// Local is the device's IPv4 address: the source of every packet, and
	// the address its GID maps.
	Local netip.Addr
	// SourcePort is the UDP source port of every packet (but those
	// PerPacketSourcePort gives their own), which the ICRC covers. A UDP
	// socket bound to 4791 sends from 4791: set it so. Zero gives each RC
	// QP its flow-entropy port (wire.SourcePort).
	SourcePort uint16
	// PerPacketSourcePort says that the packet path can send each packet
	// from a source port of its own (packetio.SourcePorts). A UD send whose
	// address handle has a non-zero flow label then leaves from the port
	// the label maps to, wire.SourcePort, as from rdma_rxe and RoCE NICs,
	// so that a fabric's multipath hash spreads the labels over its paths:
	// its ICRC is computed for that port, which OutputFrom returns, and the
	// driver must send it from there. Other packets use SourcePort.
	PerPacketSourcePort bool
	// Device limits, named as in struct ibv_device_attr (see Limits;
	// defaults DefaultMaxQP and so on).
	MaxQP         int // max_qp (default 4096)
	MaxQPWR       int // max_qp_wr: depth of a send or receive queue (default 65536)
	MaxSGE        int // max_sge: SGEs of a work request (default 32)
	MaxInlineData int // most inline data a QP takes (default 4096)
	MaxCQ         int // max_cq (default 65536)
	MaxCQE        int // max_cqe: entries of a CQ (default 1048576)
	MaxMR         int // max_mr (default 65536)
	MaxPD         int // max_pd (default 65536)
	MaxSRQ        int // max_srq (default 65536)
	MaxSRQWR      int // max_srq_wr (default 65536)
	MaxAH         int // max_ah (default 65536)
	// Window is the most packets a QP has unacknowledged (default 512).
	Window int
	// Congestion selects the congestion control of the RC requesters and
	// the congestion notification of the responders (see CCMode; default
	// CCECN).
	Congestion CCMode
	// CNPInterval is the least time (ns) between two CNPs a QP sends
	// (default DefaultCNPInterval), as RoCE NICs rate-limit them.
	CNPInterval int64
	// TargetDelay is how far (ns) above the least round trip it measured a
	// path's standing round trip may rise before the window falls (ccPath's
	// delay response, after Swift; default DefaultTargetDelay; negative: no
	// delay response, and every loss cuts the window).
	TargetDelay int64
	// AckEvery sets AckReq on at least every n-th packet a QP sends; the
	// last packet of a message asks too when it ends a burst of posts, is
	// signaled, or no ACK is awaited (default 64, at most Window/2).
	AckEvery int
	// AckDelay is how long (ns) the responder may hold back the ACK of a
	// message that completed a receive (SEND, WRITE with immediate), hoping
	// to send it in the same batch as the reply the application is likely
	// to post: the ACK goes out with the QP's next request packet, behind
	// any other response, or when the delay ends, whichever comes first;
	// a later message acknowledged by the same ACK ends the hold (a stream
	// awaits no reply). Other ACKs, NAKs, READ responses and ATOMIC
	// acknowledgements are never held. Zero sends every ACK at once.
	AckDelay int64
	// SkipICRC turns off ICRC verification of received packets.
	SkipICRC bool
	// PortMTU is the port's active MTU in bytes: the largest UD message
	// and the path MTU of an RC QP until Modify sets one (default 1024).
	PortMTU int
	// OnGSI, when set, receives each MAD (GSIMADSize bytes, valid only
	// during the call) that arrives on QP 1 as a UD SEND ONLY with Q_Key
	// GSIQKey, with its sender, on the goroutine driving the engine, which
	// it must not block. It returns whether it took the MAD. Without it, or
	// when it returns false, QP 1's packets are dropped and counted.
	OnGSI func(now int64, mad []byte, from netip.Addr, fromPort uint16) bool
	// Clock, when set, stamps every work completion: the engine calls it
	// as it produces the completion (a receive as it processes the packet,
	// a send as the acknowledgement retires it, a flush as the QP goes to
	// ERROR) and stores the reading in WC.Timestamp, so the timestamp says
	// when the work completed, however late the application polls. The
	// engine calls it for nothing else (its timers run on the now its
	// callers pass). A provider passes verbs.Now, whose clock WC.Timestamp
	// is on. Its readings must not decrease; nil leaves WC.Timestamp 0.
	Clock func() int64
	// OnAsyncEvent, when set, receives the asynchronous events (a CQ
	// overrun and the QPs it took to ERROR; a responder error that took a
	// QP to ERROR), on the goroutine driving the engine, which it must not
	// block.
	OnAsyncEvent func(AsyncEvent)
}

// Stats counts what the engine did.
type Stats struct {
	TxPackets, RxPackets   uint64
	TxBytes, RxBytes       uint64
	Retransmits            uint64 // request packets sent again
	Timeouts               uint64 // local ACK timer expiries
	Duplicates             uint64 // duplicate requests received
	OutOfSequence          uint64 // requests ahead of the expected PSN
	NAKsSent, NAKsReceived uint64
	RNRSent, RNRReceived   uint64
	ICRCDrops              uint64
	ICRCFullChecks         uint64 // packets whose ICRC passed on all 32 bits: their IPv4 Identification and DF were seen (InputIPv4)
	ICRCRecoveredChecks    uint64 // packets whose ICRC passed with the Identification and DF solved for (Input: UDP sockets)
	ICRCLowIDChecks        uint64 // of ICRCRecoveredChecks, those of a flow held to small Identifications with DF: 26 bits checked (see identify)
	ICRCTrainChecks        uint64 // packets after the first of a GRO train whose Identification followed from the first's: 32 bits checked (31 for a train's second)
	MalformedDrops         uint64
	UnknownQPDrops         uint64
	WrongPeerDrops         uint64
	QKeyDrops              uint64
	PKeyDrops              uint64
	NoRecvDrops            uint64 // UD packets with no receive posted
	CQOverruns             uint64 // completions lost to a full CQ (which is then in error)
	AsyncEvents            uint64 // asynchronous events raised
	TxBuildErrors          uint64 // packets that could not be built and were not sent (an engine defect; never expected)
	TxGathered             uint64 // packets OutputGather gave with their payload left where it lies
	TailProbes             uint64 // resends after a tail loss probe timeout (ccPath.pto), before the local ACK timer
	// Congestion (see CCMode).
	ECNMarked      uint64 // RC packets received with the IP ECN field CE (congestion experienced)
	CNPsSent       uint64 // CNPs sent: to a QP whose packets came CE-marked, or while the packet path dropped
	CNPsReceived   uint64 // CNPs received for an RC QP
	CongestionCuts uint64 // times a peer's shared window was cut (a loss, a timeout, a CNP or a delay)
	DelayCuts      uint64 // of those, cuts for a round trip above the target delay
	RxCongestion   uint64 // times the packet path reported receive drops (NoteRxDrops)
}

// Engine is a RoCEv2 transport for the queue pairs of one device.
type Engine struct {
	rxTime int64 // the kernel receive time of the packet being input, 0 if unknown

	cfg    Config
	MRs    *MRTable
	qps    []*QP // indexed by QPN - firstQPN
	active []*QP // QPs in INIT or later, for Output and timers
	rr     int   // round-robin cursor over active
	stats  Stats
	nextPD uint32
	mcast  map[netip.Addr][]*QP // UD QPs attached to each multicast group (mcast.go)
	pkt    wire.Packet
	hdr    wire.Header

	inUse [numResources]int // objects counted by Reserve
	// overran lists the CQs that overran and are not yet reported.
	overran []*CQ
	now     int64 // the time of the current Input, Output or Tick call
	txFlows flowCache
	// lastSport is the source port of the last packet finish built.
	lastSport uint16
	rxFlows   flowCache
	train     rxTrain          // the GRO train being input (RxInfo.GROSeg)
	rxIDs     wire.ICRCIDCache // what Identifications and DF change in received packets' ICRCs, by length
	gsi       gsi
	nextQPN   int // index of qps where CreateQP looks first
	seal      sealQueue
	outIP     IPHeader // the IP header of the last packet Output returned (OutputIP)
	// gather is set during OutputGather: a request's payload of GatherMin
	// bytes or more from one SGE is left where it lies, in ext, for
	// finish to seal in place (finishGather).
	gather bool
	ext    []byte
	// paths holds the congestion state shared by the RC QPs sending to
	// each peer (ccPath); nil under CCOff.
	paths map[netip.Addr]*ccPath
	// rrRun counts the packets the QP at rr sent in a row (QP.runQuantum).
	rrRun int
	// paceAt is the earliest time a path's pacing lets a waiting QP send
	// (paced), 0: none waits.
	paceAt int64
	// lossAt is the earliest loss timer (a local ACK timer, a tail loss
	// probe) NextDeadline last found, 0: none (LossDeadline, which a
	// driver reads without the lock the engine's other calls hold).
	lossAt atomic.Int64
	// rxCongUntil: the packet path reported drops; RC packets input until
	// then are answered with CNPs as if CE-marked (NoteRxDrops).
	rxCongUntil int64
}

// firstQPN is the first QP number handed out (0 and 1 are special in IBA).
const firstQPN = 0x11

// Errors of engine configuration and control operations.
var (
	ErrQPLimit = errors.New("engine: queue pair limit reached")
	ErrConfig  = errors.New("engine: bad configuration")
)

// New returns an engine.
func New(cfg Config) (*Engine, error) {
	if !cfg.Local.IsValid() || cfg.Local.IsUnspecified() || cfg.Local.Zone() != "" {
		return nil, errors.Join(ErrConfig, errors.New("engine: Local must be an IPv4 or IPv6 address (no zone)"))
	}
	cfg.Local = cfg.Local.Unmap()
	cfg.fillLimits()
	if cfg.Window <= 0 {
		cfg.Window = 512
	}
	if !wire.ValidMTU(cfg.PortMTU) {
		cfg.PortMTU = 1024
	}
	if cfg.Congestion == CCDefault {
		cfg.Congestion = CCECN
	}
	if cfg.CNPInterval <= 0 {
		cfg.CNPInterval = DefaultCNPInterval
	}
	if cfg.TargetDelay == 0 {
		cfg.TargetDelay = DefaultTargetDelay
	}
	if cfg.AckEvery <= 0 {
		cfg.AckEvery = 64
	}
	// A window never fills with packets that ask for no ACK (askLast).
	cfg.AckEvery = max(1, min(cfg.AckEvery, cfg.Window/2))
	wire.PrepareICRCRecovery() // not at the first packet (4 ms)
	e := &Engine{cfg: cfg, MRs: NewMRTable(cfg.MaxMR), qps: make([]*QP, cfg.MaxQP)}
	e.txFlows.local = cfg.Local
	e.rxFlows.local, e.rxFlows.rx = cfg.Local, true
	return e, nil
}

// Local returns the device address.
func (e *Engine) Local() netip.Addr { return e.cfg.Local }

// Stats returns the counters.
func (e *Engine) Stats() Stats { return e.stats }

// AllocPD returns a new protection domain number.
func (e *Engine) AllocPD() uint32 { e.nextPD++; return e.nextPD }

func (e *Engine) qp(n wire.QPN) *QP {
	i := int(n) - firstQPN
	if i < 0 || i >= len(e.qps) {
		return nil
	}
	return e.qps[i]
}

// RxInfo is what the packet path learnt of a received packet beyond its
// bytes and source.
type RxInfo struct {
	// IPv4ID and IPv4DF are the datagram's IPv4 Identification and DF flag,
	// valid when SeenIPv4 (paths that see whole frames). The ICRC covers
	// them: with them it is checked on all 32 bits.
	IPv4ID   uint16
	IPv4DF   bool
	SeenIPv4 bool
	// Time is when the kernel received the packet, on Config.Clock's clock
	// (0: unknown). Completions the packet causes carry it as their
	// timestamp instead of the time the engine processed it.
	Time int64
	// GROSeg is the packet's position in the UDP GRO train it arrived in
	// (packetio.Packet.GROSeg): 0 for the first packet of a train or one
	// received alone, j for the j-th after the first, which the caller
	// inputs right after the train's earlier packets. The kernel coalesces
	// only datagrams of one flow whose Identifications go up by one from
	// the first's (or, with DF, all equal it), so once the first packet's
	// ICRC revealed its Identification, packet j's is known and its ICRC
	// is checked on all 32 bits (31 for j = 1, which tells up from equal).
	GROSeg uint16
	// ICRCDiff, when ICRCDiffKnown, is the packet's wire.FlowICRC.Diff on
	// its flow (d[j] of DiffICRC4 for the packet, and only that): the input
	// checks the ICRC with it instead of computing it again.
	ICRCDiff      uint32
	ICRCDiffKnown bool
	// CE says the IP header's ECN field was CE (11: congestion
	// experienced): a router on the way was congested. Under CCECN the
	// receiving QP answers with a CNP (at most one a Config.CNPInterval).
	CE bool
	// Dst is the packet's destination address when the packet path tells
	// it (packetio.Packet.Local): a multicast group's packets are checked
	// (the ICRC covers the destination) and delivered by it. A unicast or
	// unknown one is the engine's own address.
	Dst netip.Addr
}

// Input processes one received transport packet (a UDP payload) that came
// from the address and UDP port given. Malformed packets, packets failing the
// ICRC and packets for unknown QPs are dropped and counted. The IPv4
// Identification and DF flag of the datagram, which the ICRC covers, are
// unknown (a UDP socket hides them): the ICRC check solves for them, which
// leaves 15 of its 32 bits (see FlowICRC.Check), or holds a flow whose sender
// showed small Identifications with DF (0, or k for GSO segment k) to them,
// which leaves 26 (see flowSlot.identify). InputPacket with RxInfo.GROSeg
// checks the packets after the first of a GRO train on all 32.
func (e *Engine) Input(now int64, b []byte, from netip.Addr, fromPort uint16) {
	var rx RxInfo
	e.input(now, b, from, fromPort, &rx)
}

// InputIPv4 is Input for a packet whose IPv4 Identification and DF flag the
// packet path saw (AF_XDP, captures): its ICRC is checked on all 32 bits, so
// a packet with any bit of those fields flipped is dropped.
func (e *Engine) InputIPv4(now int64, b []byte, from netip.Addr, fromPort uint16, id uint16, df bool) {
	rx := RxInfo{IPv4ID: id, IPv4DF: df, SeenIPv4: true}
	e.input(now, b, from, fromPort, &rx)
}

// InputPacket is Input with what the packet path learnt of the packet.
func (e *Engine) InputPacket(now int64, b []byte, from netip.Addr, fromPort uint16, rx *RxInfo) {
	// Small enough to inline: the RxInfo goes to input whole.
	e.rxTime = rx.Time
	e.input(now, b, from, fromPort, rx)
	e.rxTime = 0
}

func (e *Engine) input(now int64, b []byte, from netip.Addr, fromPort uint16, rx *RxInfo) {
	e.now = now
	e.stats.RxPackets++
	e.stats.RxBytes += uint64(len(b))
	p := &e.pkt
	err := wire.Parse(b, p)
	if err != nil && !errors.Is(err, wire.ErrInvalidRequest) {
		e.stats.MalformedDrops++
		return
	}
	from = from.Unmap()
	if !e.cfg.SkipICRC && !e.checkICRC(b, from, fromPort, rx) {
		return
	}
	bth := p.BTH()
	if bth.PKey()&0x7FFF != wire.DefaultPKey&0x7FFF {
		e.stats.PKeyDrops++
		return
	}
	if bth.DestQP() == GSIQPN {
		e.gsiInput(now, p, err, from, fromPort)
		return
	}
	if rx.Dst.IsMulticast() {
		if bth.DestQP() == McastQPN {
			e.mcastInput(now, p, err, from, rx.Dst)
		} else {
			e.stats.UnknownQPDrops++
		}
		return
	}
	qp := e.qp(bth.DestQP())
	if qp == nil || qp.state == verbs.QPSReset {
		e.stats.UnknownQPDrops++
		return
	}
	if p.Info.Transport == wire.TransportCNP {
		e.cnpInput(now, qp, err, from)
		return
	}
	switch qp.typ {
	case verbs.QPTUD:
		if p.Info.Transport != wire.TransportUD || err != nil {
			e.stats.MalformedDrops++
			return
		}
		qp.udReceive(now, p, from)
	case verbs.QPTUC:
		if p.Info.Transport != wire.TransportUC || from != qp.remote {
			e.stats.MalformedDrops++
			return
		}
		qp.ucReceive(p, err)
	case verbs.QPTRC:
		if p.Info.Transport != wire.TransportRC {
			e.stats.MalformedDrops++
			return
		}
		if qp.state < verbs.QPSRTR || qp.state == verbs.QPSErr {
			return
		}
		if from != qp.remote { // unmapped above
			e.stats.WrongPeerDrops++
			return
		}
		if rx.CE || e.rxCongUntil > now {
			qp.congested(now, rx.CE)
		}
		if p.Info.Request {
			qp.respond(now, p, err)
		} else if err == nil {
			qp.complete(now, p)
		} else {
			e.stats.MalformedDrops++
		}
	}
}

// checkICRC checks a received packet's ICRC: on all 32 bits when the packet
// path saw its IPv4 Identification and DF (rx.SeenIPv4) or when its
// position in a GRO train gives them, else solving for them; a known Diff
// (rx.ICRCDiffKnown, DiffICRC4) is not computed again. It counts the
// check, or the drop and reports false.
func (e *Engine) checkICRC(b []byte, from netip.Addr, fromPort uint16, rx *RxInfo) bool {
	var cerr error
	var ctr *uint64
	s := e.rxFlows.get(from, fromPort)
	dst := e.cfg.Local
	if rx.Dst.IsMulticast() { // a group's packet: its ICRC covers the group's address
		s, dst = nil, rx.Dst.Unmap()
	}
	if s == nil {
		fl := wire.Flow{Src: from, Dst: dst, SrcPort: fromPort}
		rid, rdf, err := fl.CheckDatagramICRC(b)
		if cerr = err; err == nil && rx.SeenIPv4 && from.Is4() && (rid != rx.IPv4ID || rdf != rx.IPv4DF) {
			cerr = wire.ErrICRC
		}
		ctr = &e.stats.ICRCRecoveredChecks
		if rx.SeenIPv4 {
			ctr = &e.stats.ICRCFullChecks
		}
		return e.countICRC(cerr, ctr)
	}
	if rx.SeenIPv4 {
		// The Identification and DF seen: all 32 bits. A known Diff is for
		// Identification 0 and DF; for others, compute the ICRC with them
		// (as cheap as Diff, where turning d into theirs would take the
		// deltas of the packet's length).
		d, err := rx.ICRCDiff, error(nil)
		if !rx.ICRCDiffKnown || rx.IPv4ID != 0 || !rx.IPv4DF {
			d, err = s.c.DiffID(b, rx.IPv4ID, rx.IPv4DF)
		}
		if err == nil && d != 0 {
			err = wire.ErrICRC
		}
		return e.countICRC(err, &e.stats.ICRCFullChecks)
	}
	d := rx.ICRCDiff
	if !rx.ICRCDiffKnown {
		var err error
		if d, err = s.c.Diff(b); err != nil {
			return e.countICRC(err, nil)
		}
	}
	seg := rx.GROSeg
	switch {
	case seg > 0 && e.train.of(s, seg):
		cerr, ctr = e.train.check(d, e.rxIDs.Deltas(len(b)), seg), &e.stats.ICRCTrainChecks
	default:
		ctr = &e.stats.ICRCRecoveredChecks
		rid, rdf := uint16(0), true
		if d != 0 {
			rid, rdf, cerr = wire.RecoverID(d, len(b))
		}
		if cerr == nil {
			if cerr = s.identify(rid, rdf); cerr == nil && s.lowID {
				e.stats.ICRCLowIDChecks++
			}
		}
		t := &e.train
		if seg == 0 && cerr == nil {
			// Field by field: a composite literal is built on the stack and
			// copied with wide loads that stall on the narrow stores.
			t.slot, t.addrs, t.port, t.base, t.df, t.mode, t.last = s, s.addrs, s.port, rid, rdf, trainUnknown, 0
		} else {
			t.slot = nil // no train known
		}
	}
	return e.countICRC(cerr, ctr)
}

// countICRC counts a check that passed (cerr nil, in ctr) or the drop
// (countDrop, out of line so that countICRC inlines).
func (e *Engine) countICRC(cerr error, ctr *uint64) bool {
	if cerr == nil {
		*ctr++
		return true
	}
	e.countDrop(cerr)
	return false
}

// countDrop counts a packet whose ICRC check failed with cerr.
//
//go:noinline
func (e *Engine) countDrop(cerr error) {
	switch {
	case errors.Is(cerr, wire.ErrICRC):
		e.stats.ICRCDrops++
	default:
		e.stats.MalformedDrops++
	}
}

// NextDeadline returns the earliest time a timer of the engine fires, or 0
// when none is set. Call Tick at or after it.
func (e *Engine) NextDeadline() int64 {
	if len(e.overran) > 0 {
		return 1 // a CQ overran: Tick reports it
	}
	d := e.paceAt // a QP waits for its path's pacing (Engine.paced)
	var loss int64
	for _, qp := range e.active {
		ackDue := qp.resp.ackDue
		if qp.resp.queued() == 0 {
			ackDue = 0 // flushed: nothing is held
		}
		for _, t := range [2]int64{qp.req.timerAt, qp.req.probeAt} {
			if t != 0 && (loss == 0 || t < loss) {
				loss = t
			}
		}
		for _, t := range [2]int64{qp.req.rnrUntil, ackDue} {
			if t != 0 && (d == 0 || t < d) {
				d = t
			}
		}
	}
	e.lossAt.Store(loss)
	if loss != 0 && (d == 0 || loss < d) {
		d = loss
	}
	return d
}

// LossDeadline returns the earliest loss timer (a QP's local ACK timer, a
// tail loss probe) the last NextDeadline found, or 0. A driver that finds
// it passed when it is about to call Tick takes in the packets waiting for
// it first: when its goroutine was descheduled past the timer (a busy
// host), the ACK that arrived meanwhile is in its socket, and a Tick first
// would count a retry, or send a probe, for a packet that was
// acknowledged. On a 2-core machine running five soft devices and more,
// 16 QPs of a sender died so of RETRY_EXC_ERR. Unlike the engine's other
// methods, it may be called concurrently with them.
func (e *Engine) LossDeadline() int64 { return e.lossAt.Load() }

// LossSigns returns a count that moves whenever the engine sees a sign of
// loss or congestion: a window cut, a NAK sent or received, a CNP, a CE
// mark, a local ACK timeout, a tail loss probe, the packet path's receive
// drops. A driver compares it across looks.
func (e *Engine) LossSigns() uint64 {
	s := &e.stats
	return s.CongestionCuts + s.NAKsSent + s.NAKsReceived + s.CNPsSent + s.CNPsReceived + s.ECNMarked + s.Timeouts + s.TailProbes + s.RxCongestion
}

// Tick runs the timers that are due.
func (e *Engine) Tick(now int64) {
	e.now = now
	if e.paceAt != 0 && now >= e.paceAt {
		e.paceAt = 0 // the output that follows tries again
	}
	for _, qp := range e.active {
		qp.tick(now)
	}
	if len(e.overran) > 0 {
		e.raiseOverruns()
	}
}

// finish builds the transport packet described by e.hdr with payload already
// in place at buf[HeaderLen:], seals its ICRC for a datagram to dst, and
// returns its length. Between BeginOutputBatch and EndOutputBatch it may
// park the packet unsealed instead (sealQueue).
func (e *Engine) finish(buf []byte, payloadLen int, dst netip.Addr, sport uint16) int {
	// A payload left aside (OutputGather) is this packet's only: taken
	// here, and put back by finishGather once the packet is built.
	ext := e.ext
	if ext != nil {
		e.ext = nil
	}
	info := e.hdr.Opcode.Info()
	hl := info.HeaderLen
	out, err := wire.AppendTransport(buf[:0], &e.hdr, buf[hl:hl+payloadLen])
	if err != nil {
		return 0
	}
	fc := &e.txFlows
	var s *flowSlot
	if fc.lastPort == sport && fc.lastPeer == dst {
		s = fc.last // flowCache.get's memo, inline
	} else {
		if e.seal.n > 0 {
			e.sealParked() // before getSlow can give their flow's slot to another
		}
		s = fc.getSlow(dst, sport)
	}
	if s == nil {
		return e.finishV6(out, dst, sport, ext)
	}
	if ext != nil {
		n := e.finishGather(out, hl, ext, s)
		e.lastSport = sport
		return n
	}
	q := &e.seal
	if q.on && len(out) >= wire.Lane4MinLen && len(out) <= wire.Lane4MaxLen {
		// IPv4 (s is not nil) and a length the pass takes: Set cannot fail
		// on it, so parking it changes no outcome.
		if q.n > 0 && len(q.pkts[0]) != len(out) {
			e.sealParked()
		}
		q.pkts[q.n] = out
		if q.n++; q.n == len(q.pkts) {
			q.n = 0
			if !s.c.Set4(&q.pkts) {
				for _, p := range q.pkts {
					s.c.Set(p)
				}
			}
		}
	} else if s.c.Set(out) != nil {
		return 0
	}
	e.lastSport = sport
	return len(out)
}

// finishV6 seals a packet of a flow the flow cache does not keep (IPv6)
// with the Flow methods, and returns its length, or 0 when they refuse it
// (an address of the wrong family) or it carries a payload left aside
// (OutputGather leaves none over IPv6).
func (e *Engine) finishV6(out []byte, dst netip.Addr, sport uint16, ext []byte) int {
	fl := wire.Flow{Src: e.cfg.Local, Dst: dst, SrcPort: sport}
	if ext != nil || fl.SetDatagramICRC(out) != nil {
		return 0
	}
	e.lastSport = sport
	return len(out)
}

// GatherMin is the least payload OutputGather leaves where it lies: shorter
// ones are copied into the packet, which costs less than the extra pieces
// the packet path then gathers.
const GatherMin = 1024

// finishGather seals the packet out, which AppendTransport built with its
// payload's room (out[hl:hl+len(ext)]) unfilled, for the payload ext that
// stays where it lies: the pad and ICRC move up to follow the headers, ext
// goes in e.ext for OutputGather, and it returns the length of headers, pad
// and ICRC together, or 0 when SetV refuses the packet (it takes the
// engine's IPv4 flows and every length AppendTransport builds).
func (e *Engine) finishGather(out []byte, hl int, ext []byte, s *flowSlot) int {
	tail := out[hl+len(ext):]
	if s.c.SetV(out[:hl], ext, tail) != nil {
		return 0
	}
	e.ext = ext
	return hl + copy(out[hl:], tail)
}

// sealQueue holds the packets finish parked unsealed during an output batch
// (BeginOutputBatch): up to four of one flow (the one the send flow cache's
// memo names, flowCache.last) and one length, sealed together by
// wire.FlowICRC.Set4 when the fourth comes, one by one when a packet of
// another flow or length comes first or the batch ends.
type sealQueue struct {
	on   bool
	n    int
	pkts [4][]byte
}

// sealParked seals the packets parked in e.seal one by one.
func (e *Engine) sealParked() {
	q := &e.seal
	c := &e.txFlows.last.c
	for i := range q.n {
		c.Set(q.pkts[i]) // cannot fail: see finish
		q.pkts[i] = nil
	}
	q.n = 0
}

// BeginOutputBatch starts an output batch: until EndOutputBatch, the
// packets Output and OutputFrom return may lack their ICRC, which
// EndOutputBatch writes, so that the packets of one flow and length are
// sealed four at a time (wire.FlowICRC.Set4). The caller gives each call a
// buffer of its own, and neither sends nor changes the packets before
// EndOutputBatch returns. Packets shorter than wire.Lane4MinLen (an ACK)
// are always sealed at once. Without the processor's four-lane pass
// (wire.FourLaneICRC) it changes nothing.
func (e *Engine) BeginOutputBatch() { e.seal.on = wire.FourLaneICRC() }

// EndOutputBatch seals the packets left unsealed since BeginOutputBatch
// and ends the batch.
func (e *Engine) EndOutputBatch() {
	if e.seal.n > 0 {
		e.sealParked()
	}
	e.seal.on = false
}

// DiffICRC4 computes the ICRC differences (wire.FlowICRC.Diff) of four
// received packets of one length from the same address and UDP port
// together (wire.FlowICRC.Diff4), which RxInfo.ICRCDiff then gives
// InputPacket, sparing it the computation. It reports false and sets
// nothing when the packets cannot be checked so (not IPv4, no four-lane
// pass, unequal or unsuitable lengths, SkipICRC): they are checked as ever.
func (e *Engine) DiffICRC4(pkts *[4][]byte, from netip.Addr, fromPort uint16, d *[4]uint32) bool {
	if e.cfg.SkipICRC {
		return false
	}
	s := e.rxFlows.get(from.Unmap(), fromPort)
	if s == nil {
		return false
	}
	return s.c.Diff4(pkts, d)
}
