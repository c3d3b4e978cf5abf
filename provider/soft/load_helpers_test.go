//go:build linux

package soft

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/internal/cliflag"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
)

// Helpers of the load tests (load_netns_test.go): RC QPs that WRITE as
// fast as their send queues allow between soft devices in network
// namespaces, what it cost (the engines' counters), and TCP and a latency
// probe beside them. Names start with load.

// loadEnv is the environment variable that selects the full sizes
// (GOROCE_LOAD=full) and the timing assertions that need them; loadEnvCC
// runs the load tests under another congestion mode ("off", "loss", "ecn")
// and loadEnvTarget under another delay target (a duration, or "off": see
// OpenOptions.TargetDelay) for comparison tables, reporting only.
const (
	loadEnv       = "GOROCE_LOAD"
	loadEnvCC     = "GOROCE_LOAD_CC"
	loadEnvTarget = "GOROCE_LOAD_TARGET"
)

// loadFull reports whether GOROCE_LOAD=full.
func loadFull() bool { return os.Getenv(loadEnv) == "full" }

// loadMode returns the congestion mode of the load tests (GOROCE_LOAD_CC,
// default the engine's default) and whether it and the delay target
// (GOROCE_LOAD_TARGET) are the defaults, which the acceptance criteria
// are about.
func loadMode(t *testing.T) (engine.CCMode, bool) {
	s := os.Getenv(loadEnvCC)
	if s == "" {
		return engine.CCDefault, loadTarget(t) == 0
	}
	m, ok := engine.ParseCCMode(s)
	if !ok {
		t.Fatalf("%s=%q: want off, loss or ecn", loadEnvCC, s)
	}
	return m, m == engine.CCECN
}

// loadDevice opens a soft device in ns on addr with congestion mode m,
// closed at the end of the test (before the namespaces go).
func loadDevice(t *testing.T, ns *netns.NS, addr netip.Addr, name string, m engine.CCMode) *Device {
	t.Helper()
	var c *udp.Conn
	e2eMust(t, ns.Do(func() (err error) { c, err = udp.Listen(addr, udp.Options{}); return err }))
	d, err := New(Options{Name: name, Conn: c, Engine: engine.Config{Congestion: m, TargetDelay: int64(loadTarget(t))}})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// loadTarget returns the delay target of the load tests' devices
// (GOROCE_LOAD_TARGET; 0, the default, when unset).
func loadTarget(t *testing.T) time.Duration {
	s := os.Getenv(loadEnvTarget)
	if s == "" {
		return 0
	}
	var d time.Duration
	if err := (cliflag.Target{Delay: &d}).Set(s); err != nil {
		t.Fatalf("%s=%q: %v", loadEnvTarget, s, err)
	}
	return d
}

// loadSync orders the test goroutine's accesses to registered memory and
// the devices' drivers' for the race detector (see e2eEnv.sync).
func loadSync(devs ...*Device) {
	for _, d := range devs {
		d.Stats()
	}
}

// loadQP is one RC QP of a load: it WRITEs wrs times size bytes, WRITE j
// from slot j%slots of its source region to the same slot of its
// destination region.
type loadQP struct {
	qp       verbs.QP
	cq       verbs.CQ // its send CQ, which other QPs of its device share
	src, dst *e2eRes
	srcOff   int // its source region in src.buf
	dstOff   int // its destination region in dst.buf
	slots    int
	size     int
	wrs      int

	depth int // the most WRITEs it has unpolled (its send queue's depth)

	posted, done int
	polled       int           // completions polled, in error or not
	failed       bool          // a completion in error: the QP stopped
	firstErr     verbs.WC      // the first completion in error
	end          time.Duration // when its last WRITE completed
}

// post posts k's WRITEs until its send queue is full or all are posted.
func (x *loadQP) post(k int) error {
	// At most depth WRITEs whose completions were not polled: the send
	// queue frees a slot when its WRITE completes, before the completion
	// is polled, and its CQ holds depth completions a QP.
	for x.posted < x.wrs && !x.failed && x.posted-x.polled < x.depth {
		slot := x.posted % x.slots
		_, err := x.qp.PostSend([]verbs.SendWR{{WRID: uint64(k)<<32 | uint64(x.posted), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList:     x.src.sge(x.srcOff+slot*x.size, x.size),
			RemoteAddr: x.dst.mr.Addr() + uint64(x.dstOff+slot*x.size), RKey: x.dst.mr.RKey()}})
		if errors.Is(err, verbs.ErrQueueFull) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("QP %#x: PostSend: %w", x.qp.Num(), err)
		}
		x.posted++
	}
	return nil
}

// loadRun is what a load loop did.
type loadRun struct {
	elapsed    time.Duration
	bytes      int64 // bytes of the WRITEs that completed successfully
	errs       int   // completions in error
	unfinished int   // WRITEs neither completed nor failed at the deadline
	stall      string
}

// loadStall describes up to 4 QPs whose WRITEs did not all complete.
func loadStall(qps []*loadQP) string {
	var s []string
	for _, x := range qps {
		if x.done < x.wrs && !x.failed && len(s) < 4 {
			cc := ""
			if q, ok := x.qp.(*QP); ok {
				cc = fmt.Sprintf(", congestion %+v", q.Congestion())
			}
			s = append(s, fmt.Sprintf("QP %#x: %d WRITEs posted, %d completed%s", x.qp.Num(), x.posted, x.done, cc))
		}
	}
	return strings.Join(s, "; ")
}

// loadLoop posts every QP's WRITEs, reposting as completions come, until
// all completed or failed or limit passed, and returns what it did. The
// send CQs must hold depth completions for each of their QPs.
func loadLoop(qps []*loadQP, limit time.Duration) (loadRun, error) {
	var cqs []verbs.CQ
	for _, x := range qps {
		if !slices.Contains(cqs, x.cq) {
			cqs = append(cqs, x.cq)
		}
	}
	var r loadRun
	left := 0
	for _, x := range qps {
		left += x.wrs
	}
	start := time.Now()
	for k, x := range qps {
		x.posted, x.done, x.polled, x.failed, x.end = 0, 0, 0, false, 0
		if err := x.post(k); err != nil {
			return r, err
		}
	}
	wc := make([]verbs.WC, 64)
	deadline := start.Add(limit)
	for left > 0 {
		progress := false
		for _, cq := range cqs {
			n := cq.Poll(wc)
			progress = progress || n > 0
			for _, c := range wc[:n] {
				k := int(c.WRID >> 32)
				if k >= len(qps) {
					return r, fmt.Errorf("completion of an unknown WRITE: %+v", c)
				}
				x := qps[k]
				x.polled++
				left--
				if c.Status != verbs.WCSuccess {
					r.errs++
					if !x.failed {
						x.failed, x.firstErr = true, c
						left -= x.wrs - x.posted // never posted
					}
					continue
				}
				x.done++
				r.bytes += int64(x.size)
				if x.done == x.wrs {
					x.end = time.Since(start)
				}
				if err := x.post(k); err != nil {
					return r, err
				}
			}
		}
		if !progress {
			if time.Now().After(deadline) {
				r.unfinished, r.stall = left, loadStall(qps)
				break
			}
			// A completion may come before the driver frees its send
			// queue slot: a repost then finds the queue full, and a QP
			// whose every WRITE completed so would wait for nothing.
			for k, x := range qps {
				if x.posted < x.wrs && !x.failed && x.posted-x.polled < x.depth {
					if err := x.post(k); err != nil {
						return r, err
					}
				}
			}
			e2eYield()
		}
	}
	r.elapsed = time.Since(start)
	return r, nil
}

// loadCheckData fails unless every slot each QP wrote at least once holds
// its source slot's bytes.
func loadCheckData(t *testing.T, qps []*loadQP) {
	t.Helper()
	for k, x := range qps {
		for s := range min(x.done, x.slots) {
			e2eSame(t, fmt.Sprintf("QP %d (%#x) slot %d", k, x.qp.Num(), s),
				x.dst.buf[x.dstOff+s*x.size:][:x.size], x.src.buf[x.srcOff+s*x.size:][:x.size])
		}
	}
}

// loadFirstErrors describes the first completions in error of up to 4 QPs.
func loadFirstErrors(qps []*loadQP) string {
	var s []string
	for _, x := range qps {
		if x.failed && len(s) < 4 {
			s = append(s, fmt.Sprintf("QP %#x: %v (vendor_err %d) after %d WRITEs", x.qp.Num(), x.firstErr.Status, x.firstErr.VendorErr, x.done))
		}
	}
	return strings.Join(s, "; ")
}

// loadJain returns Jain's fairness index of the QPs' goodputs (each QP's
// bytes over the time it took): 1 when all are equal, 1/n when one QP had
// all.
func loadJain(qps []*loadQP, elapsed time.Duration) float64 {
	var sum, sq float64
	for _, x := range qps {
		end := x.end
		if x.done < x.wrs {
			end = elapsed // unfinished: its rate over the whole run
		}
		g := float64(x.done*x.size) / max(end, time.Microsecond).Seconds()
		sum, sq = sum+g, sq+g*g
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(qps)) * sq)
}

// loadCost is the growth of the counters of a set of devices.
type loadCost struct {
	tx, resent, timeouts, probes, naks uint64
	peerTx                             uint64 // sent by all but the first device: the ACKs of a one-way load
	cuts, cnpsRx, cnpsTx, marked       uint64
	overruns                           uint64 // completions lost to a full CQ (a harness defect)
}

// loadStats returns the devices' counters, to be passed to loadCostSince.
func loadStats(devs []*Device) []engine.Stats {
	s := make([]engine.Stats, len(devs))
	for i, d := range devs {
		s[i] = d.Stats()
	}
	return s
}

// loadCostSince adds up the devices' counters' growth since before.
func loadCostSince(devs []*Device, before []engine.Stats) loadCost {
	var c loadCost
	for i, d := range devs {
		s, b := d.Stats(), before[i]
		c.tx += s.TxPackets - b.TxPackets
		if i > 0 {
			c.peerTx += s.TxPackets - b.TxPackets
		}
		c.resent += s.Retransmits - b.Retransmits
		c.timeouts += s.Timeouts - b.Timeouts
		c.probes += s.TailProbes - b.TailProbes
		c.naks += s.NAKsReceived - b.NAKsReceived
		c.cuts += s.CongestionCuts - b.CongestionCuts
		c.cnpsRx += s.CNPsReceived - b.CNPsReceived
		c.cnpsTx += s.CNPsSent - b.CNPsSent
		c.marked += s.ECNMarked - b.ECNMarked
		c.overruns += s.CQOverruns - b.CQOverruns
	}
	return c
}

// share returns the retransmitted packets' share of the packets sent.
func (c loadCost) share() float64 { return float64(c.resent) / float64(max(c.tx, 1)) }

// loadPercentile returns the p-th percentile (0 to 100) of ds, leaving
// ds as it is.
func loadPercentile[T cmp.Ordered](ds []T, p float64) T {
	if len(ds) == 0 {
		var zero T
		return zero
	}
	ds = slices.Clone(ds) // the caller's stay in the order they came
	slices.Sort(ds)
	i := int(math.Ceil(p/100*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// loadProbe is a 64-byte SEND ping-pong between two RC QPs with CQs of
// their own: a on the pinging device, b on the answering one.
type loadProbe struct {
	a, b             *e2eRes
	qa, qb           verbs.QP
	scqA, rcqA       verbs.CQ
	scqB, rcqB       verbs.CQ
	devA, devB       *Device
	inflightA, postB int
	// Where each ping's time went, on verbs.Now's clock: the ping from its
	// post to the answering engine's completion, the answering poller's
	// delay, the pong from its post to the pinging engine's completion,
	// the pinging poller's delay (loadProbeSplit). Only while split is set.
	split  bool
	splits [][4]time.Duration
}

const loadProbeSize = 64

// loadNewProbe creates the probe's QPs between devices da and db.
func loadNewProbe(t *testing.T, da, db *Device, pmtu verbs.MTU) *loadProbe {
	p := &loadProbe{a: e2eNewRes(t, da, 2*loadProbeSize), b: e2eNewRes(t, db, 2*loadProbeSize), devA: da, devB: db}
	p.scqA, p.rcqA = p.a.cq(t, 16), p.a.cq(t, 16)
	p.scqB, p.rcqB = p.b.cq(t, 16), p.b.cq(t, 16)
	p.qa = p.a.qp(t, verbs.QPTRC, p.scqA, p.rcqA, nil, 4)
	p.qb = p.b.qp(t, verbs.QPTRC, p.scqB, p.rcqB, nil, 4)
	e2eConnect(t, pmtu, p.qa, da, 0x10101, p.qb, db, 0x20202)
	e2eFill(p.a.buf[:loadProbeSize], 7)
	e2eFill(p.b.buf[:loadProbeSize], 8)
	for _, side := range []struct {
		qp verbs.QP
		r  *e2eRes
	}{{p.qa, p.a}, {p.qb, p.b}} {
		_, err := side.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: side.r.sge(loadProbeSize, loadProbeSize)}, {WRID: 2, SGList: side.r.sge(loadProbeSize, loadProbeSize)}})
		e2eMust(t, err)
	}
	return p
}

// wait polls cq for one completion until deadline, reaping the send CQs
// meanwhile.
func (p *loadProbe) wait(cq verbs.CQ, what string, deadline time.Time) (int64, error) {
	wc := make([]verbs.WC, 4)
	for {
		for _, s := range []verbs.CQ{p.scqA, p.scqB} {
			for _, c := range wc[:s.Poll(wc)] {
				if c.Status != verbs.WCSuccess {
					return 0, fmt.Errorf("probe: a SEND completed in error: %+v", c)
				}
			}
		}
		if cq.Poll(wc[:1]) == 1 {
			if wc[0].Status != verbs.WCSuccess || wc[0].ByteLen != loadProbeSize {
				return 0, fmt.Errorf("probe: %s: %+v", what, wc[0])
			}
			return wc[0].Timestamp, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("probe: no %s after 5 s", what)
		}
		e2eYield()
	}
}

// ping sends one 64-byte SEND from a to b, which answers with one back,
// and returns the round trip as a's application sees it.
func (p *loadProbe) ping() (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(5 * time.Second)
	send := func(qp verbs.QP, r *e2eRes) error {
		for {
			_, err := qp.PostSend([]verbs.SendWR{{WRID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: r.sge(0, loadProbeSize)}})
			// The reply can come before the ACK of the message it answers
			// (a lost ACK waits for a later one): the send queue's slots
			// free as ACKs come, so a full queue waits for them.
			if !errors.Is(err, verbs.ErrQueueFull) || time.Now().After(deadline) {
				return err
			}
			e2eYield()
		}
	}
	repost := func(qp verbs.QP, r *e2eRes) error {
		_, err := qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: r.sge(loadProbeSize, loadProbeSize)}})
		return err
	}
	t0 := verbs.Now()
	if err := send(p.qa, p.a); err != nil {
		return 0, err
	}
	inB, err := p.wait(p.rcqB, "ping received", deadline)
	if err != nil {
		return 0, err
	}
	t1 := verbs.Now()
	if err := repost(p.qb, p.b); err != nil {
		return 0, err
	}
	t2 := verbs.Now()
	if err := send(p.qb, p.b); err != nil {
		return 0, err
	}
	inA, err := p.wait(p.rcqA, "pong received", deadline)
	if err != nil {
		return 0, err
	}
	rtt, t3 := time.Since(start), verbs.Now()
	if p.split {
		p.splits = append(p.splits, [4]time.Duration{time.Duration(inB - t0), time.Duration(t1 - inB), time.Duration(inA - t2), time.Duration(t3 - inA)})
	}
	return rtt, repost(p.qa, p.a)
}

// run pings until stop is closed, n round trips were measured or limit
// passed, and returns the round trips.
func (p *loadProbe) run(stop <-chan struct{}, n int, limit time.Duration) ([]time.Duration, error) {
	var rtts []time.Duration
	end := time.Now().Add(limit)
	for len(rtts) < n && time.Now().Before(end) {
		select {
		case <-stop:
			return rtts, nil
		default:
		}
		rtt, err := p.ping()
		if err != nil {
			return rtts, err
		}
		rtts = append(rtts, rtt)
	}
	return rtts, nil
}

// loadProbeSplit says where the time of the pings at or above the p-th
// percentile of their round trips went, on average (see loadProbe.splits).
func loadProbeSplit(splits [][4]time.Duration, p float64) string {
	if len(splits) == 0 {
		return ""
	}
	total := func(s [4]time.Duration) time.Duration { return s[0] + s[1] + s[2] + s[3] }
	s := slices.Clone(splits)
	slices.SortFunc(s, func(a, b [4]time.Duration) int { return cmp.Compare(total(a), total(b)) })
	tail := s[min(int(p/100*float64(len(s))), len(s)-1):]
	var sum [4]time.Duration
	for _, x := range tail {
		for i := range sum {
			sum[i] += x[i]
		}
	}
	n := time.Duration(len(tail))
	return fmt.Sprintf("the slowest %d: ping %v, answer's poll %v, pong %v, ping's poll %v",
		len(tail), (sum[0] / n).Round(time.Microsecond), (sum[1] / n).Round(time.Microsecond), (sum[2] / n).Round(time.Microsecond), (sum[3] / n).Round(time.Microsecond))
}

// loadTCP runs iperf3 -P streams for secs seconds from ns to a server in
// srv listening on addr, through whatever lies between, and returns the
// goodput the server received (bits/s), the bytes sent and the segments
// the clients retransmitted. Both processes end with the call.
func loadTCP(srv, cli *netns.NS, addr netip.Addr, streams, secs int) (bps float64, sent int64, retr int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+30)*time.Second)
	defer cancel()
	server := exec.CommandContext(ctx, "ip", "netns", "exec", srv.Name, "iperf3", "-s", "-1", "-B", addr.String())
	if err := server.Start(); err != nil {
		return 0, 0, 0, err
	}
	defer func() {
		cancel() // kills the server if the client never reached it
		server.Wait()
	}()
	var out []byte
	for try := 0; try < 20; try++ { // until the server listens
		time.Sleep(100 * time.Millisecond)
		out, err = exec.CommandContext(ctx, "ip", "netns", "exec", cli.Name, "iperf3", "-c", addr.String(),
			"-P", fmt.Sprint(streams), "-t", fmt.Sprint(secs), "-J").Output()
		if err == nil {
			break
		}
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("iperf3: %w: %s", err, out)
	}
	var rep struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			SumSent struct {
				Bytes       int64 `json:"bytes"`
				Retransmits int   `json:"retransmits"`
			} `json:"sum_sent"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return 0, 0, 0, fmt.Errorf("iperf3 -J: %w", err)
	}
	return rep.End.SumReceived.BitsPerSecond, rep.End.SumSent.Bytes, rep.End.SumSent.Retransmits, nil
}
