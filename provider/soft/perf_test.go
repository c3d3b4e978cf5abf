package soft

// Performance benchmarks of the soft provider, each beside a baseline
// measured in the same run, interleaved with it (see perfInterleave): the machine
// is shared and noisy, so compare the ratios (x-raw), not absolute figures.
//
//   - BenchmarkPerfWrite: RC RDMA WRITE goodput at 64 B, 4 KiB, 64 KiB and
//     1 MiB, path MTU 4096, 16 WRITEs outstanding, beside the same number of
//     UDP datagrams of the same wire sizes pushed through packetio/udp Conns
//     (sendmmsg/recvmmsg batches of 32) with as many datagrams in flight.
//   - BenchmarkPerfRead: RDMA READ goodput at 64 KiB, 16 READs outstanding
//     (max_rd_atomic 16), beside a raw request/response exchange of the same
//     datagrams.
//   - BenchmarkPerfFetchAdd: FETCH_AND_ADD rate, 16 outstanding, beside a raw
//     request/response exchange of the same datagrams.
//   - BenchmarkPerfSendRTT: 64-byte SEND round trip between two network
//     namespaces over veth, beside a raw UDP ping-pong in the same namespaces.
//   - BenchmarkPerfIdleWrite: a WRITE issued after a pause, when the drivers
//     parked: the wake-up latency of a parked driver.
//   - BenchmarkPerfPostPoll: WQEs posted and retired per second through the
//     verbs API over the in-memory pipe (no sockets), to compare with the
//     engine's BenchmarkPostPoll.
//
// Metrics: MB/s (or Mops/s, µs/rtt) is the soft figure; raw-MB/s (...) the
// baseline's; x-raw the ratio soft/raw of goodput or rate (higher is better)
// or of round-trip time (lower is better); retx/op and pkts/op count engine
// retransmissions and packets (both devices); sqfull/op counts PostSend
// calls refused with a full send queue although the CQ said a slot was free.
//
// Loopback variants use 127.0.5.1 and 127.0.5.2 on a port the kernel picks;
// namespace variants (root only, else skipped with the reason) use
// netns.NewPair at MTU 9000. Poll loops yield (runtime.Gosched) whenever a
// poll finds nothing, and fail after perfTimeout without progress.
//
//	go test -run - -bench Perf -benchtime 1s -count 5 ./provider/soft

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// perfTimeout is how long a poll loop waits without progress before it
// gives up.
const perfTimeout = 10 * time.Second

// perfDepth is the number of WRs (or raw requests) kept outstanding.
const perfDepth = 16

// perfBatch is the datagram batch of the raw baselines (the soft driver's
// default, packetio.DefaultBatch).
const perfBatch = 32

// perfWindow is the engine's default window (packets unacknowledged).
const perfWindow = 512

var errPerfStalled = errors.New("no progress for " + perfTimeout.String())

// perfPast is a deadline already passed: Receive polls without waiting.
var perfPast = time.Unix(1, 0)

// perfStall tracks progress of a poll loop.
type perfStall struct {
	deadline time.Time
	spins    int
}

func newPerfStall() perfStall { return perfStall{deadline: time.Now().Add(perfTimeout)} }

func (s *perfStall) progress() { s.spins = 0; s.deadline = time.Now().Add(perfTimeout) }

// idle yields the processor (the drivers need it: 2 cores) and reports
// errPerfStalled once perfTimeout passed without progress.
func (s *perfStall) idle() error {
	runtime.Gosched()
	s.spins++
	if s.spins&1023 == 0 && time.Now().After(s.deadline) {
		return errPerfStalled
	}
	return nil
}

// perfEnv is where the two ends live: loopback, or two namespaces.
type perfEnv struct {
	name     string
	nsA, nsB *netns.NS // nil on loopback
	a, b     netip.Addr
}

func perfLoopback() perfEnv {
	return perfEnv{name: "lo", a: netip.MustParseAddr("127.0.5.1"), b: netip.MustParseAddr("127.0.5.2")}
}

// perfNetns creates two namespaces joined by veth at MTU 9000 (a 4096-byte
// path MTU fits); it skips b when not root.
func perfNetns(b *testing.B) perfEnv {
	p := netns.NewPair(b, netns.Options{MTU: 9000})
	return perfEnv{name: "netns", nsA: p.A, nsB: p.B, a: p.AddrA, b: p.AddrB}
}

// perfForEachEnv runs f as sub-benchmarks net=lo and net=netns.
func perfForEachEnv(b *testing.B, f func(b *testing.B, env perfEnv)) {
	b.Run("net=lo", func(b *testing.B) { f(b, perfLoopback()) })
	b.Run("net=netns", func(b *testing.B) { f(b, perfNetns(b)) })
}

func perfInNS(ns *netns.NS, f func() error) error {
	if ns == nil {
		return f()
	}
	return ns.Do(f)
}

// conns opens a UDP Conn on env.a and one on env.b, on the same port (each
// one's default destination port reaches the other), a port the kernel
// picks; they are closed at the end of b unless handed to a Device.
func (env perfEnv) conns(b testing.TB) (ca, cb *udp.Conn) {
	b.Helper()
	for try := 0; ; try++ {
		var err error
		if err = perfInNS(env.nsA, func() (err error) {
			ca, err = udp.Listen(env.a, udp.Options{Port: udp.AnyPort})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		port := int(ca.LocalAddrPort().Port())
		if err = perfInNS(env.nsB, func() (err error) {
			cb, err = udp.Listen(env.b, udp.Options{Port: port})
			return err
		}); err == nil {
			return ca, cb
		}
		ca.Close()
		if try == 10 {
			b.Fatal(err)
		}
	}
}

// rawConns is conns, closed at the end of b.
func (env perfEnv) rawConns(b testing.TB) (ca, cb *udp.Conn) {
	ca, cb = env.conns(b)
	b.Cleanup(func() { ca.Close(); cb.Close() })
	return ca, cb
}

// devices creates two soft devices on a fresh pair of Conns.
func (env perfEnv) devices(b testing.TB, opts Options) (da, db *Device) {
	ca, cb := env.conns(b)
	oa, ob := opts, opts
	oa.Name, oa.Conn, oa.SourcePort = "perfa", ca, ca.LocalAddrPort().Port()
	ob.Name, ob.Conn, ob.SourcePort = "perfb", cb, cb.LocalAddrPort().Port()
	da, err := New(oa)
	must(b, err)
	db, err = New(ob)
	must(b, err)
	b.Cleanup(func() { da.Close(); db.Close() })
	return da, db
}

// perfEnd opens an end with a buffer of size bytes and a QP for depth
// outstanding send WRs.
func perfEnd(t testing.TB, d *Device, size, depth int) *end {
	e := &end{dev: d, buf: make([]byte, size)}
	var err error
	e.ctx, err = d.Open()
	must(t, err)
	e.pd, err = e.ctx.AllocPD()
	must(t, err)
	e.cq, err = e.ctx.CreateCQ(max(2*depth, 64), nil)
	must(t, err)
	e.mr, err = e.pd.RegMR(e.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	must(t, err)
	e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: uint32(depth), MaxRecvWR: uint32(max(depth, 16)), MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	return e
}

// connectPerf brings two RC QPs to RTS aimed at each other, with path MTU
// mtu and rd READs/atomics outstanding each way.
func connectPerf(t testing.TB, a, b *end, mtu verbs.MTU, rd uint8) {
	perfRTS(t, a.qp, b.qp.Num(), b.dev.GID(), mtu, rd)
	perfRTS(t, b.qp, a.qp.Num(), a.dev.GID(), mtu, rd)
}

// perfModifier is a QP of the verbs API or of the engine.
type perfModifier interface {
	Modify(*verbs.QPAttr, verbs.QPAttrMask) error
}

// perfRTS takes an RC QP from RESET to RTS, aimed at QP dest at dgid.
func perfRTS(t testing.TB, qp perfModifier, dest uint32, dgid verbs.GID, mtu verbs.MTU, rd uint8) {
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: mtu, DestQPN: dest, RQPSN: 100,
		MaxDestRdAtomic: rd, MinRNRTimer: 12, AHAttr: verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: dgid}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: rd},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
}

// perfWireSizes returns the transport packet sizes (UDP payload: headers,
// payload, ICRC) a message of n bytes takes at path MTU mtu, for the
// FIRST/MIDDLE/LAST/ONLY opcodes given.
func perfWireSizes(n, mtu int, first, middle, last, only wire.Opcode) []int {
	size := func(op wire.Opcode, payload int) int { return op.Info().HeaderLen + payload + wire.ICRCLen }
	if n <= mtu {
		return []int{size(only, n)}
	}
	k := (n + mtu - 1) / mtu
	s := make([]int, k)
	for i := range s {
		pl := min(mtu, n-i*mtu)
		switch i {
		case 0:
			s[i] = size(first, pl)
		case k - 1:
			s[i] = size(last, pl)
		default:
			s[i] = size(middle, pl)
		}
	}
	return s
}

// perfPoster and perfPoller are the send queue and CQ of the verbs API or
// of the engine.
type perfPoster interface {
	PostSend([]verbs.SendWR) (int, error)
}

type perfPoller interface {
	Poll([]verbs.WC) int
}

// perfPipeline posts n copies of wr, at most depth outstanding, every sig-th
// (and the last) signaled, and waits until all completed. WRIDs are
// sequence numbers: RC completes in order, so a completion for WRID i means
// WRs 0..i are done. When a poll finds nothing, pump (if set) moves packets
// and reports whether any moved; else, or if none moved, it yields.
func perfPipeline(qp perfPoster, cq perfPoller, pump func() bool, wr verbs.SendWR, n, depth, sig int, wrs []verbs.SendWR, wc []verbs.WC) (sqFull int, err error) {
	posted, done := 0, 0
	st := newPerfStall()
	for done < n {
		if k := min(depth-(posted-done), n-posted); k > 0 {
			for j := range k {
				id := posted + j
				w := &wrs[j]
				*w = wr
				w.WRID = uint64(id)
				if (id+1)%sig == 0 || id == n-1 {
					w.Flags |= verbs.SendSignaled
				}
			}
			m, err := qp.PostSend(wrs[:k])
			posted += m
			if err != nil && !errors.Is(err, verbs.ErrQueueFull) {
				return sqFull, err
			}
			if err != nil {
				// The engine pushes a completion before it frees the send
				// queue slot (engine/requester.go acked): a WR polled
				// complete may still hold its slot for a moment.
				sqFull++
			}
		}
		got := cq.Poll(wc)
		for _, w := range wc[:got] {
			if w.Status != verbs.WCSuccess {
				return sqFull, fmt.Errorf("completion %+v", w)
			}
			done = int(w.WRID) + 1
		}
		switch {
		case got > 0:
			st.progress()
		case pump != nil && pump():
		default:
			if err := st.idle(); err != nil {
				return sqFull, fmt.Errorf("%d of %d WRs completed: %w", done, n, err)
			}
		}
	}
	return sqFull, nil
}

// perfReportEngine reports engine and socket counters per operation that
// explain a slow run: request packets retransmitted, ACK timeouts, packets
// sent (both devices), and datagrams the packet paths dropped on receive.
func perfReportEngine(b *testing.B, before, after perfStats, ops int) {
	if ops == 0 {
		return
	}
	per := func(a, b uint64) float64 { return float64(a-b) / float64(ops) }
	b.ReportMetric(per(after.retx, before.retx), "retx/op")
	b.ReportMetric(per(after.timeouts, before.timeouts), "timeouts/op")
	b.ReportMetric(per(after.rxDrops, before.rxDrops), "rxdrops/op")
	b.ReportMetric(per(after.tx, before.tx), "pkts/op")
	b.ReportMetric(per(after.txBatches, before.txBatches), "sendmmsg/op")
}

// perfStats is the part of two devices' counters the benchmarks report.
type perfStats struct{ retx, timeouts, tx, txBatches, rxDrops uint64 }

func perfStatsOf(da, db *Device) perfStats {
	a, b := da.Stats(), db.Stats()
	return perfStats{retx: a.Retransmits + b.Retransmits, timeouts: a.Timeouts + b.Timeouts, tx: a.TxPackets + b.TxPackets,
		rxDrops: da.conn.Stats().RxDrops + db.conn.Stats().RxDrops, txBatches: da.conn.Stats().TxBatches + db.conn.Stats().TxBatches}
}

// perfRawStream sends msgs messages of datagrams of the given sizes from tx to
// rx's address, with at most window datagrams in flight (counted by the
// receiver as it receives them), and waits until rx received them all. Both
// sides poll (Receive with a past deadline) and yield when idle, as the soft
// driver does while busy.
func perfRawStream(tx, rx *udp.Conn, sizes []int, msgs, window int) error {
	total := len(sizes) * msgs
	dst := rx.LocalAddr()
	var got atomic.Int64
	errc := make(chan error, 1)
	go func() {
		st := newPerfStall()
		n := 0
		for n < total {
			pk, err := rx.Receive(perfPast)
			if err != nil {
				errc <- err
				return
			}
			if len(pk) == 0 {
				if err := st.idle(); err != nil {
					errc <- fmt.Errorf("raw receiver: %d of %d datagrams: %w", n, total, err)
					return
				}
				continue
			}
			n += len(pk)
			got.Store(int64(n))
			st.progress()
		}
		errc <- nil
	}()
	sent, si := 0, 0
	st := newPerfStall()
	for sent < total {
		k := min(perfBatch, total-sent, window-(sent-int(got.Load())))
		if k <= 0 {
			select {
			case err := <-errc:
				if err == nil {
					err = errors.New("raw receiver ended early")
				}
				return err
			default:
			}
			if err := st.idle(); err != nil {
				return fmt.Errorf("raw sender: %w", err)
			}
			continue
		}
		pkts := tx.TxBatch(k)
		for i := range pkts {
			pkts[i].Buf = pkts[i].Buf[:sizes[si]]
			pkts[i].Addr = dst
			if si++; si == len(sizes) {
				si = 0
			}
		}
		n, err := tx.Transmit(pkts)
		if err != nil {
			return err
		}
		sent += n
		st.progress()
	}
	return <-errc
}

// perfRawReqResp runs n request/response exchanges between a client Conn and a
// server Conn, depth outstanding: each request is one datagram of reqSize
// bytes, answered by datagrams of the sizes in resp. Both sides poll and
// yield when idle.
func perfRawReqResp(cl, sv *udp.Conn, reqSize int, resp []int, n, depth int) error {
	var stop atomic.Bool
	errc := make(chan error, 1)
	go func() { // the server
		to := cl.LocalAddr()
		st := newPerfStall()
		ri := 0
		for !stop.Load() {
			pk, err := sv.Receive(perfPast)
			if err != nil {
				errc <- err
				return
			}
			if len(pk) == 0 {
				if st.idle() != nil {
					st.progress() // idle servers wait for stop, not a deadline
				}
				continue
			}
			for pending := len(pk) * len(resp); pending > 0; {
				batch := sv.TxBatch(min(perfBatch, pending))
				for i := range batch {
					batch[i].Buf = batch[i].Buf[:resp[ri]]
					batch[i].Addr = to
					if ri++; ri == len(resp) {
						ri = 0
					}
				}
				m, err := sv.Transmit(batch)
				if err != nil {
					errc <- err
					return
				}
				pending -= m
			}
		}
		errc <- nil
	}()
	defer func() { stop.Store(true); <-errc }()
	dst := sv.LocalAddr()
	posted, rcvd := 0, 0
	st := newPerfStall()
	for rcvd < n*len(resp) {
		done := rcvd / len(resp)
		if k := min(perfBatch, depth-(posted-done), n-posted); k > 0 {
			batch := cl.TxBatch(k)
			for i := range batch {
				batch[i].Buf = batch[i].Buf[:reqSize]
				batch[i].Addr = dst
			}
			m, err := cl.Transmit(batch)
			if err != nil {
				return err
			}
			posted += m
		}
		pk, err := cl.Receive(perfPast)
		if err != nil {
			return err
		}
		if len(pk) > 0 {
			rcvd += len(pk)
			st.progress()
		} else if err := st.idle(); err != nil {
			return fmt.Errorf("raw client: %d of %d responses: %w", rcvd, n*len(resp), err)
		}
	}
	return nil
}

// perfInterleave runs b.N operations of soft, timed, in rounds, each round
// preceded by as many operations of raw, untimed; it returns raw's total
// time. Both paths then see the same background load (the machine is
// shared), so their ratio holds where absolute figures drift. prime, when
// set, runs one untimed operation before each soft round: the soft drivers
// parked in the netpoller while raw ran, and a parked driver is woken by the
// netpoller only when a processor goes idle or sysmon polls it (every 10 ms)
// -- never while other goroutines spin, as the benchmark loops do. The
// wake-up cost is measured by BenchmarkPerfIdleWrite. primed counts the
// operations prime ran.
func perfInterleave(b *testing.B, rounds int, raw, prime, soft func(n int) error) (rawDur time.Duration, primed int) {
	b.ResetTimer()
	b.StopTimer()
	per := (b.N + rounds - 1) / rounds
	for done := 0; done < b.N; {
		n := min(per, b.N-done)
		t0 := time.Now()
		if err := raw(n); err != nil {
			b.Fatalf("raw: %v", err)
		}
		rawDur += time.Since(t0)
		if prime != nil {
			if err := prime(1); err != nil {
				b.Fatalf("prime: %v", err)
			}
			primed++
		}
		b.StartTimer()
		if err := soft(n); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		done += n
	}
	return rawDur, primed
}

// perfRounds is the number of raw/soft alternations of a throughput run.
const perfRounds = 8

func perfSizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// perfSoftOps returns a func running n copies of wr through perfPipeline, depth
// outstanding, every one signaled, adding queue-full retries to *sqFull.
func perfSoftOps(x *end, wr verbs.SendWR, depth int, sqFull *int) func(n int) error {
	wrs, wc := make([]verbs.SendWR, depth), make([]verbs.WC, 64)
	return func(n int) error {
		k, err := perfPipeline(x.qp, x.cq, nil, wr, n, depth, 1, wrs, wc)
		*sqFull += k
		return err
	}
}

// perfReportGoodput reports the raw baseline's goodput and x-raw, soft goodput
// over raw (the same bytes: raw time over soft time).
func perfReportGoodput(b *testing.B, bytesPerOp int, raw time.Duration, sqFull int) {
	soft := b.Elapsed()
	b.ReportMetric(float64(bytesPerOp)*float64(b.N)/raw.Seconds()/1e6, "raw-MB/s")
	b.ReportMetric(raw.Seconds()/soft.Seconds(), "x-raw")
	b.ReportMetric(float64(sqFull)/float64(b.N), "sqfull/op")
}

// BenchmarkPerfWrite: RC RDMA WRITE goodput, path MTU 4096, 16 WRITEs
// outstanding, every one signaled, beside (interleaved) the same datagrams
// through packetio/udp with as many in flight: 16 messages' worth, at most
// the engine's window of 512. size=64KiB-spin10ms repeats 64 KiB on devices
// whose drivers keep polling for 10 ms after activity (Options.Spin) instead
// of 50µs, so that they do not park in the netpoller during the run.
func BenchmarkPerfWrite(b *testing.B) {
	perfForEachEnv(b, func(b *testing.B, env perfEnv) {
		const mtu = 4096
		type devs struct {
			da, db *Device
			x, y   *end
		}
		open := func(spin time.Duration) devs {
			da, db := env.devices(b, Options{Spin: spin})
			x, y := perfEnd(b, da, 1<<20, perfDepth), perfEnd(b, db, 1<<20, perfDepth)
			connectPerf(b, x, y, verbs.MTU4096, perfDepth)
			return devs{da, db, x, y}
		}
		def, spin := open(0), open(10*time.Millisecond)
		ra, rb := env.rawConns(b)
		for _, c := range []struct {
			size int
			d    devs
			name string
		}{{64, def, ""}, {4 << 10, def, ""}, {64 << 10, def, ""}, {64 << 10, spin, "-spin10ms"}, {1 << 20, def, ""}} {
			size, x, y := c.size, c.d.x, c.d.y
			pkts := perfWireSizes(size, mtu, wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteOnly)
			window := min(perfDepth*len(pkts), perfWindow)
			b.Run("size="+perfSizeName(size)+c.name, func(b *testing.B) {
				wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: uint32(size), LKey: x.mr.LKey()}},
					RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
				sqFull := 0
				soft := perfSoftOps(x, wr, perfDepth, &sqFull)
				raw := func(n int) error { return perfRawStream(ra, rb, pkts, n, window) }
				before := perfStatsOf(c.d.da, c.d.db)
				b.ReportAllocs()
				b.SetBytes(int64(size))
				rawDur, primed := perfInterleave(b, perfRounds, raw, soft, soft)
				perfReportGoodput(b, size, rawDur, sqFull)
				perfReportEngine(b, before, perfStatsOf(c.d.da, c.d.db), b.N+primed)
				b.ReportMetric(float64(len(pkts)), "raw-pkts/op")
			})
		}
	})
}

// BenchmarkPerfRead: RDMA READ goodput at 64 KiB, path MTU 4096, 16 READs
// outstanding (max_rd_atomic 16), beside (interleaved) a raw exchange of the
// same datagrams: a 32-byte request answered by the 16 READ response
// datagrams, 16 requests outstanding.
func BenchmarkPerfRead(b *testing.B) {
	perfForEachEnv(b, func(b *testing.B, env perfEnv) {
		const mtu, size = 4096, 64 << 10
		da, db := env.devices(b, Options{})
		x, y := perfEnd(b, da, size, perfDepth), perfEnd(b, db, size, perfDepth)
		connectPerf(b, x, y, verbs.MTU4096, perfDepth)
		ra, rb := env.rawConns(b)
		resp := perfWireSizes(size, mtu, wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly)
		req := wire.RCReadRequest.Info().HeaderLen + wire.ICRCLen
		b.Run("size="+perfSizeName(size), func(b *testing.B) {
			wr := verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: size, LKey: x.mr.LKey()}},
				RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
			sqFull := 0
			soft := perfSoftOps(x, wr, perfDepth, &sqFull)
			raw := func(n int) error { return perfRawReqResp(ra, rb, req, resp, n, perfDepth) }
			before := perfStatsOf(da, db)
			b.ReportAllocs()
			b.SetBytes(size)
			rawDur, primed := perfInterleave(b, perfRounds, raw, soft, soft)
			perfReportGoodput(b, size, rawDur, sqFull)
			perfReportEngine(b, before, perfStatsOf(da, db), b.N+primed)
		})
	})
}

// BenchmarkPerfFetchAdd: FETCH_AND_ADD message rate, 16 outstanding
// (max_rd_atomic 16), beside (interleaved) a raw exchange of the same
// datagrams: a 44-byte request, a 28-byte ATOMIC ACKNOWLEDGE. The remote
// word is checked.
func BenchmarkPerfFetchAdd(b *testing.B) {
	perfForEachEnv(b, func(b *testing.B, env perfEnv) {
		da, db := env.devices(b, Options{})
		x, y := perfEnd(b, da, 4096, perfDepth), perfEnd(b, db, 4096, perfDepth)
		connectPerf(b, x, y, verbs.MTU4096, perfDepth)
		ra, rb := env.rawConns(b)
		req := wire.RCFetchAdd.Info().HeaderLen + wire.ICRCLen
		resp := []int{wire.RCAtomicAcknowledge.Info().HeaderLen + wire.ICRCLen}
		b.Run("op=fetch_add", func(b *testing.B) {
			word := (*atomic.Uint64)(unsafe.Pointer(&y.buf[0]))
			start := word.Load()
			wr := verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 8, LKey: x.mr.LKey()}},
				RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey(), CompareAdd: 1}
			sqFull := 0
			soft := perfSoftOps(x, wr, perfDepth, &sqFull)
			raw := func(n int) error { return perfRawReqResp(ra, rb, req, resp, n, perfDepth) }
			before := perfStatsOf(da, db)
			b.ReportAllocs()
			rawDur, primed := perfInterleave(b, perfRounds, raw, soft, soft)
			if got, want := word.Load()-start, uint64(b.N+primed); got != want {
				b.Fatalf("remote word grew by %d, want %d", got, want)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops/s")
			b.ReportMetric(float64(b.N)/rawDur.Seconds()/1e6, "raw-Mops/s")
			b.ReportMetric(rawDur.Seconds()/b.Elapsed().Seconds(), "x-raw")
			b.ReportMetric(float64(sqFull)/float64(b.N), "sqfull/op")
			perfReportEngine(b, before, perfStatsOf(da, db), b.N+primed)
		})
	})
}

// perfPingPong is a UDP ping-pong between two net.UDPConns that block in
// Go's netpoller (as BenchmarkUDPRoundTrip), with datagrams of size bytes.
type perfPingPong struct {
	ca, cb   *net.UDPConn
	dst      netip.AddrPort
	out, in  []byte
	deadline time.Time
}

func newPerfPingPong(b testing.TB, env perfEnv, size int) *perfPingPong {
	p := &perfPingPong{out: make([]byte, size), in: make([]byte, 2048)}
	must(b, perfInNS(env.nsA, func() (err error) {
		p.ca, err = net.ListenUDP("udp4", &net.UDPAddr{IP: env.a.AsSlice()})
		return err
	}))
	must(b, perfInNS(env.nsB, func() (err error) {
		p.cb, err = net.ListenUDP("udp4", &net.UDPAddr{IP: env.b.AsSlice()})
		return err
	}))
	b.Cleanup(func() { p.ca.Close(); p.cb.Close() })
	p.dst = p.cb.LocalAddr().(*net.UDPAddr).AddrPort()
	go func() { // the echo, until cb closes
		buf := make([]byte, 2048)
		for {
			n, addr, err := p.cb.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			p.cb.WriteToUDPAddrPort(buf[:n], addr)
		}
	}()
	return p
}

// run makes n round trips.
func (p *perfPingPong) run(n int) error {
	for i := range n {
		if i&1023 == 0 {
			p.ca.SetReadDeadline(time.Now().Add(perfTimeout))
		}
		if _, err := p.ca.WriteToUDPAddrPort(p.out, p.dst); err != nil {
			return err
		}
		if _, _, err := p.ca.ReadFromUDPAddrPort(p.in); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkPerfSendRTT: 64-byte SEND round trip (a signaled SEND, echoed by
// a SEND) between two namespaces over veth, beside (interleaved) a UDP
// ping-pong of the SEND's datagram size (80 bytes) in the same namespaces
// between net.UDPConns blocking in the netpoller (raw-µs/rtt; x-raw is soft
// over it, lower is better). path=soft uses the default Options.Spin (50µs);
// path=soft-spin10ms keeps the drivers polling for 10 ms after activity, so
// that they never park between round trips; path=raw-spin is a ping-pong of
// packetio/udp Conns that poll and yield as the soft driver does while busy.
func BenchmarkPerfSendRTT(b *testing.B) {
	env := perfNetns(b)
	b.Run("net=netns", func(b *testing.B) {
		msg := wire.RCSendOnly.Info().HeaderLen + 64 + wire.ICRCLen
		np := newPerfPingPong(b, env, msg)
		rtt := func(b *testing.B, raw time.Duration) {
			soft := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 1e3
			b.ReportMetric(soft, "µs/rtt")
			b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N)/1e3, "raw-µs/rtt")
			b.ReportMetric(b.Elapsed().Seconds()/raw.Seconds(), "x-raw")
		}
		for _, c := range []struct {
			name     string
			spin     time.Duration
			ackDelay time.Duration
		}{{"path=soft", 0, 0}, {"path=soft-spin10ms", 10 * time.Millisecond, 0}, {"path=soft-noackdelay", 0, -1}, {"path=soft-ackdelay20us", 0, 20 * time.Microsecond}} {
			b.Run(c.name, func(b *testing.B) {
				da, db := env.devices(b, Options{Spin: c.spin, Engine: engine.Config{AckDelay: int64(c.ackDelay)}})
				x, y := perfEnd(b, da, 4096, perfDepth), perfEnd(b, db, 4096, perfDepth)
				connectPerf(b, x, y, verbs.MTU4096, 1)
				before := perfStatsOf(da, db)
				b.ReportAllocs()
				raw, _ := perfInterleave(b, perfRounds, np.run, nil, func(n int) error { return perfSoftPingPong(x, y, n) })
				rtt(b, raw)
				perfReportEngine(b, before, perfStatsOf(da, db), b.N)
			})
		}
		b.Run("path=raw-spin", func(b *testing.B) {
			ca, cb := env.rawConns(b)
			b.ReportAllocs()
			raw, _ := perfInterleave(b, perfRounds, np.run, nil, func(n int) error { return perfRawReqResp(ca, cb, msg, []int{msg}, n, 1) })
			rtt(b, raw)
		})
	})
}

// BenchmarkPerfIdleWrite: a 64-byte signaled WRITE on loopback issued after
// the devices idled for 200µs (their drivers parked in the netpoller), the
// application polling its CQ with runtime.Gosched, beside (interleaved) a
// netpoll UDP ping-pong after the same pause. It measures how long a parked
// driver takes to see a packet while other goroutines spin.
func BenchmarkPerfIdleWrite(b *testing.B) {
	env := perfLoopback()
	b.Run("net=lo", func(b *testing.B) {
		np := newPerfPingPong(b, env, 96)
		da, db := env.devices(b, Options{})
		x, y := perfEnd(b, da, 4096, perfDepth), perfEnd(b, db, 4096, perfDepth)
		connectPerf(b, x, y, verbs.MTU4096, 1)
		wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 64, LKey: x.mr.LKey()}},
			RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
		sqFull := 0
		soft := perfSoftOps(x, wr, 1, &sqFull)
		const pause = 200 * time.Microsecond
		b.ReportAllocs()
		b.ResetTimer()
		b.StopTimer()
		var raw time.Duration
		for range b.N {
			time.Sleep(pause)
			t0 := time.Now()
			if err := np.run(1); err != nil {
				b.Fatal(err)
			}
			raw += time.Since(t0)
			time.Sleep(pause)
			b.StartTimer()
			if err := soft(1); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/write")
		b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N)/1e3, "raw-µs/rtt")
		b.ReportMetric(b.Elapsed().Seconds()/raw.Seconds(), "x-raw")
	})
}

// perfSoftPingPong runs n 64-byte SEND round trips from x to y: x posts a
// receive and a signaled SEND and waits for both completions; y echoes
// every message it receives.
func perfSoftPingPong(x, y *end, n int) error {
	sendWR := func(e *end) []verbs.SendWR {
		return []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{{Addr: e.mr.Addr(), Length: 64, LKey: e.mr.LKey()}}}}
	}
	recvWR := func(e *end) []verbs.RecvWR {
		return []verbs.RecvWR{{SGList: []verbs.SGE{{Addr: e.mr.Addr() + 1024, Length: 64, LKey: e.mr.LKey()}}}}
	}
	xs, xr, ys, yr := sendWR(x), recvWR(x), sendWR(y), recvWR(y)
	var stop atomic.Bool
	errc := make(chan error, 1)
	if _, err := y.qp.PostRecv(yr); err != nil {
		return err
	}
	go func() { // y echoes n messages, and sees its n SENDs complete
		wc := make([]verbs.WC, 4)
		st := newPerfStall()
		recvs, sends := 0, 0
		for (recvs < n || sends < n) && !stop.Load() {
			k := y.cq.Poll(wc)
			for _, w := range wc[:k] {
				if w.Status != verbs.WCSuccess {
					errc <- fmt.Errorf("echo: completion %+v", w)
					return
				}
				if w.Opcode != verbs.WCRecv {
					sends++
					continue
				}
				if recvs++; recvs < n {
					if _, err := y.qp.PostRecv(yr); err != nil {
						errc <- err
						return
					}
				}
				if _, err := y.qp.PostSend(ys); err != nil {
					errc <- err
					return
				}
			}
			if k > 0 {
				st.progress()
			} else if err := st.idle(); err != nil {
				errc <- fmt.Errorf("echo: %d received, %d sent: %w", recvs, sends, err)
				return
			}
		}
		errc <- nil
	}()
	err := func() error {
		wc := make([]verbs.WC, 2)
		st := newPerfStall()
		for range n {
			if _, err := x.qp.PostRecv(xr); err != nil {
				return err
			}
			if _, err := x.qp.PostSend(xs); err != nil {
				return err
			}
			for got := 0; got < 2; { // our SEND's completion and the echo
				k := x.cq.Poll(wc)
				for _, w := range wc[:k] {
					if w.Status != verbs.WCSuccess {
						return fmt.Errorf("completion %+v", w)
					}
				}
				if got += k; k > 0 {
					st.progress()
				} else if err := st.idle(); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	if err != nil {
		stop.Store(true)
		<-errc
		return err
	}
	return <-errc
}

// perfEngineLink is two engines joined in memory and driven by the calling
// goroutine: engine's BenchmarkPostPoll, rebuilt here so that it runs
// interleaved with the soft path.
type perfEngineLink struct {
	a, b   *engine.Engine
	x      *engine.QP
	xcq    *engine.CQ
	xb, yb *engine.MR
	buf    []byte
}

func newPerfEngineLink(t testing.TB, depth int, skipICRC bool) *perfEngineLink {
	l := &perfEngineLink{buf: make([]byte, wire.MaxPMTU+128)}
	side := func(local string) (*engine.Engine, *engine.QP, *engine.CQ, *engine.MR) {
		e, err := engine.New(engine.Config{Local: netip.MustParseAddr(local), SourcePort: wire.RoCEv2Port, SkipICRC: skipICRC})
		must(t, err)
		pd := e.AllocPD()
		cq := engine.NewCQ(max(2*depth, 64))
		mr, err := e.MRs.Register(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite, pd)
		must(t, err)
		qp, err := e.CreateQP(&engine.QPInit{Type: verbs.QPTRC, PD: pd, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: uint32(depth), MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		return e, qp, cq, mr
	}
	var y *engine.QP
	l.a, l.x, l.xcq, l.xb = side("10.0.6.1")
	l.b, y, _, l.yb = side("10.0.6.2")
	perfRTS(t, l.x, y.Num(), verbs.GIDFromAddr(l.b.Local()), verbs.MTU4096, 1)
	perfRTS(t, y, l.x.Num(), verbs.GIDFromAddr(l.a.Local()), verbs.MTU4096, 1)
	return l
}

// step moves every packet pending in either engine once; it reports
// whether any moved.
func (l *perfEngineLink) step() bool {
	moved := false
	for _, p := range [2][2]*engine.Engine{{l.a, l.b}, {l.b, l.a}} {
		for {
			n, _, ok := p[0].Output(1, l.buf)
			if !ok {
				break
			}
			p[1].Input(1, l.buf[:n], p[0].Local(), wire.RoCEv2Port)
			moved = true
		}
	}
	return moved
}

// BenchmarkPerfPostPoll: WQEs posted and retired per second through the
// verbs API, two soft devices over the in-memory pipe (no sockets): 64-byte
// WRITEs, path MTU 4096, the last of every 32 signaled, depth WQEs
// outstanding (posted as soon as completions free room). Beside it
// (interleaved) the same work through two engines driven by one goroutine,
// as engine's BenchmarkPostPoll does (engine-MWQE/s; x-engine is soft over
// engine). icrc=skip sets engine.Config.SkipICRC on both paths (receivers do
// not check the ICRC; senders still compute it).
func BenchmarkPerfPostPoll(b *testing.B) {
	for _, c := range []struct {
		depth int
		skip  bool
	}{{32, false}, {256, false}, {256, true}} {
		name := fmt.Sprintf("depth=%d/icrc=check", c.depth)
		if c.skip {
			name = fmt.Sprintf("depth=%d/icrc=skip", c.depth)
		}
		b.Run(name, func(b *testing.B) {
			ca, cb := pipe.New(netip.MustParseAddr("10.0.5.1"), netip.MustParseAddr("10.0.5.2"), pipe.Options{})
			eng := engine.Config{SkipICRC: c.skip}
			da, err := New(Options{Name: "perfa", Conn: ca, Engine: eng})
			must(b, err)
			db, err := New(Options{Name: "perfb", Conn: cb, Engine: eng})
			must(b, err)
			defer func() { da.Close(); db.Close() }()
			x, y := perfEnd(b, da, 4096, c.depth), perfEnd(b, db, 4096, c.depth)
			connectPerf(b, x, y, verbs.MTU4096, 1)
			wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 64, LKey: x.mr.LKey()}},
				RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
			wrs, wc := make([]verbs.SendWR, c.depth), make([]verbs.WC, 64)
			sqFull := 0
			soft := func(n int) error {
				k, err := perfPipeline(x.qp, x.cq, nil, wr, n, c.depth, 32, wrs, wc)
				sqFull += k
				return err
			}
			l := newPerfEngineLink(b, c.depth, c.skip)
			ewr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: l.xb.Addr(), Length: 64, LKey: l.xb.LKey()}},
				RemoteAddr: l.yb.Addr(), RKey: l.yb.RKey()}
			raw := func(n int) error {
				_, err := perfPipeline(l.x, l.xcq, l.step, ewr, n, c.depth, 32, wrs, wc)
				return err
			}
			b.ReportAllocs()
			rawDur, _ := perfInterleave(b, perfRounds, raw, nil, soft)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "MWQE/s")
			b.ReportMetric(float64(b.N)/rawDur.Seconds()/1e6, "engine-MWQE/s")
			b.ReportMetric(rawDur.Seconds()/b.Elapsed().Seconds(), "x-engine")
			b.ReportMetric(float64(sqFull)/float64(b.N), "sqfull/op")
		})
	}
}
