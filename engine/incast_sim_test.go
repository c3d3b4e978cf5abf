package engine

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// The simulated incast: engines in virtual time, their packets through a
// model of the network TestLoadIncast (provider/soft) builds of namespaces:
// senders whose links are fast, into a router whose link to the receiver
// is a drop-tail queue of simQueueLimit bytes served at simRate. With no
// host noise, it tells what the congestion control itself does, exactly
// and in well under a second of real time.
const (
	simSenders  = 4
	simPerHost  = 16
	simRate     = 500e6          // bits/s, the bottleneck
	simHostRate = 4e9            // bits/s, each sender's link
	simQueue    = 64 << 10       // bytes the bottleneck queue holds
	simProp     = 10_000         // ns, each way
	simStep     = 2_000          // ns, the hosts' scheduling quantum
	simWrite    = 64 << 10       // bytes a WRITE
	simDepth    = 4              // WRITEs a QP keeps posted
	simLimit    = 20_000_000_000 // ns of virtual time the run may take
	simWire     = 58             // bytes a packet takes on the wire beyond its UDP payload (Ethernet, IPv4, UDP)
	simMarkAt   = simQueue / 4   // bytes queued from which the marking router marks CE
	simWRs      = 12             // WRITEs a QP
)

// simPkt is a packet on its way, due at at.
type simPkt struct {
	b        []byte
	from, to netip.Addr
	at       int64
	ce       bool
}

// simNet is the incast's network and its counters.
type simNet struct {
	now      int64
	mark     bool              // CE-mark from simMarkAt queued bytes instead of only dropping
	queue    []simPkt          // the bottleneck's, in order
	qBytes   int               // bytes in queue
	qFree    int64             // when the bottleneck ends sending its head
	toRecv   []simPkt          // served, on the way to the receiver
	back     []simPkt          // the receiver's packets, on the way back
	hostFree [simSenders]int64 // when each sender's link is free
	drops    int
	marked   int
	senders  []*Engine
	qSamples []int64 // the queue's bytes at each step of the load
}

// enqueue takes a sender's packet into the bottleneck (or drops it).
func (n *simNet) enqueue(p simPkt) {
	size := len(p.b) + simWire
	if n.qBytes+size > simQueue {
		n.drops++
		return
	}
	if n.mark && n.qBytes >= simMarkAt {
		p.ce = true
		n.marked++
	}
	n.queue = append(n.queue, p)
	n.qBytes += size
}

// serve moves what the bottleneck sent by now towards the receiver.
func (n *simNet) serve() {
	for len(n.queue) > 0 {
		p := n.queue[0]
		start := max(n.qFree, p.at)
		done := start + int64(float64(len(p.b)+simWire)*8/simRate*1e9)
		if done > n.now {
			return
		}
		n.qFree = done
		n.queue = n.queue[1:]
		n.qBytes -= len(p.b) + simWire
		p.at = done + simProp
		n.toRecv = append(n.toRecv, p)
	}
}

// simBulk is one bulk QP: its sides, what it posted and what completed.
type simBulk struct {
	a, b              *side
	posted, done, wrs int
	bytes             int
	end               int64 // when its last WRITE completed
	err               verbs.WCStatus
}

// simResult is what a simulated incast did.
type simResult struct {
	goodput   float64 // bits/s
	jain      float64
	sent      uint64 // the senders' packets
	resent    uint64
	drops     int
	marked    int
	errs      int
	elapsed   int64
	pingP99   int64 // ns: the 64-byte ping-pong's p99 round trip under load
	pingIdle  int64 // ns: its round trip with no load
	maxMinRTT int64 // ns: the greatest of the senders' least round trips
	cuts      uint64
	delayCuts uint64
	cnps      uint64
	timeouts  uint64
	probes    uint64
	naks      uint64
	dups      uint64 // duplicate requests the receiver saw
	oos       uint64 // requests the receiver saw ahead of the PSN expected
	qMean     int64  // bytes in the bottleneck queue, on average over the steps of the load
	qP99      int64  // and their 99th percentile
}

func (r simResult) String() string {
	return fmt.Sprintf("%.0f Mbit/s (%.2fx), queue mean %d B p99 %d B, Jain %.3f, resent %d of %d (%.2f%%), dropped %d, marked %d, %d in error, ping p99 %v µs (idle %v µs), %d cuts (%d for delay), %d CNPs; %d timeouts, %d probes, %d NAKs; receiver: %d duplicates, %d out of sequence",
		r.goodput/1e6, r.goodput/simRate, r.qMean, r.qP99, r.jain, r.resent, r.sent, 100*float64(r.resent)/float64(max(r.sent, 1)), r.drops, r.marked, r.errs,
		r.pingP99/1000, r.pingIdle/1000, r.cuts, r.delayCuts, r.cnps, r.timeouts, r.probes, r.naks, r.dups, r.oos)
}

// simIncast runs simSenders x simPerHost RC QPs, wrs WRITEs each, into one
// receiver through the bottleneck, under mode m (mark: the router marks
// CE), with a 64-byte SEND ping-pong from sender 0 beside them.
func simIncast(t *testing.T, m CCMode, wrs int, mark bool) simResult {
	cfg := func(addr string) Config {
		return Config{Local: netip.MustParseAddr(addr), SourcePort: wire.RoCEv2Port, Congestion: m}
	}
	recv, err := New(cfg("10.0.9.1"))
	must(t, err)
	var senders []*Engine
	var qps []*simBulk
	for h := range simSenders {
		e, err := New(cfg(fmt.Sprintf("10.0.%d.1", h)))
		must(t, err)
		senders = append(senders, e)
		for range simPerHost {
			q := &simBulk{a: newSide(t, e, verbs.QPTRC, simWrite), b: newSide(t, recv, verbs.QPTRC, simWrite), wrs: wrs}
			connectRC(t, q.a, q.b, verbs.MTU1024)
			qps = append(qps, q)
		}
	}
	ping := &simPing{a: newSide(t, senders[0], verbs.QPTRC, 128), b: newSide(t, recv, verbs.QPTRC, 128)}
	connectRC(t, ping.a, ping.b, verbs.MTU1024)
	n := &simNet{mark: mark, senders: senders}
	all := append([]*Engine{recv}, senders...)
	idle := simPingIdle(t, n, ping, senders, recv)
	before := make([]Stats, len(senders))
	for i, e := range senders {
		before[i] = e.Stats()
	}
	start, finished := n.now, 0
	for n.now-start < simLimit && finished < len(qps) {
		n.now += simStep
		for _, e := range all {
			if d := e.NextDeadline(); d != 0 && d <= n.now {
				e.Tick(n.now)
			}
		}
		for _, q := range qps {
			q.post(t)
		}
		ping.step(t, n.now)
		simSend(n, senders)
		n.serve()
		n.qSamples = append(n.qSamples, int64(n.qBytes))
		simDeliver(n, recv)
		finished = 0
		for _, q := range qps {
			q.reap()
			if q.done == q.wrs && q.end == 0 {
				q.end = n.now - start
			}
			if q.done == q.wrs || q.err != verbs.WCSuccess {
				finished++
			}
		}
	}
	r := simResult{elapsed: n.now - start, drops: n.drops, marked: n.marked, pingIdle: idle, pingP99: simP99(ping.rtts)}
	var qsum int64
	for _, q := range n.qSamples {
		qsum += q
	}
	r.qMean, r.qP99 = qsum/int64(max(len(n.qSamples), 1)), simP99(n.qSamples)
	for i, e := range senders {
		s := e.Stats()
		r.sent += s.TxPackets - before[i].TxPackets
		r.resent += s.Retransmits - before[i].Retransmits
		r.cuts += s.CongestionCuts - before[i].CongestionCuts
		r.delayCuts += s.DelayCuts - before[i].DelayCuts
		r.cnps += s.CNPsReceived - before[i].CNPsReceived
		r.timeouts += s.Timeouts - before[i].Timeouts
		r.probes += s.TailProbes - before[i].TailProbes
		r.naks += s.NAKsReceived - before[i].NAKsReceived
	}
	for h := range simSenders {
		r.maxMinRTT = max(r.maxMinRTT, qps[h*simPerHost].a.qp.Congestion().MinRTT)
	}
	rs := recv.Stats()
	r.dups, r.oos = rs.Duplicates, rs.OutOfSequence
	var sum, sq float64
	total := 0
	for _, q := range qps {
		if q.err != verbs.WCSuccess || q.done < q.wrs {
			if r.errs == 0 {
				t.Logf("first QP in error: %v after %d of %d WRITEs; %+v, requester %+v", q.err, q.done, q.wrs, q.a.qp.Congestion(), q.a.qp.req)
			}
			r.errs++
		}
		total += q.bytes
		x := float64(q.bytes) / float64(max(q.end, 1)) // its rate
		if q.end == 0 {
			x = float64(q.bytes) / float64(r.elapsed)
		}
		sum, sq = sum+x, sq+x*x
	}
	r.goodput = float64(total) * 8 / (float64(r.elapsed) / 1e9)
	r.jain = sum * sum / (float64(len(qps)) * sq)
	return r
}

// post keeps simDepth WRITEs posted on the QP until it posted all.
func (q *simBulk) post(t *testing.T) {
	for q.posted < q.wrs && q.posted-q.done < simDepth && q.err == verbs.WCSuccess {
		_, err := q.a.qp.PostSend([]verbs.SendWR{{WRID: uint64(q.posted), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: q.a.sge(0, simWrite), RemoteAddr: q.b.mr.Addr(), RKey: q.b.mr.RKey()}})
		must(t, err)
		q.posted++
	}
}

// reap polls the QP's completions.
func (q *simBulk) reap() {
	var w [16]verbs.WC
	for k := q.a.scq.Poll(w[:]); k > 0; k = q.a.scq.Poll(w[:]) {
		for _, c := range w[:k] {
			if c.Status != verbs.WCSuccess {
				q.err = c.Status
				continue
			}
			q.done++
			q.bytes += simWrite
		}
	}
}

// simSend takes what each sender outputs onto its link and into the
// bottleneck, as far as the link is free by the end of this step.
func simSend(n *simNet, senders []*Engine) {
	buf := make([]byte, wire.MaxPMTU+128)
	for h, e := range senders {
		for n.hostFree[h] <= n.now {
			k, to, ok := e.Output(n.now, buf)
			if !ok {
				break
			}
			at := max(n.hostFree[h], n.now-simStep)
			n.hostFree[h] = at + int64(float64(k+simWire)*8/simHostRate*1e9)
			n.enqueue(simPkt{b: append([]byte(nil), buf[:k]...), from: e.Local(), to: to, at: n.hostFree[h] + simProp})
		}
	}
}

// simDeliver inputs what reached the receiver and the senders by now, and
// sends the receiver's answers back (its way back is not congested).
func simDeliver(n *simNet, recv *Engine) {
	k := 0
	for _, p := range n.toRecv {
		if p.at > n.now {
			n.toRecv[k] = p
			k++
			continue
		}
		recv.InputPacket(n.now, p.b, p.from, wire.RoCEv2Port, &RxInfo{CE: p.ce})
	}
	n.toRecv = n.toRecv[:k]
	buf := make([]byte, wire.MaxPMTU+128)
	for {
		m, to, ok := recv.Output(n.now, buf)
		if !ok {
			break
		}
		n.back = append(n.back, simPkt{b: append([]byte(nil), buf[:m]...), from: recv.Local(), to: to, at: n.now + simProp})
	}
	k = 0
	for _, p := range n.back {
		if p.at > n.now {
			n.back[k] = p
			k++
			continue
		}
		for _, e := range n.senders {
			if e.Local() == p.to {
				e.Input(n.now, p.b, p.from, wire.RoCEv2Port)
			}
		}
	}
	n.back = n.back[:k]
}

// simPing is the 64-byte SEND ping-pong beside the load.
type simPing struct {
	a, b   *side
	sentAt int64 // when the outstanding ping was posted (0: none)
	rtts   []int64
	seq    uint64
}

// step posts the next ping when none is outstanding, and notes a pong.
func (p *simPing) step(t *testing.T, now int64) {
	var w [4]verbs.WC
	for _, s := range []*side{p.a, p.b} {
		s.scq.Poll(w[:]) // the SENDs' completions
	}
	if p.b.rcq.Poll(w[:1]) == 1 { // the ping arrived: pong
		p.send(t, p.b)
	}
	if p.a.rcq.Poll(w[:1]) == 1 {
		p.rtts = append(p.rtts, now-p.sentAt)
		p.sentAt = 0
	}
	if p.sentAt == 0 {
		p.sentAt = now
		p.send(t, p.a)
	}
}

// send posts a receive and a 64-byte SEND on s.
func (p *simPing) send(t *testing.T, s *side) {
	p.seq++
	peer := p.b
	if s == p.b {
		peer = p.a
	}
	_, err := peer.qp.PostRecv([]verbs.RecvWR{{WRID: p.seq, SGList: peer.sge(64, 64)}})
	must(t, err)
	_, err = s.qp.PostSend([]verbs.SendWR{{WRID: p.seq, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: s.sge(0, 64)}})
	must(t, err)
}

// simPingIdle measures the ping's p99 with no load, 200 pings.
func simPingIdle(t *testing.T, n *simNet, p *simPing, senders []*Engine, recv *Engine) int64 {
	for len(p.rtts) < 200 {
		n.now += simStep
		p.step(t, n.now)
		simSend(n, senders)
		n.serve()
		simDeliver(n, recv)
	}
	idle := simP99(p.rtts)
	p.rtts = p.rtts[:0]
	return idle
}

// simP99 returns the 99th percentile of v.
func simP99(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)*99/100]
}

// TestSimIncast: 4 senders x 16 RC QPs WRITE 64 KiB each into one receiver
// through a simulated 500 Mbit/s drop-tail bottleneck with a 64 KB queue
// (and with a router marking CE from a quarter of it), in virtual time:
// the congestion control keeps the bottleneck busy (0.92x its rate is all
// of it: headers take the rest at path MTU 1024), shares it fairly among
// the 64 QPs (Jain's index over their rates), resends little, keeps the
// queue short of full, and no QP fails. Loss only (CCLoss) must do as
// well, for its delay response is the same.
func TestSimIncast(t *testing.T) {
	if testing.Short() {
		t.Skip("simulated incast skipped in -short mode")
	}
	for _, c := range []struct {
		name   string
		mode   CCMode
		mark   bool
		resent float64 // the most resent, a share of the packets sent
	}{{"drop", CCECN, false, 0.02}, {"mark", CCECN, true, 0.01}, {"loss", CCLoss, false, 0.02}} {
		t.Run(c.name, func(t *testing.T) {
			r := simIncast(t, c.mode, simWRs, c.mark)
			t.Log(r)
			if r.errs > 0 {
				t.Errorf("%d QPs failed or did not finish", r.errs)
			}
			if r.goodput < 0.9*simRate {
				t.Errorf("goodput %.0f Mbit/s, want >= 0.9x the bottleneck's %.0f", r.goodput/1e6, simRate/1e6)
			}
			if r.jain < 0.95 {
				t.Errorf("Jain's index over the QPs' rates %.3f, want >= 0.95", r.jain)
			}
			if share := float64(r.resent) / float64(r.sent); share > c.resent {
				t.Errorf("resent %.2f%% of the packets, want at most %.0f%%", 100*share, 100*c.resent)
			}
			// Each sender's least round trip is the path's, not its queue's:
			// the first packet on an idle path asks for its ACK (before, the
			// senders first timed packets behind their first windows, 500
			// µs and more, and held the queue that high).
			if r.maxMinRTT > 4*r.pingIdle {
				t.Errorf("a sender's least round trip %d µs, want at most 4x the idle ping's %d µs", r.maxMinRTT/1000, r.pingIdle/1000)
			}
			// A loss-only control fills it (p99 65 KB).
			// Growth stops above the target delay (ccPath): the mean
			// queue was 25 KB while the window grew between the delay
			// cuts, 14 KB since.
			if r.qMean > simQueue*5/16 {
				t.Errorf("the queue's mean %d bytes, want at most 5/16 of its %d", r.qMean, simQueue)
			}
			if r.qP99 > simQueue*7/8 {
				t.Errorf("the queue's p99 %d bytes, want at most 7/8 of its %d", r.qP99, simQueue)
			}
		})
	}
}
