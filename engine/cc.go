package engine

import (
	"math"
	"net/netip"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// CCMode selects how an engine's RC queue pairs share the network.
type CCMode uint8

// The congestion control modes.
const (
	// CCDefault is CCECN.
	CCDefault CCMode = iota
	// CCOff lets each QP have Config.Window packets unacknowledged, however
	// many QPs send to the same peer, and never sends a CNP: rdma_rxe's
	// behaviour.
	CCOff
	// CCLoss shares one congestion window among the QPs that send to the
	// same peer address, cut on loss (a PSN sequence NAK, a timeout) and
	// grown as ACKs come (see ccPath).
	CCLoss
	// CCECN is CCLoss that also cuts the window on CNPs (the reaction
	// point of DCQCN) and answers RC packets that arrive CE-marked, or that
	// come while the packet path drops, with CNPs (the notification point).
	CCECN
)

// DefaultCNPInterval is Config.CNPInterval's default: 50 µs, DCQCN's
// interval between a notification point's CNPs to one flow.
const DefaultCNPInterval = 50_000

// String returns "off", "loss" or "ecn".
func (m CCMode) String() string {
	switch m {
	case CCOff:
		return "off"
	case CCLoss:
		return "loss"
	case CCECN, CCDefault:
		return "ecn"
	}
	return "CCMode(?)"
}

// ParseCCMode parses "off", "loss" or "ecn".
func ParseCCMode(s string) (CCMode, bool) {
	for _, m := range []CCMode{CCOff, CCLoss, CCECN} {
		if s == m.String() {
			return m, true
		}
	}
	return 0, false
}

// ccPath is the congestion state an engine shares among its RC QPs that send
// to one peer address, so that many QPs to one host behave as one
// well-behaved flow rather than many greedy ones.
//
// The window follows TCP's congestion control (RFC 5681): it starts at
// Config.Window packets, grows by the packets acknowledged while below
// ssthresh (slow start) and by one packet a window's worth of ACKs above it
// (congestion avoidance), and falls to lossBeta of itself on a loss (a PSN
// sequence NAK: the receiver saw a gap; or a timeout), at most once a round
// trip (RFC 5681 section 3.2: one cut per window of data). lossBeta is
// CUBIC's 0.7 rather than Reno's halving: a soft device's round trip holds
// the scheduling of its host, often longer than a switch's queue drains,
// and four devices halving into a 64 KB bottleneck queue kept it idle
// (260 against 300 Mbit/s of 500). Under CCECN a CNP cuts it as
// DCQCN's reaction point cuts its rate (Zhu et al., "Congestion Control for
// Large-Scale RDMA Deployments", SIGCOMM 2015, section 3.1): by alpha/2,
// alpha an estimate of how often the path is congested, raised by g on
// every CNP and decayed by the factor 1-g every alphaInterval without one,
// starting at 1 (a first CNP halves); the increase is the window's AIMD.
//
// Once a loss or a CNP has shown the path congested, the window also
// answers the queue the path's round trips show, as Swift does (Kumar et
// al., "Swift: Delay is Simple and Effective for Congestion Control in the
// Datacenter", SIGCOMM 2020, section 3.1): a round trip more than
// Config.TargetDelay above the least measured cuts the window by
// swiftBeta x (rtt-target)/rtt, at most swiftMaxMDF and once a round trip;
// below it the window grows as above, and above it the window does not
// grow (Swift increases only below its target): growing between the cuts,
// which come at most once delayCutInterval, held a simulated incast's
// queue at 25 KB, against 14 KB. The target is scaled by the window
// (Swift's flow scaling, section 3.5, ccPath.target): TargetDelay at
// fsMax packets or more, up to 1+fsRange times it at fsMin, so that a
// path with a small window keeps growing while one with a large window
// is cut, and windows that differ converge; with one target for all, they
// kept their ratios through the multiplicative cuts (Jain's index 0.92
// in the simulated incast, 0.96 scaled). A drop-tail queue otherwise fills
// until it drops, and every packet behind it waits for the whole queue:
// through a 500 Mbit/s bottleneck with a 64 KB queue a 64-byte ping
// beside the load took 26 times its idle p99. The response waits for a
// first loss or CNP because a soft device's round trip holds its host's
// scheduling, which no window cures: on a clean path it would only cost
// goodput.
//
// The window bounds the packets (PSNs: a READ counts its response packets)
// that all the path's QPs have sent and not seen acknowledged, inflight,
// but a path may always have one packet in flight, and a QP with none
// may always send a message of one packet (a sparse flow, as fq_codel
// serves new flows first, RFC 8290 section 4.1), so a ping is not queued
// behind bulk QPs' turns; which QP sends next is the engine's round robin
// (OutputFrom, rrQuantum). Giving every QP a packet regardless, as before,
// put 64 QPs' 69 KB in flight when their windows were spent, more than a
// 64 KB bottleneck queue holds.
type ccPath struct {
	peer     netip.Addr
	refs     int     // QPs on the path
	cwnd     float64 // congestion window, packets
	ssthresh float64
	maxCwnd  float64
	inflight int   // packets of the path's QPs sent and not acknowledged
	srtt     int64 // smoothed round-trip time, ns (RFC 6298's SRTT); 0: no sample yet
	minRTT   int64 // the least round trip measured in the last minRTTWindow
	// standCur and standPrev are the least round trips measured since
	// standAt and in the half round trip before (standing).
	standCur, standPrev, standAt int64
	minAt                        int64   // when it was
	rttvar                       int64   // its mean deviation (RFC 6298's RTTVAR)
	lastCut                      int64   // when the window was last cut
	queued                       bool    // a congestion loss or a CNP armed the delay response (onLoss)
	alpha                        float64 // DCQCN's alpha
	alphaAt                      int64   // when alpha was last updated
	waitq                        []*QP   // QPs the window held, in the order it held them (admit)
	tokens                       float64 // pacing: packets the path may send at once (paced)
	tokAt                        int64   // when tokens was last refilled
	ackAt                        int64   // when an ACK last made progress on a QP of the path
	// ackedSent is when the latest-sent packet whose ACK came back (a
	// round-trip sample) was sent: RACK's most recently delivered packet.
	ackedSent int64
}

// Congestion control constants.
const (
	minWindow     = 2        // the least a path's window falls to
	initWindow    = 32       // a path's first window
	lossBeta      = 0.7      // the window after a loss, a share of before (CUBIC's beta, RFC 9438 section 4.6)
	maxWindowX    = 16       // the window grows to at most this many times Config.Window
	initSSThreshX = 2        // slow start ends at this many times Config.Window
	ccGain        = 1.0 / 16 // DCQCN's g (the paper's 1/256 with its 55 µs alpha timer reacts over 14 ms; 1/16 over 0.9 ms)
	alphaInterval = 55_000   // ns: DCQCN's alpha update period
	// DefaultTargetDelay is Config.TargetDelay's default: a 64 KB queue at
	// 500 Mbit/s is 1 ms; 100 µs holds an incast's queue through it (4
	// senders x 16 QPs between namespaces) at a median of 173-176 µs, and
	// tolerates a busy host's jitter. A smaller one serves that incast
	// better, its goodput the same (at 25 µs the queue's median 37-54 µs,
	// Jain 0.95-0.97, a 64-byte ping's p99 beside it 366-419 µs against
	// 467-499 µs; at 50 µs 87-104 µs), but a lossy path between two busy
	// hosts, whose round trip moves with its hosts and not with its
	// window, pays for it: the nftables soak (5 % loss each way, 16 QPs)
	// took 4.1-6.2 s at 100 µs, 6.9-7.9 s at 50 µs and 16-23 s at 25 µs, its
	// windows cut for delays no window makes (before READs and atomics
	// were probed: 25-28 s and 71-80 s; measured with READs probed at the
	// probe timeout, before rdProbeMin). soft.OpenOptions.TargetDelay and
	// --cc-target set it where hosts are quiet.
	DefaultTargetDelay = 100_000
	swiftBeta          = 0.8            // Swift's beta
	swiftMaxMDF        = 0.5            // Swift's max_mdf: a delay cut keeps at least half the window
	minRTTWindow       = 10_000_000_000 // ns: the least round trip is the least of the last 10 s (BBR's min_rtt filter)
	minStandWindow     = 50_000         // ns: the least a standing round trip's bucket spans
	delayCutInterval   = 1_000_000      // ns: the least time between two delay cuts (onDelay)
	// Flow scaling of the target delay (ccPath.target): windows of fsMin
	// to fsMax packets, the target up to 1+fsRange times TargetDelay.
	fsMin   = minWindow
	fsMax   = 64
	fsRange = 1.0
)

// newPath returns a path's initial state for an engine with window w: a
// window of initWindow packets (at most w), as TCP starts with ten
// segments (RFC 6928), and slow start to twice w. Starting at w (512),
// 64 QPs of 4 hosts sent 2 MB at once into a 64 KB bottleneck queue.
func newPath(peer netip.Addr, w int) *ccPath {
	return &ccPath{peer: peer, cwnd: float64(min(w, initWindow)), ssthresh: float64(initSSThreshX * w), maxCwnd: float64(maxWindowX * w), alpha: 1}
}

// admit reports whether qp may send span more packets now (take: and is
// about to). Room in the window goes to the QPs it held in the order it
// held them (waitq), a round robin of the window's packets whatever order
// the engine's output visits QPs in: that order began anew after each
// packet of another QP (a ping's), and the first QP of a sender then took
// every packet the window freed, its 15 others finishing one after the
// other behind it in a simulated incast.
//
// A held QP's turn is a run of packets (turn), given when the window has
// room for the whole run, not a packet at a time as room appears: each
// turn's last packet asks for an ACK (closes), and a turn of one packet
// asked for an ACK of every packet. 64 QPs sharing a full window of about
// 1,000 packets between two namespaces then drew 0.99 ACKs a packet, each
// a datagram and a system call on both sides.
func (p *ccPath) admit(qp *QP, span int, take bool) bool {
	r := &qp.req
	if p.inflight != 0 && float64(p.inflight+span) > p.cwnd {
		r.ccTurn = 0
		p.wait(qp)
		return false
	}
	if r.ccTurn >= span { // within its turn
		if take {
			r.ccTurn -= span
		}
		return true
	}
	for len(p.waitq) > 0 && p.waitq[0] != qp {
		if p.waitq[0].ccCanSend() {
			p.wait(qp) // one held longer may go
			return false
		}
		p.pop() // it has nothing to send: it queues again when held
	}
	if len(p.waitq) == 0 {
		return true
	}
	g := p.turn(qp.runQuantum())
	if p.inflight != 0 && float64(p.inflight+g) > p.cwnd {
		return false // qp's turn, when the window has room for it
	}
	if take {
		p.pop()
		r.ccTurn = g - span
	}
	return true
}

// turn returns how many packets a held QP's turn is: a quarter of the
// window, so that four turns' ACKs keep it full, from 1 up to run (the
// QP's runQuantum); one packet once congestion cut the window. Through a
// router whose token bucket dequeued on either processor, the receiver's
// kernel delivered some adjacent packets swapped; with a QP's packets adjacent
// on the link, each swap was a NAK and a resend (1.3-1.5 % of the packets
// of the incast where the router marks, against 0.05 % with turns of one
// packet), while a congested path's rate is low enough that its ACKs
// cost little.
func (p *ccPath) turn(run int) int {
	if p.lastCut != 0 {
		return 1
	}
	return min(run, max(1, int(p.cwnd)/4))
}

// wait queues qp as held by the window, once, when others share it.
func (p *ccPath) wait(qp *QP) {
	if p.refs > 1 && !qp.req.ccWaiting {
		qp.req.ccWaiting = true
		p.waitq = append(p.waitq, qp)
	}
}

// pop takes the first QP off the queue of held QPs.
func (p *ccPath) pop() {
	p.waitq[0].req.ccWaiting = false
	n := copy(p.waitq, p.waitq[1:])
	p.waitq[n] = nil
	p.waitq = p.waitq[:n]
}

// unwait takes qp off the queue of held QPs (it leaves the path).
func (p *ccPath) unwait(qp *QP) {
	if !qp.req.ccWaiting {
		return
	}
	qp.req.ccWaiting = false
	for i, q := range p.waitq {
		if q == qp {
			p.waitq = append(p.waitq[:i], p.waitq[i+1:]...)
			return
		}
	}
}

// ccCanSend reports whether the QP has a request it could send but for
// its path's window and pacing.
func (qp *QP) ccCanSend() bool {
	r := &qp.req
	return qp.state == verbs.QPSRTS && r.rnrUntil == 0 && r.next != qp.sq.posted() && qp.nextPSN().Diff(r.ackPSN) <= int32(qp.e.cfg.Window)
}

// sparse reports whether the QP has nothing in flight and its next WQE is
// a message of one packet not yet started (see ccPath).
func (qp *QP) sparse() bool {
	r := &qp.req
	if r.ccOut != 0 || r.nextPkt != 0 {
		return false
	}
	s := &qp.sq.slots[r.next&qp.sq.mask]
	return s.length <= uint32(qp.mtu)
}

// Pacing spreads a path's window over its round trip, as Linux's TCP
// paces (sch_fq, tcp_pacing_ss_ratio and tcp_pacing_ca_ratio: 2x
// cwnd/SRTT in slow start, 1.2x after): a window sent at once arrives at a
// bottleneck as one burst, and four senders' bursts into a 64 KB queue
// were dropped whole (2,102 timeouts for 181 k packets through a 500
// Mbit/s bottleneck). A path may send paceBurst packets back to back (a
// GSO message's worth still leaves together) and then one at its rate.
const (
	paceBurst   = 2 * rrQuantum
	paceRatioSS = 2.0
	paceRatioCA = 1.2
)

// paced reports whether the path's pacing lets span more packets go now,
// taking them from its tokens; when it does not, it notes when it will
// (Engine.paceAt, a deadline of NextDeadline). take false only asks. A
// path paces once congestion cut its window: until then nothing says a
// bottleneck queue is near, and pacing a clean path cost its bursts (GSO
// messages) about a tenth of their goodput between two namespaces. No
// round trip measured yet: no pacing.
func (e *Engine) paced(p *ccPath, span int, take bool) bool {
	if p.srtt == 0 || p.lastCut == 0 {
		return true
	}
	now := e.now
	ratio := paceRatioCA
	if p.cwnd < p.ssthresh {
		ratio = paceRatioSS
	}
	rate := ratio * p.cwnd / float64(p.srtt) // packets a ns
	p.tokens = min(p.tokens+float64(now-p.tokAt)*rate, paceBurst)
	p.tokAt = now
	if p.tokens >= 1 {
		if take {
			p.tokens -= float64(span)
		}
		return true
	}
	at := now + int64((1-p.tokens)/rate) + 1
	if e.paceAt == 0 || at < e.paceAt {
		e.paceAt = at
	}
	return false
}

// closes reports whether the packet about to be sent, the run-th in a row
// of its QP (Engine.rrRun), may be its QP's last for a while: it fills the
// window, it spends the path's pacing tokens (paced took its own already),
// other QPs wait for the window (admit gives them the next room) and it
// ends its turn (turn: the packets of it left after this one), or it ends
// the QP's run (quantum: its runQuantum) while other QPs share the window
// and may fill it. It must then ask for an ACK (AckReq), since its QP may
// send nothing more until one comes, and an ACK that nobody asked for
// never comes: a paced QP's last packet that did not ask waited for the
// local ACK timer (2,863 timeouts in a simulated incast).
func (p *ccPath) closes(run, quantum, turn int) bool {
	return float64(p.inflight+2) > p.cwnd || p.refs > 1 && (run+1 >= quantum || len(p.waitq) > 0 && turn == 0) || p.lastCut != 0 && p.srtt != 0 && p.tokens < 1
}

// timeIdle reports whether the packet about to be sent should ask for an
// ACK to time the path's round trip: nothing of the path is in flight,
// and either no round trip was measured yet or congestion armed the delay
// response (whose target is the least round trip). A clean path that goes
// idle between bursts asks for nothing more (64-byte write_bw: 0.92x with
// an ACK asked at every restart).
func (p *ccPath) timeIdle() bool {
	return p.inflight == 0 && (p.srtt == 0 || p.queued)
}

// grow opens the window for k packets newly acknowledged (RFC 5681 3.1).
func (p *ccPath) grow(k int) {
	if p.cwnd < p.ssthresh {
		p.cwnd += float64(k)
	} else {
		p.cwnd += float64(k) / p.cwnd
	}
	p.cwnd = min(p.cwnd, p.maxCwnd)
}

// sample feeds a round-trip time measured on an ACK at now (RFC 6298's
// SRTT, gain 1/8; and the least round trip).
func (p *ccPath) sample(now, rtt int64) {
	if rtt <= 0 {
		return
	}
	if p.minRTT == 0 || rtt <= p.minRTT || now-p.minAt > minRTTWindow {
		p.minRTT, p.minAt = rtt, now
	}
	// The standing round trip: the least of the last half round trip or
	// so, in two buckets (the one filling and the one before).
	if now-p.standAt >= max(p.srtt/2, minStandWindow) {
		p.standPrev, p.standCur, p.standAt = p.standCur, rtt, now
	} else if rtt < p.standCur {
		p.standCur = rtt
	}
	if p.srtt == 0 {
		p.srtt, p.rttvar = rtt, rtt/2
		return
	}
	d := rtt - p.srtt
	p.srtt += d / 8
	p.rttvar += (max(d, -d) - p.rttvar) / 4
}

// cutDue reports whether a congestion signal at now may cut the window: at
// most one cut a round trip (or a CNP interval, whichever is longer), since
// the signals of one congestion event (the NAKs of many QPs, a CNP each)
// arrive within one.
func (p *ccPath) cutDue(now, interval int64) bool {
	return p.lastCut == 0 || now-p.lastCut >= max(p.srtt, interval)
}

// cut multiplies the window by f (not below minWindow) and counts it.
func (e *Engine) cutPath(p *ccPath, now int64, f float64) {
	p.cwnd = max(p.cwnd*f, minWindow)
	p.ssthresh = max(p.cwnd, minWindow)
	p.lastCut = now
	e.stats.CongestionCuts++
}

// onLoss reacts to a PSN sequence NAK or a timeout. It arms the delay
// response (a loss may be a queue's), and a loss while the round trips
// show a queue (the standing round trip at least TargetDelay above the
// least) is congestion: the window falls to lossBeta of it. A loss with no
// queue to show is taken for a random one (a lossy link, a corrupted
// packet) and cuts nothing: TCP Veno tells the two apart so (Fu and Liew,
// "TCP Veno", IEEE JSAC 21(2), 2003), cutting a random loss by a fifth;
// BBR takes no loss for congestion (Cardwell et al., ACM Queue 14(5),
// 2016). Cutting by a fifth kept 16 QPs on a pipe dropping 5% at random to
// a few packets: 23 s for 20,000 operations against 7 s with no control;
// cutting nothing, 8 s. With the delay response off (a negative
// TargetDelay) every loss cuts.
func (e *Engine) onLoss(p *ccPath, now int64) {
	p.queued = true
	if (e.cfg.TargetDelay < 0 || e.queueShown(p)) && p.cutDue(now, e.cfg.CNPInterval) {
		e.cutPath(p, now, lossBeta)
	}
}

// standing returns the path's standing round trip (Copa's RTTstanding,
// Arun and Balakrishnan, NSDI 2018, section 2.2): the least of the samples
// of about the last half round trip. A queue raises every sample, the
// standing one too; a host's jitter (a thread descheduled, a batch late)
// raises some, not the least of them. Comparing the smoothed round trip
// instead took 16 QPs on a clean, lossy pipe for queued, and kept their
// window at two.
func (p *ccPath) standing() int64 {
	if p.standPrev == 0 {
		return p.standCur
	}
	return min(p.standPrev, p.standCur)
}

// target scales the target delay for the path's window (Swift's flow
// scaling, section 3.5): a small window tolerates more queue before it
// cuts or stops growing, so that paths whose windows differ converge.
func (p *ccPath) target(base int64) int64 {
	lo, hi := 1/math.Sqrt(fsMax), 1/math.Sqrt(fsMin)
	x := min(max((1/math.Sqrt(p.cwnd)-lo)/(hi-lo), 0), 1)
	return base + int64(fsRange*x*float64(base))
}

// queueShown reports whether the path's standing round trip is
// TargetDelay or more above its least.
func (e *Engine) queueShown(p *ccPath) bool {
	return e.cfg.TargetDelay >= 0 && p.minRTT != 0 && p.standing()-p.minRTT >= e.cfg.TargetDelay
}

// onDelay reacts to the round trip (Swift's decrease, see ccPath) once a
// loss or a CNP armed it: a standing round trip above the target cuts the
// window, at most once a round trip or delayCutInterval, whichever is
// longer. A soft device's round trip holds its hosts' scheduling: a
// receiver descheduled for a few milliseconds on a busy machine raises
// every round trip of the time, and cutting once a round trip through it
// took 16 QPs between two namespaces to a window of two (64 against 891
// MB/s).
func (e *Engine) onDelay(p *ccPath, now int64) {
	target := p.minRTT + p.target(e.cfg.TargetDelay)
	rtt := p.standing()
	if !p.queued || e.cfg.TargetDelay < 0 || rtt <= target || !p.cutDue(now, delayCutInterval) {
		return
	}
	e.cutPath(p, now, max(1-swiftBeta*float64(rtt-target)/float64(rtt), 1-swiftMaxMDF))
	e.stats.DelayCuts++
}

// onTimeout reacts to a retransmission timeout as to a loss, at most once
// a round trip. TCP's timeout falls to one segment
// (RFC 5681 3.1's loss window) because its ACK clock stopped; here the
// go-back-N resend restarts it at once, and with a window of a packet or
// two a QP every loss is a lost tail, found by the timer alone (no later
// packet makes the responder NAK): collapsing on each drove a link that
// drops 5% at random into timeouts only (2,665 for 29 k packets, against
// 1,387 for 437 k without control).
func (e *Engine) onTimeout(p *ccPath, now int64) { e.onLoss(p, now) }

// onCNP reacts to a CNP (DCQCN's reaction point): alpha decays for the
// intervals without a CNP, rises by g, and the window falls by alpha/2.
func (e *Engine) onCNP(p *ccPath, now int64) {
	if p.alphaAt != 0 {
		for n := (now - p.alphaAt) / alphaInterval; n > 0 && p.alpha > 1e-3; n-- {
			p.alpha *= 1 - ccGain
		}
	}
	p.alpha = (1-ccGain)*p.alpha + ccGain
	p.alphaAt = now
	p.queued = true
	if p.cutDue(now, e.cfg.CNPInterval) {
		e.cutPath(p, now, 1-p.alpha/2)
	}
}

// joinPath puts an RC QP on the path to its peer (leaving the one it was
// on), when the engine controls congestion.
func (qp *QP) joinPath() {
	e := qp.e
	if e.cfg.Congestion == CCOff || qp.typ != verbs.QPTRC || !qp.remote.IsValid() {
		return
	}
	if qp.path != nil && qp.path.peer == qp.remote {
		return
	}
	qp.leavePath()
	p := e.paths[qp.remote]
	if p == nil {
		if e.paths == nil {
			e.paths = map[netip.Addr]*ccPath{}
		}
		p = newPath(qp.remote, e.cfg.Window)
		e.paths[qp.remote] = p
	}
	p.refs++
	qp.path = p
}

// leavePath takes the QP off its path, with its packets in flight.
func (qp *QP) leavePath() {
	p := qp.path
	if p == nil {
		return
	}
	p.inflight -= qp.req.ccOut
	qp.req.ccOut = 0
	p.unwait(qp)
	qp.path = nil
	if p.refs--; p.refs == 0 {
		delete(qp.e.paths, p.peer)
	}
}

// ccSync brings the path's count of packets in flight up to date with the
// QP's: the PSNs after the last acknowledged up to sndNxt.
func (qp *QP) ccSync() {
	p := qp.path
	if p == nil {
		return
	}
	r := &qp.req
	out := max(int(r.sndNxt.Diff(r.ackPSN))-1, 0)
	p.inflight += out - r.ccOut
	r.ccOut = out
}

// ccSent notes a request packet at psn covering span PSNs just sent.
func (qp *QP) ccSent(now int64, psn wire.PSN, span uint32, ackReq bool) {
	r := &qp.req
	end := psn.Add(span)
	if end.After(r.sndNxt) {
		r.sndNxt = end
		qp.ccSync()
	}
	if ackReq && r.rttAt == 0 {
		r.rttPSN, r.rttAt = psn, now
	}
}

// ccAcked notes that the ACKs moved the acknowledged PSN from old on.
func (qp *QP) ccAcked(now int64, old wire.PSN) {
	p := qp.path
	r := &qp.req
	if d := r.ackPSN.Diff(old); d > 0 {
		if r.rttAt != 0 && !r.ackPSN.Before(r.rttPSN) {
			rtt := now - r.rttAt
			p.sample(now, rtt)
			p.ackedSent = max(p.ackedSent, r.rttAt)
			r.rttAt = 0
			qp.e.onDelay(p, now)
		}
		if !p.queued || qp.e.cfg.TargetDelay < 0 || p.standing()-p.minRTT < p.target(qp.e.cfg.TargetDelay) {
			p.grow(int(d))
		}
		p.ackAt = now
		r.probes = 0
	}
	qp.ccSync()
}

// ccRewind notes that the requester sends again from psn: the responder
// drops what followed it (go-back-N), so it is no longer in flight.
func (qp *QP) ccRewind(psn wire.PSN) {
	r := &qp.req
	if psn.Before(r.sndNxt) {
		r.sndNxt = psn
	}
	r.rttAt = 0 // Karn: no sample from a retransmission
	qp.ccSync()
}

// Tail loss probe (after RACK-TLP, RFC 8985 sections 6 and 7): a QP whose
// ACK is overdue resends what it has in flight, well before its local ACK
// timer (Timeout: 67 ms by default), without using up a retry or cutting
// the window. Go-back-N finds a loss only when a later packet reaches the
// responder (which NAKs the gap); a loss at the tail of a burst, a whole
// burst lost in a full queue, and with a small window every loss, have no
// later packet, and waited for the timer: on a link that dropped 5% at
// random, 2,665 timeouts for 29 k packets; through a 500 Mbit/s bottleneck
// with a 64 KB queue, 2,102 for 181 k (4 senders' bursts dropped whole).
//
// The probe fires after one probe timeout (pto) when it is confirmed: the
// QP has at most probeMax packets out and no other QP shares its path, or
// a packet of the path sent after the QP's last was acknowledged (RACK's
// rule: a packet is lost when one sent after it was delivered). Otherwise
// the peer or this host may just be slow (a 2-core machine descheduling
// the receiver: 64 QPs probing at once resent 4% of their packets for
// nothing), and the probe waits probeWait timeouts more. A probe lost too
// (the queue that dropped the packets drops their resend) is followed by
// another after twice the timeout, and so on (RFC 6298's backoff), rather
// than by the local ACK timer alone: through the 64 KB bottleneck, 5,668
// timeouts of 67 ms in 950 k packets, a third of the QPs' time, with one
// probe each.
const (
	maxProbeShift = 4 // a probe's timeout doubles after each, up to 16 times
	probeMax      = rrQuantum
	probeWait     = 3
	minPTO        = 1_000_000 // ns: the least probe timeout
	// rdProbeMin is the least probe timeout while a READ or atomic is
	// outstanding: its responses come at the responder's pace, and a READ
	// asked again is answered again from its first response missing. With
	// the probe timeout alone, a 1 MiB READ between two namespaces under
	// the race detector was answered three times over (782 response
	// packets for 262: TestNetns's e2eBugReadRewind).
	rdProbeMin = 10_000_000
)

// pto returns the path's probe timeout: twice the smoothed round trip
// (RFC 8985's PTO) or RFC 6298's retransmission timeout, whichever is
// longer, and at least minPTO. With 200 µs at least, probes fired for ACKs
// that were late, not lost: 5.7% of the packets of 64 QPs sending between
// two namespaces were resent needlessly.
func (p *ccPath) pto() int64 { return max(2*p.srtt, p.srtt+4*p.rttvar, minPTO) }

// armProbe arms, or disarms, the tail loss probe after a send or an ACK:
// armed while packets are in flight, nothing else (an RNR wait) holds the
// QP, and no probe went out since the last ACK that made progress. A READ
// or atomic outstanding is probed too: each of its responses arms the
// probe again, and a READ is asked again from its first response missing
// (probePSN). With no probe while one was outstanding, a QP mixing READs
// and atomics with its other requests waited for the local ACK timer (67
// ms) on most of its losses: through 5% loss each way
// (TestSoakNftables/udp), 544-572 timeouts and 24 s for the soak. That
// guard was there for a 1 MiB READ whose responses outlived the probe
// timeout on a busy machine and were sent three times over; such a probe
// waits at least rdProbeMin.
func (qp *QP) armProbe(now int64) {
	r := &qp.req
	if r.ccOut == 0 || r.rnrUntil != 0 || qp.state != verbs.QPSRTS {
		r.probeAt = 0
		return
	}
	pto := qp.path.pto()
	if r.rdAtomic > 0 {
		pto = max(pto, rdProbeMin)
	}
	r.probeAt, r.probeSet, r.probeWaited = now+pto<<min(r.probes, maxProbeShift), now, false
}

// probeExpired resends what a QP has in flight (go-back-N from the oldest
// unacknowledged), when the probe is confirmed or has waited (see above):
// an ACK of the resent packets, or the NAK of a gap before them, follows.
func (qp *QP) probeExpired(now int64) {
	r := &qp.req
	r.probeAt = 0
	if qp.sq.head.Load() == r.started || r.ccOut == 0 {
		return
	}
	p := qp.path
	confirmed := p.ackedSent > r.probeSet || p.refs == 1 && r.ccOut <= probeMax
	if !confirmed && !r.probeWaited {
		r.probeAt, r.probeWaited = now+probeWait*p.pto(), true
		return
	}
	qp.e.stats.TailProbes++
	// The first probe sends the last packet again, as RACK-TLP's probe: if
	// it was the one lost, its ACK follows; if an earlier one was, the
	// responder NAKs the gap and go-back-N resends from there. Resending
	// everything in flight instead cost a quarter of the bottleneck's
	// packets in the incast. A responder that NAKed a gap (PSN sequence
	// error) drops what follows it until the gap's packet comes: when that
	// NAK was lost, probes of the last packet went unanswered until the
	// local ACK timer (67 ms), and through 5% loss each way 438 of 441
	// timeouts came after one to six such probes. goroce's responder NAKs
	// the gap again when the probe comes (respond); for one that NAKs a gap
	// once, as rdma_rxe's, a probe that brought nothing back (no ACK made
	// progress since) goes back to the oldest packet not acknowledged, as
	// the timer would, when a few packets are in flight
	// (TestProbeAfterLostNAK). With a full window (512 packets) that resent
	// it whole each time an ACK was merely late.
	psn := qp.probePSN()
	if r.probes > 0 && r.ccOut <= probeMax {
		psn = qp.resumePSN()
	}
	r.probes++ // the next waits twice as long, until an ACK makes progress
	qp.rewind(psn)
}

// probePSN returns the PSN a probe resends from: the last sent, or for a
// READ its first response missing (a READ is asked for again from there),
// or, when that is acknowledged already, where a timeout resends from.
func (qp *QP) probePSN() wire.PSN {
	r := &qp.req
	last := r.sndNxt.Sub(1)
	if i, ok := qp.wqeAt(last); ok && qp.sq.slots[i&qp.sq.mask].wr.Opcode == verbs.WRRDMARead {
		st := &qp.sqst[i&qp.sq.mask]
		last = st.firstPSN.Add(st.rcvd)
	}
	if !last.After(r.ackPSN) {
		return qp.resumePSN()
	}
	return last
}

// CCState is a QP's view of its congestion control.
type CCState struct {
	Mode         CCMode
	Window       int     // the path's congestion window, packets (0: no control)
	PathInFlight int     // packets in flight of all QPs to the peer
	InFlight     int     // this QP's packets in flight
	Alpha        float64 // DCQCN's alpha
	SRTT         int64   // smoothed round-trip time, ns
	MinRTT       int64   // the least round trip measured (of the last 10 s), ns
	PathQPs      int     // QPs sharing the window
	// Target is the round trip above which the delay response cuts the
	// window once armed: MinRTT plus Config.TargetDelay scaled for the
	// window (ccPath.target), ns; 0 with no round trip measured yet or the
	// delay response off.
	Target int64
	// TargetDelay is the engine's Config.TargetDelay (its default
	// applied), ns; negative: the delay response is off.
	TargetDelay int64
}

// Congestion returns the QP's congestion control state. Call it with the
// engine serialised, as Output.
func (qp *QP) Congestion() CCState {
	s := CCState{Mode: qp.e.cfg.Congestion, TargetDelay: qp.e.cfg.TargetDelay}
	if p := qp.path; p != nil {
		s.Window, s.PathInFlight, s.InFlight, s.Alpha, s.SRTT, s.MinRTT, s.PathQPs = int(p.cwnd), p.inflight, qp.req.ccOut, p.alpha, p.srtt, p.minRTT, p.refs
		if p.minRTT != 0 && qp.e.cfg.TargetDelay >= 0 {
			s.Target = p.minRTT + p.target(qp.e.cfg.TargetDelay)
		}
	}
	return s
}

// NoteRxDrops tells the engine that the packet path dropped received
// packets (a socket's receive buffer or an AF_XDP ring overflowed): the
// host cannot keep up. Under CCECN the engine then acts as a congested
// switch would, answering the RC packets it inputs during the next
// CNPInterval with CNPs (as if CE-marked), so that the peers it hears from
// slow down instead of losing more.
func (e *Engine) NoteRxDrops(now int64) {
	e.stats.RxCongestion++
	e.rxCongUntil = now + e.cfg.CNPInterval
}

// congested handles an RC packet that arrived CE-marked (ce) or while the
// packet path drops: under CCECN the QP answers with a CNP to its peer QP
// (RoCEv2 Annex A17's notification point), at most one a CNPInterval.
func (qp *QP) congested(now int64, ce bool) {
	e := qp.e
	if ce {
		e.stats.ECNMarked++
	}
	r := &qp.resp
	if e.cfg.Congestion != CCECN || (r.cnpAt != 0 && now-r.cnpAt < e.cfg.CNPInterval) {
		return
	}
	if r.push(respItem{kind: itemCNP}) {
		r.cnpAt = now
		e.stats.CNPsSent++
	}
}

// cnpInput handles a CNP for qp: under CCECN its path's window falls
// (onCNP). A CNP for a QP that is not RC or not connected to the sender is
// dropped and counted.
func (e *Engine) cnpInput(now int64, qp *QP, perr error, from netip.Addr) {
	if qp.typ != verbs.QPTRC || perr != nil {
		e.stats.MalformedDrops++
		return
	}
	if from != qp.remote {
		e.stats.WrongPeerDrops++
		return
	}
	e.stats.CNPsReceived++
	if qp.path != nil && e.cfg.Congestion == CCECN {
		e.onCNP(qp.path, now)
	}
}
