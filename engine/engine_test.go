package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// link shuttles packets between two engines in memory, with a manual clock
// and optional loss, so the tests drive both ends deterministically.
type link struct {
	a, b    *Engine
	now     int64
	drop    func(n int) bool      // decides on the n-th packet
	dup     func() bool           // deliver twice
	hold    func() bool           // deliver after the next packet (reorder)
	mangle  func(n int, b []byte) // changes the n-th packet's bytes (not dropped) before delivery
	held    []heldPkt
	sent    int
	buf     []byte
	capture []captured
	// bufs and in are step's batch: the packets output, and those to input
	// when the link's loss, duplication, hooks or capture pass on other
	// packets than those output. single makes step move one packet at a
	// time (stepSingle).
	bufs   [][]byte
	lens   []int    // the lengths of bufs' packets
	ports  []uint16 // their source ports
	in     [][]byte
	inPort []uint16
	single bool
	// gather, when set, makes step move packets one at a time through
	// OutputGather (stepGather), counting those sent in pieces.
	gather *gatherStats
}

// linkBatch is the most packets step outputs in one batch.
const linkBatch = 32

var dbgHook func(l *link, from, to *Engine, b []byte, fate string)

type heldPkt struct {
	b    []byte
	to   *Engine
	from *Engine
	port uint16 // the source port
}

type captured struct {
	pkt      []byte
	src, dst netip.Addr
}

func newLink(t testing.TB) *link {
	a, err := New(Config{Local: netip.MustParseAddr("10.0.0.1"), SourcePort: wire.RoCEv2Port})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Local: netip.MustParseAddr("10.0.0.2"), SourcePort: wire.RoCEv2Port})
	if err != nil {
		t.Fatal(err)
	}
	l := &link{a: a, b: b, now: 1, buf: make([]byte, wire.MaxPMTU+128)}
	l.bufs = make([][]byte, linkBatch)
	for i := range l.bufs {
		l.bufs[i] = make([]byte, wire.MaxPMTU+128)
	}
	l.lens = make([]int, linkBatch)
	l.ports = make([]uint16, linkBatch)
	l.in = make([][]byte, 0, 2*linkBatch)
	l.inPort = make([]uint16, 0, 2*linkBatch)
	return l
}

// step moves every pending packet once; it reports whether any moved. It
// moves them as a driver does, in batches: up to linkBatch packets output
// between BeginOutputBatch and EndOutputBatch, then input, each run of four
// of one length checked by DiffICRC4 first. The link's loss, duplication,
// hooks and capture apply to each packet in the order stepSingle applies
// them; a link that reorders (hold), whose held packets stepSingle delivers
// between the outputs, and a link set single, move one packet at a time.
func (l *link) step() bool {
	if l.gather != nil {
		return l.stepGather()
	}
	if l.single || l.hold != nil {
		return l.stepSingle()
	}
	moved := false
	for _, pair := range [2][2]*Engine{{l.a, l.b}, {l.b, l.a}} {
		from, to := pair[0], pair[1]
		src, local := from.Local(), to.Local()
		for {
			k := 0
			from.BeginOutputBatch()
			for k < len(l.bufs) {
				n, dst, sport, ok := from.OutputFrom(l.now, l.bufs[k])
				if !ok {
					break
				}
				if dst != local {
					panic(fmt.Sprintf("packet to %v", dst))
				}
				l.lens[k], l.ports[k] = n, sport
				k++
			}
			from.EndOutputBatch()
			if k == 0 {
				break
			}
			moved = true
			if l.capture != nil || l.drop != nil || l.dup != nil || l.mangle != nil || dbgHook != nil {
				in, ports := l.pass(from, to, k)
				l.input(to, src, in, ports)
				continue
			}
			// The packets as sent: their slices built where they are used,
			// not stored (a slice stored in the heap costs a write barrier's
			// check).
			l.sent += k
			lens, ports := l.lens[:k], l.ports[:k]
			var rx RxInfo
			// A run's packets go into q element by element: a composite
			// literal is built aside and copied in with wide loads that
			// stall on its narrow stores.
			var q [4][]byte
			for i := 0; i < k; {
				b := l.bufs[i][:lens[i]]
				if i+4 <= k {
					n, p := lens[i], ports[i]
					if lens[i+1] == n && lens[i+2] == n && lens[i+3] == n && ports[i+1] == p && ports[i+2] == p && ports[i+3] == p {
						q[0], q[1], q[2], q[3] = b, l.bufs[i+1][:n], l.bufs[i+2][:n], l.bufs[i+3][:n]
						var d [4]uint32
						rx.ICRCDiffKnown = to.DiffICRC4(&q, src, p, &d)
						for j := range 4 {
							rx.ICRCDiff = d[j]
							to.InputPacket(l.now, q[j], src, p, &rx)
						}
						rx.ICRCDiffKnown = false
						i += 4
						continue
					}
				}
				to.InputPacket(l.now, b, src, ports[i], &rx)
				i++
			}
		}
	}
	return moved
}

// input inputs packets from src to to as step does: runs of four of one
// length and port checked together by DiffICRC4 first.
func (l *link) input(to *Engine, src netip.Addr, in [][]byte, ports []uint16) {
	var rx RxInfo
	for i := 0; i < len(in); {
		if i+4 <= len(in) {
			n, p := len(in[i]), ports[i]
			var d [4]uint32
			if len(in[i+1]) == n && len(in[i+2]) == n && len(in[i+3]) == n && ports[i+1] == p && ports[i+2] == p && ports[i+3] == p &&
				to.DiffICRC4((*[4][]byte)(in[i:]), src, p, &d) {
				rx.ICRCDiffKnown = true
				for j := range 4 {
					rx.ICRCDiff = d[j]
					to.InputPacket(l.now, in[i+j], src, p, &rx)
				}
				rx.ICRCDiffKnown = false
				i += 4
				continue
			}
		}
		to.InputPacket(l.now, in[i], src, ports[i], &rx)
		i++
	}
}

// pass applies the link's capture, loss, duplication and hooks to the
// first k packets of bufs, sent from from to to, in order, and returns
// those to input and their source ports.
func (l *link) pass(from, to *Engine, k int) ([][]byte, []uint16) {
	in, ports := l.in[:0], l.inPort[:0]
	for i, b := range l.bufs[:k] {
		b = b[:l.lens[i]]
		l.sent++
		if l.capture != nil {
			l.capture = append(l.capture, captured{append([]byte(nil), b...), from.Local(), to.Local()})
		}
		if l.drop != nil && l.drop(l.sent) {
			if dbgHook != nil {
				dbgHook(l, from, to, b, "DROP")
			}
			continue
		}
		if l.mangle != nil {
			l.mangle(l.sent, b)
		}
		if dbgHook != nil {
			dbgHook(l, from, to, b, "")
		}
		in, ports = append(in, b), append(ports, l.ports[i])
		if l.dup != nil && l.dup() {
			in, ports = append(in, b), append(ports, l.ports[i])
		}
	}
	l.in, l.inPort = in[:0], ports[:0]
	return in, ports
}

// stepSingle is step one packet at a time: Output, then Input, for each.
func (l *link) stepSingle() bool {
	moved := false
	for _, pair := range [2][2]*Engine{{l.a, l.b}, {l.b, l.a}} {
		from, to := pair[0], pair[1]
		for {
			n, dst, sport, ok := from.OutputFrom(l.now, l.buf)
			if !ok {
				break
			}
			moved = true
			l.sent++
			if dst != to.Local() {
				panic(fmt.Sprintf("packet to %v", dst))
			}
			if l.capture != nil {
				l.capture = append(l.capture, captured{append([]byte(nil), l.buf[:n]...), from.Local(), dst})
			}
			if l.drop != nil && l.drop(l.sent) {
				if dbgHook != nil {
					dbgHook(l, from, to, l.buf[:n], "DROP")
				}
				continue
			}
			if l.mangle != nil {
				l.mangle(l.sent, l.buf[:n])
			}
			if dbgHook != nil {
				dbgHook(l, from, to, l.buf[:n], "")
			}
			if l.hold != nil && l.hold() {
				l.held = append(l.held, heldPkt{append([]byte(nil), l.buf[:n]...), to, from, sport})
				continue
			}
			to.Input(l.now, l.buf[:n], from.Local(), sport)
			if l.dup != nil && l.dup() {
				to.Input(l.now, l.buf[:n], from.Local(), sport)
			}
			for _, h := range l.held {
				h.to.Input(l.now, h.b, h.from.Local(), h.port)
			}
			l.held = l.held[:0]
		}
	}
	return moved
}

// run moves packets until quiet, firing timers, for at most limit rounds.
func (l *link) run(t testing.TB, until func() bool) {
	t.Helper()
	for i := 0; i < 1_000_000; i++ {
		if until() {
			return
		}
		if !l.step() {
			d := min0(l.a.NextDeadline(), l.b.NextDeadline())
			if d == 0 {
				if until() {
					return
				}
				t.Fatalf("stuck: nothing to send and no timer (a %+v, b %+v)", l.a.Stats(), l.b.Stats())
			}
			if d > l.now {
				l.now = d
			}
			l.a.Tick(l.now)
			l.b.Tick(l.now)
		}
	}
	t.Fatal("did not finish")
}

func min0(x, y int64) int64 {
	switch {
	case x == 0:
		return y
	case y == 0:
		return x
	}
	return min(x, y)
}

// side is one end: PD, CQs, QP and a registered buffer.
type side struct {
	e   *Engine
	pd  uint32
	scq *CQ
	rcq *CQ
	qp  *QP
	mr  *MR
	buf []byte
	wcs []verbs.WC
}

func newSide(t testing.TB, e *Engine, typ verbs.QPType, size int) *side {
	s := &side{e: e, pd: e.AllocPD(), scq: NewCQ(4096), rcq: NewCQ(4096), buf: make([]byte, size)}
	var err error
	s.mr, err = e.MRs.Register(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic, s.pd)
	if err != nil {
		t.Fatal(err)
	}
	s.qp, err = e.CreateQP(&QPInit{Type: typ, PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func connectRC(t testing.TB, a, b *side, mtu verbs.MTU) { connectRCRetry(t, a, b, mtu, 7) }

// connectRCRetry is connectRC with a's rnr_retry (b's stays 7, infinite).
func connectRCRetry(t testing.TB, a, b *side, mtu verbs.MTU, rnrRetry uint8) {
	connectRCTimeout(t, a, b, mtu, rnrRetry, 10)
}

// rcLink returns a new link and an RC QP on each of its engines, with 64 KiB
// of memory each, connected at path MTU 1024.
func rcLink(t testing.TB) (*link, *side, *side) {
	l := newLink(t)
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	connectRC(t, a, b, verbs.MTU1024)
	return l, a, b
}

// connectRCTimeout is connectRCRetry with both QPs' local ACK timeout
// (4.096 µs x 2^timeout).
func connectRCTimeout(t testing.TB, a, b *side, mtu verbs.MTU, rnrRetry, timeout uint8) {
	for _, p := range [2][2]*side{{a, b}, {b, a}} {
		x, y := p[0], p[1]
		retry := uint8(7)
		if x == a {
			retry = rnrRetry
		}
		must(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic, PortNum: 1},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		must(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: mtu, DestQPN: y.qp.Num(), RQPSN: 0xFFFFF0,
			MaxDestRdAtomic: 16, MinRNRTimer: 1, AHAttr: verbs.AHAttr{DGID: verbs.GIDFromAddr(y.e.Local())}},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
		must(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0xFFFFF0, Timeout: timeout, RetryCnt: 7, RNRRetry: retry, MaxRdAtomic: 16},
			verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (s *side) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: s.mr.Addr() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}}
}

func (s *side) poll(cq *CQ) []verbs.WC {
	var w [64]verbs.WC
	n := cq.Poll(w[:])
	return append([]verbs.WC(nil), w[:n]...)
}

// collect polls cq into s.wcs until it holds n completions.
func collect(l *link, t testing.TB, cq *CQ, n int) []verbs.WC {
	var got []verbs.WC
	var w [64]verbs.WC
	l.run(t, func() bool {
		k := cq.Poll(w[:])
		got = append(got, w[:k]...)
		return len(got) >= n
	})
	return got
}

func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed)
	}
}

func TestRCOperations(t *testing.T) {
	for _, mtu := range []verbs.MTU{verbs.MTU1024, verbs.MTU4096} {
		for _, size := range []int{0, 1, 4095, 4096, 4097, 1 << 20} {
			t.Run(fmt.Sprintf("mtu%d/%d", mtu.Bytes(), size), func(t *testing.T) {
				l := newLink(t)
				a, b := newSide(t, l.a, verbs.QPTRC, 2<<20+64), newSide(t, l.b, verbs.QPTRC, 2<<20+64)
				connectRC(t, a, b, mtu)
				src := a.buf[:size]
				fill(src, size)

				// SEND / RECV
				_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGList: b.sge(0, size+10)}})
				must(t, err)
				_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSendWithImm, Imm: 0xabcd, Flags: verbs.SendSignaled, SGList: a.sge(0, size)}})
				must(t, err)
				wcs := collect(l, t, b.rcq, 1)
				want := verbs.WC{WRID: 7, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(size), Imm: 0xabcd, Flags: verbs.WCFlagWithImm, QPNum: b.qp.Num(), SrcQP: a.qp.Num()}
				if wcs[0] != want {
					t.Fatalf("recv WC %+v, want %+v", wcs[0], want)
				}
				if !bytes.Equal(b.buf[:size], src) {
					t.Fatal("SEND data differs")
				}
				wcs = collect(l, t, a.scq, 1)
				if w := (verbs.WC{WRID: 1, Status: verbs.WCSuccess, Opcode: verbs.WCSend, QPNum: a.qp.Num()}); wcs[0] != w {
					t.Fatalf("send WC %+v", wcs[0])
				}

				// RDMA WRITE to b at offset 1 MiB, then READ it back into a at 1 MiB.
				fill(src, size+1)
				_, err = a.qp.PostSend([]verbs.SendWR{
					{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, size), RemoteAddr: b.mr.Addr() + 1<<20, RKey: b.mr.RKey()},
					{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: a.sge(1<<20, size), RemoteAddr: b.mr.Addr() + 1<<20, RKey: b.mr.RKey()},
				})
				must(t, err)
				wcs = collect(l, t, a.scq, 2)
				if wcs[0].WRID != 2 || wcs[0].Opcode != verbs.WCRDMAWrite || wcs[0].Status != 0 ||
					wcs[1].WRID != 3 || wcs[1].Opcode != verbs.WCRDMARead || wcs[1].Status != 0 || wcs[1].ByteLen != uint32(size) {
					t.Fatalf("WCs %+v", wcs)
				}
				if !bytes.Equal(b.buf[1<<20:1<<20+size], src) || !bytes.Equal(a.buf[1<<20:1<<20+size], src) {
					t.Fatal("WRITE/READ data differs")
				}

				// WRITE WITH IMM consumes a receive.
				_, err = b.qp.PostRecv([]verbs.RecvWR{{WRID: 8}})
				must(t, err)
				_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRRDMAWriteWithImm, Imm: 99, SGList: a.sge(0, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
				must(t, err)
				wcs = collect(l, t, b.rcq, 1)
				if w := (verbs.WC{WRID: 8, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: uint32(size), Imm: 99, Flags: verbs.WCFlagWithImm, QPNum: b.qp.Num(), SrcQP: a.qp.Num()}); wcs[0] != w {
					t.Fatalf("write-imm WC %+v", wcs[0])
				}
			})
		}
	}
}

func TestRCAtomics(t *testing.T) {
	l := newLink(t)
	a, b := newSide(t, l.a, verbs.QPTRC, 4096), newSide(t, l.b, verbs.QPTRC, 4096)
	connectRC(t, a, b, verbs.MTU1024)
	word := b.mr.Addr() + 64
	_, err := a.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: a.sge(0, 8), RemoteAddr: word, RKey: b.mr.RKey(), CompareAdd: 5},
		{WRID: 2, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGList: a.sge(8, 8), RemoteAddr: word, RKey: b.mr.RKey(), CompareAdd: 5, Swap: 100},
		{WRID: 3, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGList: a.sge(16, 8), RemoteAddr: word, RKey: b.mr.RKey(), CompareAdd: 5, Swap: 7},
		{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: a.sge(24, 8), RemoteAddr: word, RKey: b.mr.RKey(), CompareAdd: 1},
	})
	must(t, err)
	wcs := collect(l, t, a.scq, 4)
	ops := []verbs.WCOpcode{verbs.WCFetchAdd, verbs.WCCompSwap, verbs.WCCompSwap, verbs.WCFetchAdd}
	for i, w := range wcs {
		if w.WRID != uint64(i+1) || w.Status != verbs.WCSuccess || w.Opcode != ops[i] || w.ByteLen != 8 {
			t.Fatalf("WC %d: %+v", i, w)
		}
	}
	origs := []uint64{0, 5, 100, 100}
	for i, want := range origs {
		if got := nativeU64(a.buf[i*8:]); got != want {
			t.Errorf("atomic %d returned %d, want %d", i+1, got, want)
		}
	}
	if got := nativeU64(b.buf[64:]); got != 101 {
		t.Errorf("final value %d, want 101", got)
	}
}

func nativeU64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func TestRCRemoteAccessError(t *testing.T) {
	l := newLink(t)
	a, b := newSide(t, l.a, verbs.QPTRC, 4096), newSide(t, l.b, verbs.QPTRC, 4096)
	connectRC(t, a, b, verbs.MTU1024)
	_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 70, SGList: b.sge(0, 100)}})
	must(t, err)
	_, err = a.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 16), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x100},
		{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 16)},
	})
	must(t, err)
	wcs := collect(l, t, a.scq, 2)
	if wcs[0].WRID != 1 || wcs[0].Status != verbs.WCRemAccessErr || wcs[1].WRID != 2 || wcs[1].Status != verbs.WCWRFlushErr {
		t.Fatalf("WCs %+v", wcs)
	}
	if a.qp.State() != verbs.QPSErr {
		t.Errorf("requester QP %v", a.qp.State())
	}
	wcs = collect(l, t, b.rcq, 1)
	if wcs[0].WRID != 70 || wcs[0].Status != verbs.WCWRFlushErr {
		t.Fatalf("responder WCs %+v", wcs)
	}
	if b.qp.State() != verbs.QPSErr {
		t.Errorf("responder QP %v", b.qp.State())
	}
}

func TestRCRNRAndLoss(t *testing.T) {
	l := newLink(t)
	r := rand.New(rand.NewPCG(1, 2))
	l.drop = func(int) bool { return r.IntN(100) < 10 }
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<20), newSide(t, l.b, verbs.QPTRC, 1<<20)
	connectRC(t, a, b, verbs.MTU1024)
	const n = 40
	var wrs []verbs.SendWR
	for i := 0; i < n; i++ {
		wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(i*3000, 3000)})
	}
	fill(a.buf, 3)
	_, err := a.qp.PostSend(wrs)
	must(t, err)
	// No receives yet: RNR NAKs; then post them while traffic runs.
	for i := 0; i < 5; i++ {
		l.step()
	}
	var rws []verbs.RecvWR
	for i := 0; i < n; i++ {
		rws = append(rws, verbs.RecvWR{WRID: uint64(100 + i), SGList: b.sge(i*4096, 4096)})
	}
	_, err = b.qp.PostRecv(rws)
	must(t, err)
	recv := collect(l, t, b.rcq, n)
	sent := collect(l, t, a.scq, n)
	for i := 0; i < n; i++ {
		if recv[i].WRID != uint64(100+i) || recv[i].Status != 0 || recv[i].ByteLen != 3000 {
			t.Fatalf("recv %d: %+v", i, recv[i])
		}
		if sent[i].WRID != uint64(i) || sent[i].Status != 0 {
			t.Fatalf("send %d: %+v", i, sent[i])
		}
		if !bytes.Equal(b.buf[i*4096:i*4096+3000], a.buf[i*3000:i*3000+3000]) {
			t.Fatalf("message %d differs", i)
		}
	}
	if extra := b.poll(b.rcq); len(extra) != 0 {
		t.Fatalf("delivered twice: %+v", extra)
	}
	sa, sb := l.a.Stats(), l.b.Stats()
	if sa.Retransmits == 0 || sb.RNRSent == 0 {
		t.Errorf("loss and RNR not exercised: %+v %+v", sa, sb)
	}
	t.Logf("a: %+v", sa)
	t.Logf("b: %+v", sb)
}

func TestUD(t *testing.T) {
	l := newLink(t)
	a, b := newSide(t, l.a, verbs.QPTUD, 8192), newSide(t, l.b, verbs.QPTUD, 8192)
	for _, s := range []*side{a, b} {
		must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, QKey: 0x11111111, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
		must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState))
		must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 5}, verbs.AttrState|verbs.AttrSQPSN))
	}
	_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: b.sge(0, 40+512)}})
	must(t, err)
	fill(a.buf[:512], 1)
	ah := testAH{verbs.AHAttr{DGID: verbs.GIDFromAddr(l.b.Local())}}
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSendWithImm, Imm: 5, Flags: verbs.SendSignaled, SGList: a.sge(0, 512), AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: 0x11111111}})
	must(t, err)
	wcs := collect(l, t, b.rcq, 1)
	if w := (verbs.WC{WRID: 9, Opcode: verbs.WCRecv, ByteLen: 552, Imm: 5, QPNum: b.qp.Num(), SrcQP: a.qp.Num(), Flags: verbs.WCFlagGRH | verbs.WCFlagWithImm}); wcs[0] != w {
		t.Fatalf("WC %+v want %+v", wcs[0], w)
	}
	ip := wire.IPv4(b.buf[20:40])
	if ip.Src() != l.a.Local() || ip.Dst() != l.b.Local() || !ip.ChecksumOK() {
		t.Errorf("GRH: src %v dst %v", ip.Src(), ip.Dst())
	}
	if !bytes.Equal(b.buf[40:552], a.buf[:512]) {
		t.Error("UD payload differs")
	}
	if w := collect(l, t, a.scq, 1); w[0].WRID != 1 || w[0].Status != 0 {
		t.Fatalf("send WC %+v", w)
	}
}

type testAH struct{ a verbs.AHAttr }

func (h testAH) Attr() verbs.AHAttr { return h.a }
func (h testAH) Destroy() error     { return nil }

func TestPostInWrongState(t *testing.T) {
	l := newLink(t)
	a := newSide(t, l.a, verbs.QPTRC, 64)
	if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}}); err == nil {
		t.Fatal("post in RESET accepted")
	}
	err := a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState)
	if err == nil {
		t.Fatal("RESET -> RTR accepted")
	}
	err = a.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit}, verbs.AttrState)
	if err == nil {
		t.Fatal("RESET -> INIT without PKEY_INDEX|PORT|ACCESS_FLAGS accepted")
	}
	t.Log(err)
}

// TestDeregRevokes: deregistering the target MR in the middle of a WRITE and
// of a READ fails them with a remote access error.
func TestDeregRevokes(t *testing.T) {
	for _, op := range []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead} {
		l := newLink(t)
		a, b := newSide(t, l.a, verbs.QPTRC, 1<<20), newSide(t, l.b, verbs.QPTRC, 1<<20)
		connectRC(t, a, b, verbs.MTU1024)
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: op, Flags: verbs.SendSignaled, SGList: a.sge(0, 1<<20), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		must(t, err)
		// Let a few packets through, then revoke.
		buf := make([]byte, wire.MaxPMTU+128)
		sends := 5
		if op == verbs.WRRDMARead {
			sends = 1
		}
		for i := 0; i < sends; i++ {
			n, _, ok := l.a.Output(l.now, buf)
			if !ok {
				t.Fatal("nothing to send")
			}
			l.b.Input(l.now, buf[:n], l.a.Local(), wire.RoCEv2Port)
		}
		for i := 0; i < 5 && op == verbs.WRRDMARead; i++ {
			n, _, ok := l.b.Output(l.now, buf)
			if ok {
				l.a.Input(l.now, buf[:n], l.b.Local(), wire.RoCEv2Port)
			}
		}
		must(t, b.mr.Deregister())
		wcs := collect(l, t, a.scq, 1)
		if wcs[0].Status != verbs.WCRemAccessErr {
			t.Errorf("%v: %+v, want REM_ACCESS_ERR", op, wcs[0])
		}
	}
}

// TestUDSourcePort: with Config.PerPacketSourcePort, a UD send whose AH has
// a flow label is for the port the label maps to (OutputFrom says so, and
// its ICRC checks out for that port only); without a label, or without
// the setting, it is for Config.SourcePort; RC is unchanged.
func TestUDSourcePort(t *testing.T) {
	for _, perPacket := range []bool{true, false} {
		l := newLink(t)
		l.a.cfg.PerPacketSourcePort = perPacket
		a, b := newSide(t, l.a, verbs.QPTUD, 8192), newSide(t, l.b, verbs.QPTUD, 8192)
		for _, s := range []*side{a, b} {
			must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, QKey: 0x11111111, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
			must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState))
			must(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState|verbs.AttrSQPSN))
		}
		buf := make([]byte, wire.MaxPMTU+128)
		for i, label := range []uint32{0, 1, 0x12345, 0xFFFFF, 0x4000, 0x10_0000 | 7} {
			want := uint16(wire.RoCEv2Port)
			if perPacket && label&0xFFFFF != 0 {
				want = wire.SourcePort(label&0xFFFFF, 0, 0)
			}
			ah := testAH{verbs.AHAttr{DGID: verbs.GIDFromAddr(l.b.Local()), FlowLabel: label}}
			_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, SGList: a.sge(0, 64), AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: 0x11111111}})
			must(t, err)
			n, to, sport, ok := l.a.OutputFrom(l.now, buf)
			if !ok || to != l.b.Local() || sport != want {
				t.Fatalf("per-packet %v, label %#x: OutputFrom = %d, %v, port %#x, %v; want port %#x", perPacket, label, n, to, sport, ok, want)
			}
			for _, port := range []uint16{want, want ^ 1} {
				fl := wire.Flow{Src: l.a.Local(), Dst: l.b.Local(), SrcPort: port}
				if _, _, err := fl.CheckDatagramICRC(buf[:n]); (err == nil) != (port == want) {
					t.Errorf("per-packet %v, label %#x: ICRC for port %#x: %v", perPacket, label, port, err)
				}
			}
		}
	}
	// RC ignores the flow label: SourcePort.
	l := newLink(t)
	l.a.cfg.PerPacketSourcePort = true
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	connectRC(t, a, b, verbs.MTU1024)
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: a.sge(0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	must(t, err)
	buf := make([]byte, wire.MaxPMTU+128)
	if _, _, sport, ok := l.a.OutputFrom(l.now, buf); !ok || sport != wire.RoCEv2Port {
		t.Errorf("RC: port %#x, %v; want 4791", sport, ok)
	}
}
