package engine

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// QP is a queue pair. Its fields belong to the engine's goroutine, but for
// the rings (PostSend, PostRecv) and Num/Type.
type QP struct {
	e      *Engine
	num    wire.QPN
	typ    verbs.QPType
	pd     uint32
	state  verbs.QPState
	pstate atomic.Uint32 // state, for PostSend/PostRecv on other goroutines
	gone   atomic.Bool   // destroyed: posts are refused
	sq     *sendQueue
	sqst   []sendState
	rq     *recvQueue
	srq    *recvQueue
	scq    *CQ
	rcq    *CQ
	sigAll bool
	cap    verbs.QPCap

	// Attributes (ibv_modify_qp).
	mtu             int
	run             int // packets it sends in a row (runLen), once its path MTU is set
	destQPN         wire.QPN
	remote          netip.Addr
	ah              verbs.AHAttr
	qkey            uint32
	access          verbs.AccessFlags
	timeout         uint8
	retryCnt        uint8
	rnrRetry        uint8
	maxRdAtomic     int
	maxDestRdAtomic int
	minRNRTimer     uint8
	sport           uint16

	req     requester
	resp    responder
	lastDst netip.Addr // the destination of a UD QP's last packet
	ip      IPHeader   // the IP header of an RC QP's packets, of a UD QP's last (OutputIP)
	path    *ccPath    // the congestion state shared with the QPs to the same peer (nil: none)
	bind1   bool       // BindMW is posting a type 1 window's bind (under the send queue's lock)
}

// SRQ is a shared receive queue.
type SRQ struct {
	q  *recvQueue
	pd uint32
}

// NewSRQ returns a shared receive queue for protection domain pd.
func (e *Engine) NewSRQ(pd uint32, maxWR, maxSGE int) *SRQ {
	return &SRQ{q: newRecvQueue(maxWR, maxSGE), pd: pd}
}

// PostRecv posts receive work requests (see QP.PostRecv).
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) (int, error) { return postRecv(s.q, wrs, nil) }

// QPInit describes a QP to create.
type QPInit struct {
	Type   verbs.QPType
	PD     uint32
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    verbs.QPCap
	SigAll bool
}

// CreateQP creates a queue pair in RESET.
func (e *Engine) CreateQP(init *QPInit) (*QP, error) {
	if init.Type != verbs.QPTRC && init.Type != verbs.QPTUD && init.Type != verbs.QPTUC {
		return nil, fmt.Errorf("engine: QP type %v: %w", init.Type, verbs.ErrNotSupported)
	}
	if init.SendCQ == nil || init.RecvCQ == nil {
		return nil, fmt.Errorf("engine: a QP needs a send and a receive CQ: %w", verbs.ErrInvalidAttr)
	}
	c := init.Cap
	if c.MaxSendWR == 0 || (init.SRQ == nil && c.MaxRecvWR == 0) {
		return nil, fmt.Errorf("engine: max_send_wr %d / max_recv_wr %d: a QP needs at least one of each: %w", c.MaxSendWR, c.MaxRecvWR, verbs.ErrInvalidAttr)
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	if err := e.checkQPCap(c); err != nil {
		return nil, err
	}
	// QP numbers are handed out cyclically, as rdma_rxe does: a number
	// comes back only after all others, so that a peer's stale packets and
	// its connection manager's time-wait (which keys on the QPN) do not
	// meet a new QP under an old number.
	idx := -1
	for i := range e.qps {
		j := (e.nextQPN + i) % len(e.qps)
		if e.qps[j] == nil {
			idx = j
			e.nextQPN = j + 1
			break
		}
	}
	if idx < 0 {
		return nil, &LimitError{Limit: "max_qp", Max: len(e.qps)}
	}
	sq := newSendQueue(int(c.MaxSendWR), int(c.MaxSendSGE), int(c.MaxInlineData))
	maxRecvSGE := int(c.MaxRecvSGE)
	if init.SRQ != nil {
		maxRecvSGE = cap(init.SRQ.q.slots[0].sges)
	}
	qp := &QP{e: e, num: wire.QPN(firstQPN + idx), typ: init.Type, pd: init.PD, sq: sq,
		sqst: make([]sendState, len(sq.slots)), scq: init.SendCQ, rcq: init.RecvCQ, sigAll: init.SigAll, cap: c,
		mtu: e.cfg.PortMTU, timeout: 14, retryCnt: 7, rnrRetry: 7, maxRdAtomic: 1, maxDestRdAtomic: 1, minRNRTimer: 12}
	qp.resp.cur.sges = make([]verbs.SGE, 0, maxRecvSGE)
	if init.SRQ != nil {
		qp.srq = init.SRQ.q
	} else {
		qp.rq = newRecvQueue(int(c.MaxRecvWR), int(c.MaxRecvSGE))
	}
	qp.sport = e.cfg.SourcePort
	if qp.sport == 0 {
		qp.sport = wire.QPSourcePort(qp.num)
	}
	e.qps[idx] = qp
	return qp, nil
}

// Num returns the QP number.
func (qp *QP) Num() uint32 { return uint32(qp.num) }

// InFlight returns how many request packets of an RC QP are sent and not
// yet acknowledged (0 for other QPs): while there are some, an ACK or the
// retransmission timer is due, either of which makes the engine's owner
// call Output again.
func (qp *QP) InFlight() int {
	if qp.typ != verbs.QPTRC || qp.state != verbs.QPSRTS {
		return 0
	}
	return int(qp.req.ackPSN.Distance(qp.req.psn)) - 1
}

// AckAwaited reports whether an RC QP sent a request packet that asked for
// an acknowledgement (AckReq, a READ or an atomic) which has not come: its
// ACK or response is on its way (or the retransmission timer runs), and
// whoever takes that in calls Output again. Packets in flight alone
// (InFlight) do not say so: the last packet of a message with more queued
// behind it asks for nothing (see QP.askLast). Call it with the engine
// serialised, as Output.
func (qp *QP) AckAwaited() bool {
	if qp.typ != verbs.QPTRC || qp.state != verbs.QPSRTS {
		return false
	}
	r := &qp.req
	d := r.ackPSN.Distance(r.askPSN)
	return d > 0 && d < r.ackPSN.Distance(r.psn)
}

// Unsent returns how many work requests are posted to the QP's send queue
// and not yet fully sent, and an estimate of the packets they will take:
// their number times the packets of the last one (a stream of posts is
// mostly of one size). Call it with the engine serialised, as Output.
func (qp *QP) Unsent() (wrs, pkts int) {
	t := qp.sq.posted()
	n := int(t - qp.req.next)
	if n <= 0 || qp.mtu <= 0 {
		return max(n, 0), max(n, 0)
	}
	per := (int(qp.sq.slots[(t-1)&qp.sq.mask].length) + qp.mtu - 1) / qp.mtu
	return n, n * max(per, 1)
}

// PendingOutput estimates how many packets Output would give now, counting
// up to limit: every QP's unsent work requests (Unsent's estimate), its
// queued responses (an ACK or atomic reply a packet, a READ response the
// packets it has left) and the management datagrams waiting. Work held
// back (a full window, an RNR wait, a held ACK) counts too: the estimate
// is meant to be at least the truth, so that a driver lends no fewer
// packet buffers than a flush fills (a single reply touches 1, not 64).
// Call it with the engine serialised, as Output.
func (e *Engine) PendingOutput(limit int) int {
	n := len(e.gsi.queue)
	for _, qp := range e.active {
		if n >= limit {
			break
		}
		_, p := qp.Unsent()
		n += p
		r := &qp.resp
		for i := r.qh; i != r.qt; i++ {
			it := &r.q[i%respQueueLen]
			n += max(int(it.npkts)-int(it.sent), 1)
		}
	}
	return min(n, limit)
}

// Responses returns how many responses the QP's responder has queued and
// not yet fully handed to Output: ACKs (among them one held back for a
// reply, see Config.AckDelay), NAKs, READ responses and atomic replies.
// Call it with the engine serialised, as Output.
func (qp *QP) Responses() int { return qp.resp.queued() }

// ReleaseACK ends the hold of an ACK the responder holds back for a reply
// (Config.AckDelay): the next Output sends it. For a QP about to be
// destroyed, whose reply will not come. Call it with the engine
// serialised, as Output.
func (qp *QP) ReleaseACK() { qp.resp.ackDue = 0 }

// Posted returns how many send work requests were ever posted to the QP
// (its send queue's tail). Safe from any goroutine: a load.
func (qp *QP) Posted() uint64 { return qp.sq.posted() }

// Type returns the QP type.
func (qp *QP) Type() verbs.QPType { return qp.typ }

// State returns the QP state.
func (qp *QP) State() verbs.QPState { return qp.state }

// Destroy flushes the QP's outstanding work and removes it. Later posts
// fail with verbs.ErrDestroyed.
func (qp *QP) Destroy() {
	if qp.gone.Swap(true) {
		return
	}
	// A post that began before the flag was set may still land: take the
	// producers' locks so that the flush below sees it.
	qp.sq.unlock(qp.sq.lock())
	if qp.rq != nil {
		qp.rq.mu.Lock()
		qp.rq.mu.Unlock()
	}
	if qp.state != verbs.QPSReset {
		qp.setError()
		qp.flush()
	}
	qp.leavePath()
	e := qp.e
	e.qps[int(qp.num)-firstQPN] = nil
	e.deactivate(qp)
}

func (e *Engine) activate(qp *QP) {
	for _, q := range e.active {
		if q == qp {
			return
		}
	}
	e.active = append(e.active, qp)
}

func (e *Engine) deactivate(qp *QP) {
	for i, q := range e.active {
		if q == qp {
			e.active = append(e.active[:i], e.active[i+1:]...)
			return
		}
	}
}

// modifyRules lists, per transition, the attributes ibv_modify_qp requires
// and allows (IBA 11.2.4.2 table 91), for RC and UD.
type modifyRule struct{ req, opt verbs.QPAttrMask }

func modifyRules(t verbs.QPType, from, to verbs.QPState) (modifyRule, bool) {
	const s = verbs.AttrState
	type k struct{ f, t verbs.QPState }
	var rc = map[k]modifyRule{
		{verbs.QPSReset, verbs.QPSInit}: {s | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags, 0},
		{verbs.QPSInit, verbs.QPSInit}:  {s, verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPSInit, verbs.QPSRTR}: {s | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer,
			verbs.AttrPKeyIndex | verbs.AttrAccessFlags | verbs.AttrAltPath},
		{verbs.QPSRTR, verbs.QPSRTS}: {s | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic,
			verbs.AttrCurState | verbs.AttrAccessFlags | verbs.AttrMinRNRTimer | verbs.AttrAltPath | verbs.AttrPathMigState},
		{verbs.QPSRTS, verbs.QPSRTS}: {s, verbs.AttrCurState | verbs.AttrAccessFlags | verbs.AttrMinRNRTimer | verbs.AttrAltPath | verbs.AttrPathMigState},
	}
	var ud = map[k]modifyRule{
		{verbs.QPSReset, verbs.QPSInit}: {s | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey, 0},
		{verbs.QPSInit, verbs.QPSInit}:  {s, verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPSInit, verbs.QPSRTR}:   {s, verbs.AttrPKeyIndex | verbs.AttrQKey},
		{verbs.QPSRTR, verbs.QPSRTS}:    {s | verbs.AttrSQPSN, verbs.AttrCurState | verbs.AttrQKey},
		{verbs.QPSRTS, verbs.QPSRTS}:    {s, verbs.AttrCurState | verbs.AttrQKey},
	}
	if to == verbs.QPSReset || to == verbs.QPSErr {
		return modifyRule{s, verbs.AttrCurState}, true
	}
	m := rc
	if t == verbs.QPTUD {
		m = ud
	} else if t == verbs.QPTUC {
		r, ok := ucModifyRules[qpTransition{from, to}]
		return r, ok
	}
	r, ok := m[k{from, to}]
	return r, ok
}

// Modify changes the QP's attributes, following ibv_modify_qp: mask must
// hold exactly the attributes the transition requires, plus optional ones.
func (qp *QP) Modify(a *verbs.QPAttr, mask verbs.QPAttrMask) error {
	to := qp.state
	if mask&verbs.AttrState != 0 {
		to = a.State
	}
	if mask&verbs.AttrCurState != 0 && a.CurState != qp.state {
		return fmt.Errorf("engine: QP %#x is %v, not %v: %w", qp.num, qp.state, a.CurState, verbs.ErrInvalidState)
	}
	rule, ok := modifyRules(qp.typ, qp.state, to)
	if !ok || mask&verbs.AttrState == 0 {
		return fmt.Errorf("engine: QP %#x cannot go from %v to %v: %w", qp.num, qp.state, to, verbs.ErrInvalidState)
	}
	if miss := rule.req &^ mask; miss != 0 {
		return fmt.Errorf("engine: %v -> %v needs attributes %s: %w", qp.state, to, maskNames(miss), verbs.ErrInvalidAttr)
	}
	if extra := mask &^ (rule.req | rule.opt); extra != 0 {
		return fmt.Errorf("engine: %v -> %v does not take attributes %s: %w", qp.state, to, maskNames(extra), verbs.ErrInvalidAttr)
	}
	if err := checkAttrs(a, mask); err != nil {
		return err
	}
	if err := qp.e.checkFamily(a, mask); err != nil {
		return err
	}
	qp.setAttrs(a, mask)
	if qp.typ == verbs.QPTRC && qp.e.cfg.SourcePort == 0 && qp.destQPN != 0 {
		qp.sport = wire.SourcePort(qp.ah.FlowLabel, qp.num, qp.destQPN)
	}
	switch to {
	case verbs.QPSReset:
		qp.reset()
	case verbs.QPSErr:
		qp.setError()
	case verbs.QPSRTS:
		qp.req.retryLeft, qp.req.rnrLeft = int(qp.retryCnt), int(qp.rnrRetry)
	}
	if to == verbs.QPSRTR && qp.state == verbs.QPSInit {
		qp.resp.replay = make([]atomicReplay, qp.maxDestRdAtomic)
	}
	qp.setState(to)
	if to != verbs.QPSReset {
		qp.e.activate(qp)
	}
	if to == verbs.QPSRTR || to == verbs.QPSRTS {
		qp.joinPath()
	}
	return nil
}

// checkAttrs checks the values of the attributes mask names.
func checkAttrs(a *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if mask&verbs.AttrPathMTU != 0 && a.PathMTU.Bytes() == 0 {
		return fmt.Errorf("engine: path MTU code %d: %w", a.PathMTU, verbs.ErrInvalidAttr)
	}
	if mask&verbs.AttrDestQPN != 0 && a.DestQPN > wire.QPNMask {
		return fmt.Errorf("engine: dest QPN %#x wider than 24 bits: %w", a.DestQPN, verbs.ErrInvalidAttr)
	}
	if (mask&verbs.AttrRQPSN != 0 && a.RQPSN > wire.PSNMask) || (mask&verbs.AttrSQPSN != 0 && a.SQPSN > wire.PSNMask) {
		return fmt.Errorf("engine: PSN wider than 24 bits: %w", verbs.ErrInvalidAttr)
	}
	if mask&verbs.AttrTimeout != 0 && a.Timeout > 31 || mask&verbs.AttrRetryCnt != 0 && a.RetryCnt > 7 ||
		mask&verbs.AttrRNRRetry != 0 && a.RNRRetry > 7 || mask&verbs.AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return fmt.Errorf("engine: timeout (0-31), retry_cnt (0-7), rnr_retry (0-7) or min_rnr_timer (0-31) out of range: %w", verbs.ErrInvalidAttr)
	}
	return nil
}

// setAttrs stores the attributes mask names.
func (qp *QP) setAttrs(a *verbs.QPAttr, mask verbs.QPAttrMask) {
	if mask&verbs.AttrAccessFlags != 0 {
		qp.access = a.AccessFlags
	}
	if mask&verbs.AttrQKey != 0 {
		qp.qkey = a.QKey
	}
	if mask&verbs.AttrAV != 0 {
		qp.ah = a.AHAttr
		qp.remote = a.AHAttr.DGID.Addr()
		qp.ip = ipHeaderOf(&a.AHAttr)
	}
	if mask&verbs.AttrPathMTU != 0 {
		qp.mtu = a.PathMTU.Bytes()
		qp.run = runLen(qp.mtu)
	}
	if mask&verbs.AttrDestQPN != 0 {
		qp.destQPN = wire.QPN(a.DestQPN)
	}
	if mask&verbs.AttrRQPSN != 0 {
		qp.resp.epsn = wire.PSN(a.RQPSN)
	}
	if mask&verbs.AttrMaxDestRdAtomic != 0 {
		qp.maxDestRdAtomic = max(1, int(a.MaxDestRdAtomic))
	}
	if mask&verbs.AttrMinRNRTimer != 0 {
		qp.minRNRTimer = a.MinRNRTimer
	}
	if mask&verbs.AttrSQPSN != 0 {
		qp.req.psn = wire.PSN(a.SQPSN)
		qp.req.ackPSN = qp.req.psn.Sub(1)
		qp.req.askPSN = qp.req.ackPSN
		qp.req.sndNxt, qp.req.sndMax = qp.req.psn, qp.req.psn
		qp.ccSync()
	}
	if mask&verbs.AttrTimeout != 0 {
		qp.timeout = a.Timeout
	}
	if mask&verbs.AttrRetryCnt != 0 {
		qp.retryCnt = a.RetryCnt
	}
	if mask&verbs.AttrRNRRetry != 0 {
		qp.rnrRetry = a.RNRRetry
	}
	if mask&verbs.AttrMaxQPRdAtomic != 0 {
		qp.maxRdAtomic = max(1, int(a.MaxRdAtomic))
	}
}

func (qp *QP) setState(s verbs.QPState) {
	qp.state = s
	qp.pstate.Store(uint32(s))
}

// Query returns the QP's attributes.
func (qp *QP) Query() verbs.QPAttr {
	return verbs.QPAttr{State: qp.state, CurState: qp.state, PathMTU: verbs.MTUFromBytes(qp.mtu), QKey: qp.qkey,
		RQPSN: uint32(qp.resp.epsn), SQPSN: uint32(qp.req.psn), DestQPN: uint32(qp.destQPN), AccessFlags: qp.access,
		Cap: qp.cap, AHAttr: qp.ah, MaxRdAtomic: uint8(qp.maxRdAtomic), MaxDestRdAtomic: uint8(qp.maxDestRdAtomic),
		MinRNRTimer: qp.minRNRTimer, Timeout: qp.timeout, RetryCnt: qp.retryCnt, RNRRetry: qp.rnrRetry, PortNum: 1}
}

func (qp *QP) reset() {
	qp.leavePath()
	qp.flushQuiet()
	qp.req = requester{}
	qp.resp = responder{}
	for i := range qp.sqst {
		qp.sqst[i] = sendState{}
	}
	qp.e.deactivate(qp)
}

var attrNames = []string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX", "PORT", "QKEY",
	"AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER",
	"SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN"}

func maskNames(m verbs.QPAttrMask) string {
	s := ""
	for i, n := range attrNames {
		if m&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	return s
}

// Errors of posting.
var (
	errPostState = errors.New("engine: QP is in RESET or INIT: cannot post send work requests")
)

// PostSend copies work requests into the send queue. Safe from any
// goroutine; it does not allocate. See verbs.QP.PostSend.
func (qp *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	n, _, err := qp.PostSendAwaited(wrs)
	return n, err
}

// PostSendAwaited is PostSend that also reports whether the last work
// request it posted is the completion the application waits for next: a
// signaled WR (SendSignaled, or a QP that signals all) while every
// signaled WR posted before it has completed. A driver that holds posts
// back to send them together (a cork) should send such a WR at once: with
// completion moderation (perftest's CQ moderation: a signaled WR every
// 100) the application can post no further than its window past it, and
// every microsecond it waits in a cork is a microsecond of that window
// idle. A QP that signals every WR has its WR awaited only when all
// before it have completed (an idle QP).
func (qp *QP) PostSendAwaited(wrs []verbs.SendWR) (int, bool, error) {
	st := verbs.QPState(qp.pstate.Load())
	if st == verbs.QPSReset || st == verbs.QPSInit {
		return 0, false, fmt.Errorf("%w (state %v): %w", errPostState, st, verbs.ErrInvalidState)
	}
	q := qp.sq
	t0 := q.lock()
	if qp.gone.Load() {
		q.unlock(t0)
		return 0, false, fmt.Errorf("engine: QP %#x is destroyed: %w", qp.num, verbs.ErrDestroyed)
	}
	// The WRs are published together, with the store that lets the lock
	// go (an atomic store is a full barrier: one per WR cost more than the
	// rest of posting it); on an error, those before it are. No defer: its
	// closure cost 5% of a 64-byte write_bw client's time.
	n, t, awaited, err := qp.fillSend(wrs, t0)
	q.unlock(t)
	return n, awaited, err
}

// fillSend writes wrs into the send queue's slots from index t on, with
// the queue's lock held, and returns how many it wrote, the tail after
// them, whether the last it wrote is awaited (PostSendAwaited), and the
// error that stopped it.
func (qp *QP) fillSend(wrs []verbs.SendWR, t uint64) (int, uint64, bool, error) {
	q := qp.sq
	head := q.head.Load()
	awaited := false
	for i := range wrs {
		wr := &wrs[i]
		if t-head >= uint64(qp.cap.MaxSendWR) {
			if head = q.head.Load(); t-head >= uint64(qp.cap.MaxSendWR) {
				return i, t, awaited, fmt.Errorf("engine: send queue of QP %#x is full (max_send_wr %d): %w", qp.num, qp.cap.MaxSendWR, verbs.ErrQueueFull)
			}
		}
		var n uint32
		if len(wr.SGList) == 1 && qp.typ == verbs.QPTRC && (wr.Opcode == verbs.WRRDMAWrite || wr.Opcode == verbs.WRSend) &&
			wr.Flags&verbs.SendInline == 0 && wr.SGList[0].Length <= 1<<31 {
			// The common WR, which passes every check of checkSendWR
			// (max_send_sge is at least 1), without its call.
			n = wr.SGList[0].Length
		} else {
			var err error
			if n, err = qp.checkSendWR(wr); err != nil {
				return i, t, awaited, err
			}
		}
		s := &q.slots[t&q.mask]
		s.wr = *wr
		if len(wr.SGList) == 1 { // the common case, without a call to copy
			s.sge[0] = wr.SGList[0]
			s.wr.SGList = s.sge[:]
		} else {
			s.wr.SGList = append(q.sgesOf(t), wr.SGList...)
		}
		s.length = n
		if wr.Reg != nil || wr.Bind != nil {
			copyMemOp(&s.wr) // not the application's: copied, as the SGEs
		}
		if wr.Flags&verbs.SendInline != 0 {
			in := q.inlineOf(t)
			for _, g := range wr.SGList {
				m := qp.e.MRs.lookup(g.LKey)
				b := sgeBytes(m, qp.pd, g, 0)
				if b == nil {
					return i, t, awaited, fmt.Errorf("engine: inline SGE (addr %#x len %d lkey %#x) not in a registered region: %w", g.Addr, g.Length, g.LKey, verbs.ErrInvalidWR)
				}
				in = append(in, b...) // within maxInline: checkSendWR
			}
		}
		// The signaled WR posted before this one (lastSig) has completed
		// when the head (the oldest WR not retired, as of this post) is
		// past it; a QP reset, or flushed in error, has its head past
		// everything.
		awaited = false
		if wr.Flags&verbs.SendSignaled != 0 || qp.sigAll {
			awaited = q.lastSig == 0 || q.lastSig-1 < head
			q.lastSig = t + 1
		}
		t++
	}
	return len(wrs), t, awaited, nil
}

// checkSendWR checks a send WR against the QP and returns its length.
func (qp *QP) checkSendWR(wr *verbs.SendWR) (uint32, error) {
	bad := func(format string, a ...any) (uint32, error) {
		return 0, fmt.Errorf("engine: WR %#x: "+format+": %w", append(append([]any{wr.WRID}, a...), verbs.ErrInvalidWR)...)
	}
	if len(wr.SGList) > int(qp.cap.MaxSendSGE) {
		return bad("%d SGEs, max_send_sge is %d", len(wr.SGList), qp.cap.MaxSendSGE)
	}
	var n uint64
	for _, g := range wr.SGList {
		n += uint64(g.Length)
	}
	if n > 1<<31 {
		return bad("%d bytes, more than 2 GiB", n)
	}
	if wr.Flags&verbs.SendInline != 0 && n > uint64(qp.cap.MaxInlineData) {
		return bad("%d bytes inline, max_inline_data is %d", n, qp.cap.MaxInlineData)
	}
	switch qp.typ {
	case verbs.QPTUD:
		if wr.Opcode != verbs.WRSend && wr.Opcode != verbs.WRSendWithImm {
			return bad("opcode %v on a UD QP (only SEND, SEND_WITH_IMM)", wr.Opcode)
		}
		if wr.AH == nil {
			return bad("UD send without an address handle")
		}
		if wr.RemoteQPN > wire.QPNMask {
			return bad("remote QPN %#x wider than 24 bits", wr.RemoteQPN)
		}
		if n > uint64(qp.mtu) {
			return bad("%d bytes on UD, more than the path MTU %d", n, qp.mtu)
		}
	case verbs.QPTUC:
		if err := checkUCWR(wr, qp.bind1); err != nil {
			return bad("%v", err)
		}
	case verbs.QPTRC:
		switch wr.Opcode {
		case verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead, verbs.WRSendWithInv:
		case verbs.WRAtomicWrite, verbs.WRFlush, verbs.WRLocalInv, verbs.WRBindMW, verbs.WRRegMR:
			if err := checkNewWR(wr, n, qp.bind1); err != nil {
				return bad("%v", err)
			}
		case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
			if len(wr.SGList) != 1 || wr.SGList[0].Length != 8 {
				return bad("atomic needs one 8-byte SGE")
			}
			if wr.RemoteAddr&7 != 0 {
				return bad("atomic remote address %#x not 8-byte aligned", wr.RemoteAddr)
			}
		default:
			return bad("opcode %v not supported", wr.Opcode)
		}
		if wr.Opcode == verbs.WRRDMARead && wr.Flags&verbs.SendInline != 0 {
			return bad("RDMA READ cannot be inline")
		}
	}
	return uint32(n), nil
}

// PostRecv copies receive work requests into the receive queue. Safe from any
// goroutine; it does not allocate.
func (qp *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if qp.srq != nil {
		return 0, fmt.Errorf("engine: QP %#x takes its receives from an SRQ: %w", qp.num, verbs.ErrInvalidWR)
	}
	if verbs.QPState(qp.pstate.Load()) == verbs.QPSReset {
		return 0, fmt.Errorf("engine: QP %#x is in RESET: %w", qp.num, verbs.ErrInvalidState)
	}
	return postRecv(qp.rq, wrs, &qp.gone)
}

func postRecv(q *recvQueue, wrs []verbs.RecvWR, gone *atomic.Bool) (int, error) {
	q.mu.Lock()
	if gone != nil && gone.Load() {
		q.mu.Unlock()
		return 0, fmt.Errorf("engine: the QP is destroyed: %w", verbs.ErrDestroyed)
	}
	// The WRs are published together, with one store of the tail, as
	// PostSend's; on an error, those before it are. No defer, as in
	// PostSend: its closure was a third of a post's time in a 64-byte
	// send_bw server.
	t0 := q.tail.Load()
	n, t, err := fillRecv(q, wrs, t0)
	if t != t0 {
		q.tail.Store(t)
	}
	q.mu.Unlock()
	return n, err
}

// fillRecv writes wrs into the receive queue's slots from index t on, with
// q.mu held, and returns how many it wrote, the tail after them, and the
// error that stopped it.
func fillRecv(q *recvQueue, wrs []verbs.RecvWR, t uint64) (int, uint64, error) {
	for i := range wrs {
		wr := &wrs[i]
		if t-q.head.Load() >= uint64(q.limit) {
			return i, t, fmt.Errorf("engine: receive queue is full (max_recv_wr %d): %w", q.limit, verbs.ErrQueueFull)
		}
		if len(wr.SGList) > cap(q.slots[0].sges) {
			return i, t, fmt.Errorf("engine: WR %#x: %d SGEs, max_recv_sge is %d: %w", wr.WRID, len(wr.SGList), cap(q.slots[0].sges), verbs.ErrInvalidWR)
		}
		s := &q.slots[t&q.mask]
		s.wrid = wr.WRID
		s.sges = append(s.sges[:0], wr.SGList...)
		s.length = 0
		for _, g := range wr.SGList {
			s.length += g.Length
		}
		t++
	}
	return len(wrs), t, nil
}

// setError moves the QP to ERROR; its outstanding work is flushed by flush.
func (qp *QP) setError() {
	qp.setState(verbs.QPSErr)
	qp.req.timerAt, qp.req.rnrUntil, qp.req.probeAt = 0, 0, 0
	qp.leavePath()
}

// flush completes every outstanding send WQE and every posted receive (not
// an SRQ's) with WR_FLUSH_ERR, in order.
func (qp *QP) flush() {
	q := qp.sq
	for h := q.head.Load(); h != q.posted(); h++ {
		s := &q.slots[h&q.mask]
		wc := verbs.WC{WRID: s.wr.WRID, Status: verbs.WCWRFlushErr, Opcode: wcOpcode(s.wr.Opcode), QPNum: uint32(qp.num)}
		qp.sqst[h&q.mask] = sendState{}
		q.head.Store(h + 1)
		qp.e.pushWC(qp.scq, &wc, false)
	}
	qp.req.next, qp.req.started = q.head.Load(), q.head.Load()
	if qp.resp.recv != nil { // a SEND was under way: its receive is flushed too
		qp.recvDone(verbs.WC{Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv}, false)
	}
	if qp.rq != nil {
		for s := qp.rq.peek(); s != nil; s = qp.rq.peek() {
			wc := verbs.WC{WRID: s.wrid, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: uint32(qp.num)}
			qp.e.pushWC(qp.rcq, &wc, false)
			qp.rq.pop()
		}
	}
}

// Shutdown moves every QP not in RESET to ERROR and completes all its
// outstanding work, send and receive, with WR_FLUSH_ERR in order: what a
// device that goes away owes the application still polling its CQs.
func (e *Engine) Shutdown() {
	for _, qp := range e.active {
		if qp.state == verbs.QPSReset {
			continue
		}
		qp.setError()
		qp.flush()
	}
}

// flushQuiet drops outstanding work without completions (to RESET).
func (qp *QP) flushQuiet() {
	qp.sq.head.Store(qp.sq.posted())
	if qp.rq != nil {
		qp.rq.head.Store(qp.rq.tail.Load())
	}
}

// tick runs the QP's timers.
func (qp *QP) tick(now int64) {
	if qp.state == verbs.QPSErr {
		qp.flush()
		return
	}
	r := &qp.req
	if r.rnrUntil != 0 && now >= r.rnrUntil {
		r.rnrUntil = 0
	}
	if r.timerAt != 0 && now >= r.timerAt {
		qp.timeoutExpired(now)
	}
	if r.probeAt != 0 && now >= r.probeAt {
		qp.probeExpired(now)
	}
}

// output produces the QP's next packet: responses first, then requests.
func (qp *QP) output(now int64, buf []byte) (int, bool) {
	if qp.typ == verbs.QPTRC && qp.state >= verbs.QPSRTR && qp.state != verbs.QPSErr {
		if qp.resp.queued() == 0 {
			qp.resp.ackDue = 0 // what respOutput's holdACK does with nothing queued, without the call
		} else if n, ok := qp.respOutput(now, buf); ok {
			return n, true
		}
	}
	if qp.state == verbs.QPSErr {
		qp.flush()
		if n, ok := qp.respOutput(now, buf); ok { // a last NAK
			return n, true
		}
		return 0, false
	}
	if qp.state != verbs.QPSRTS {
		return 0, false
	}
	if qp.typ == verbs.QPTUD {
		return qp.udOutput(now, buf)
	}
	if qp.typ == verbs.QPTUC {
		return qp.ucOutput(now, buf)
	}
	return qp.reqOutput(now, buf)
}

// Output writes the next packet to send into buf (which must hold the path
// MTU plus headers: wire.MaxPMTU + 64 is always enough) and returns its
// length and destination, or ok false when there is nothing to send now.
// The packet is for Config.SourcePort; with Config.PerPacketSourcePort use
// OutputFrom, which says which source port each packet is for.
func (e *Engine) Output(now int64, buf []byte) (n int, to netip.Addr, ok bool) {
	n, to, _, ok = e.OutputFrom(now, buf)
	return n, to, ok
}

// OutputGather is OutputFrom for a packet path that sends a payload from
// where it lies (packetio.Gatherer). A packet whose payload is GatherMin
// bytes or more of one memory region (an RC SEND or RDMA WRITE from one SGE)
// over IPv4 leaves it there: buf receives the headers and
// then the pad and ICRC, n counts those, and ext is the payload, which goes
// between buf[:n-t] and buf[n-t:n], t being wire.ICRCLen plus the BTH's pad
// count (GatherSplit). Every other packet comes as from OutputFrom, with ext
// nil. The ICRC covers the payload as it is at the call: send the packet
// before anything may change that memory, as the verbs contract lets the
// application do only after the WQE completes (which needs the packet sent).
// READ responses are copied: the responder's memory may change under them.
func (e *Engine) OutputGather(now int64, buf []byte) (n int, ext []byte, to netip.Addr, sport uint16, ok bool) {
	e.gather = e.cfg.Local.Is4() // IPv6 flows are sealed whole (finishV6)
	n, to, sport, ok = e.OutputFrom(now, buf)
	e.gather = false
	ext, e.ext = e.ext, nil
	if !ok {
		ext = nil
	}
	if ext != nil {
		e.stats.TxGathered++
		e.stats.TxBytes += uint64(len(ext))
	}
	return n, ext, to, sport, ok
}

// GatherSplit returns where the payload OutputGather left aside goes in the
// n bytes it wrote into buf: after buf[:at], before buf[at:n].
func GatherSplit(buf []byte, n int) (at int) {
	return n - wire.ICRCLen - int(wire.BTH(buf).PadCount())
}

// rrQuantum is how many packets in a row the output arbiter takes from one
// QP before it turns to the next (OutputFrom's round robin) at the largest
// path MTU, and at least at any: QPs that share a congestion window
// (ccPath) then share it fairly, and a burst still fills a GSO message.
// A QP with a smaller path MTU sends rrBytes in a row (QP.run), up to
// rrMaxRun packets: its packets leave from its own source port (its flow's),
// so a GSO message holds one QP's packets, and 16 packets of 1 KiB made
// GSO messages of 16 KB where one QP alone sent them 64 KB at a time.
const (
	rrQuantum = 16
	rrBytes   = rrQuantum * 4096
	rrMaxRun  = 64 // Linux's UDP_MAX_SEGMENTS before 6.x: a GSO message's packets
)

// endTurn ends the QP's turn at its path's window (ccPath.admit). It
// stores only when there is a turn to end: the output visits every
// active QP, and a store on each visit would take the cache line of a QP
// that a poster is writing to.
func (qp *QP) endTurn() {
	if qp.req.ccTurn != 0 {
		qp.req.ccTurn = 0
	}
}

// runQuantum returns how many packets the QP sends in a row.
func (qp *QP) runQuantum() int { return max(qp.run, rrQuantum) }

// runLen returns how many packets a QP of path MTU mtu sends in a row.
func runLen(mtu int) int {
	if mtu <= 0 {
		return rrQuantum
	}
	return min(max(rrBytes/mtu, rrQuantum), rrMaxRun)
}

// OutputFrom is Output that also returns the UDP source port the packet's
// ICRC was computed for, which it must leave from: Config.SourcePort (when
// that is zero, the QP's flow port), or for a UD send with a flow label
// under Config.PerPacketSourcePort the port the label maps to.
func (e *Engine) OutputFrom(now int64, buf []byte) (n int, to netip.Addr, sport uint16, ok bool) {
	if len(e.overran) > 0 {
		e.raiseOverruns()
	}
	e.now = now
	if len(e.gsi.queue) > 0 {
		if n, to, ok := e.gsiOutput(buf); ok && n > 0 {
			e.stats.TxPackets++
			e.stats.TxBytes += uint64(n)
			e.outIP = IPHeader{}
			return n, to, e.lastSport, true
		}
	}
	start, sent := e.rr, e.rrRun > 0
	for tries := len(e.active); tries > 0; tries-- {
		if e.rr >= len(e.active) {
			e.rr = 0
		}
		qp := e.active[e.rr]
		var n int
		var ok bool
		if qp.typ == verbs.QPTRC && qp.state == verbs.QPSRTS && qp.resp.queued() == 0 {
			// output's common case for a sender, without its call.
			qp.resp.ackDue = 0
			n, ok = qp.reqOutput(now, buf)
		} else {
			n, ok = qp.output(now, buf)
		}
		if ok && n > 0 {
			e.stats.TxPackets++
			e.stats.TxBytes += uint64(n)
			to := qp.remote // an RC QP's packets all go to its peer
			if qp.typ == verbs.QPTUD {
				to = qp.lastDst
			}
			e.outIP = qp.ip
			if e.rrRun++; e.rrRun >= qp.runQuantum() {
				e.rrRun = 0
				qp.endTurn() // its turn at a shared window ends with its run
				e.rr++
			}
			return n, to, e.lastSport, true
		}
		if ok { // finish could not build it: counted, never sent empty
			e.stats.TxBuildErrors++
		}
		e.rrRun = 0
		qp.endTurn()
		e.rr++
	}
	// Nothing to send: when the QP this call started at is the last that
	// sent, the next call starts after it, not at it again. A sweep that
	// fails ends where it began, and QPs held by a shared congestion
	// window would otherwise hand each packet the window frees to that
	// same QP: the others starved until their retries ran out.
	if sent {
		e.rr = start + 1
	}
	return 0, netip.Addr{}, 0, false
}
