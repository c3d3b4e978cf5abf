//go:build linux

package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// TestNetns runs two soft devices end to end over real sockets: each device
// on a UDP socket (port 4791) created inside its own network namespace, the
// namespaces joined by a veth pair, every packet either device sends
// captured into one pcap per path MTU. At path MTU 1024 (veth MTU 1500) and
// 4096 (veth MTU 9000) it runs every operation at every interesting size,
// 64 RC QPs at once, an SRQ feeding 8 QPs, UD among 4 QPs and QP misuse; then
// it closes the devices and has the independent wire checker judge the
// capture (GOROCE_WIRE_CHECK, with tshark installed; byte-identical
// retransmissions left out, see e2eEnv). It needs root; without it it skips.
//
// Run it as root with
//
//	GOROCE_WIRE_CHECK=/path/to/check-pcap.sh go test -run Netns -v ./provider/soft
func TestNetns(t *testing.T) {
	netns.Require(t)
	// The wire checks run in the background, each from the end of its
	// traffic until the end of the test: the pcaps live in the top test's
	// directory.
	top, dir := t, t.TempDir()
	var checks []*e2eCheck
	for _, c := range []struct {
		pmtu verbs.MTU
		veth int
	}{{verbs.MTU1024, 1500}, {verbs.MTU4096, 9000}} {
		t.Run(fmt.Sprintf("pmtu%d", c.pmtu.Bytes()), func(t *testing.T) {
			env := e2eSetup(t, c.pmtu, c.veth, dir)
			for _, s := range []struct {
				name string
				f    func(*testing.T, *e2eEnv)
			}{
				{"ops", e2eOps},
				{"64QPs", e2eManyQPs},
				{"SRQ", e2eSRQ},
				{"UD", e2eUD},
				{"misuse", e2eMisuse},
			} {
				t.Run(s.name, func(t *testing.T) {
					start, a0, b0 := time.Now(), env.a.Stats(), env.b.Stats()
					ka0, kb0 := e2eKernelDrops(env.pair.A), e2eKernelDrops(env.pair.B)
					s.f(t, env)
					// What it cost: the engines' counters, and datagrams the
					// kernel dropped for a full socket receive buffer.
					t.Logf("%s: %v; device A: %s; device B: %s; kernel UDP receive drops: A %d, B %d", s.name,
						time.Since(start).Round(time.Millisecond), e2eStatsDelta(env.a.Stats(), a0), e2eStatsDelta(env.b.Stats(), b0),
						e2eKernelDrops(env.pair.A)-ka0, e2eKernelDrops(env.pair.B)-kb0)
				})
			}
			sa, sb := env.a.Stats(), env.b.Stats()
			pkts, dupes, err := env.closePcaps()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("captured %d packets, %d of them byte-identical repeats (retransmissions)", pkts, dupes)
			for _, s := range []struct {
				name string
				st   engine.Stats
			}{{"A", sa}, {"B", sb}} {
				if s.st.ICRCDrops != 0 || s.st.MalformedDrops != 0 || s.st.CQOverruns != 0 {
					t.Errorf("device %s: %d packets of its peer dropped for their ICRC, %d malformed, %d CQ overruns",
						s.name, s.st.ICRCDrops, s.st.MalformedDrops, s.st.CQOverruns)
				}
			}
			checks = append(checks, e2eStartWireCheck(top, env.checkPcap, env.pmtu))
		})
	}
	for _, c := range checks {
		t.Run(fmt.Sprintf("wirecheck_pmtu%d", c.pmtu.Bytes()), c.wait)
	}
}

// Engine bugs these tests found (engine as of commit 5b50fef). While a switch is
// true, the sub-case the bug breaks skips, saying so, instead of failing; set
// it to false with the fix, and the sub-case guards against the bug's
// return.
const (
	// e2eBugReadRewind: engine/requester.go complete (OpReadResponse) calls
	// acked(now, psn) for every READ response packet; acked then finds the
	// READ not done with firstPSN not after ackPSN (requester.go:386,
	// "acknowledged past it: its response was lost") and rewinds, so the
	// requester asks again for the rest of the READ after every receive
	// batch, and the responder answers every duplicate READ in full: a 1 MiB
	// READ at path MTU 1024 costs about 17 000 response packets instead of
	// 1024. Fix: treat the READ as lost only when ackPSN is after its
	// lastPSN.
	e2eBugReadRewind = false
	// e2eBugSRQPeek: engine/responder.go respond (OpSend, at a message's
	// start, responder.go:148) peeks the receive WR and pops it only when
	// the message ends (recvDone, responder.go:273). Two QPs sharing an SRQ
	// with messages in progress at once take the same WR: both write into
	// its buffer, both complete with its WRID, and the next WR is popped
	// unused.
	e2eBugSRQPeek = false
	// e2eBugUDMTU: a UD QP's messages are limited to 1024 bytes
	// (engine/qp.go:110 CreateQP's default mtu, checked at qp.go:416; a UD
	// QP takes no PATH_MTU attribute), whatever the port's active MTU, which
	// is what bounds UD messages in rdma_rxe and what QueryPort reports.
	e2eBugUDMTU = false
)

// e2eKnownBug fails the test, or skips it while the bug is known (see the
// switches above).
func e2eKnownBug(t *testing.T, known bool, format string, args ...any) {
	t.Helper()
	if known {
		t.Skipf("KNOWN BUG: "+format, args...)
	}
	t.Fatalf(format, args...)
}

// Layout of the operation tests' buffers: sources in the first half,
// destinations in the second, one slot per size with 64 guard bytes before.
const (
	e2eOpsBuf  = 4 << 20
	e2eSrcBase = 0
	e2eDstBase = 2 << 20
	e2eGuard   = 64
	e2eFill8   = 0xA5 // what memory nobody may write holds
)

var e2eSizes = []int{0, 1, 4095, 4096, 4097, 1 << 20}

func e2eSlot(i int) int {
	if e2eSizes[i] > 8192-2*e2eGuard {
		return 65536 + e2eGuard
	}
	return e2eGuard + i*8192
}

// e2eOpsPair is an RC QP on device A connected to one on device B, with
// their own CQs, over the shared buffers of ra and rb.
type e2eOpsPair struct {
	ra, rb     *e2eRes
	qa, qb     verbs.QP
	scqA, rcqA verbs.CQ
	scqB, rcqB verbs.CQ
}

func e2eNewOpsPair(t *testing.T, env *e2eEnv, ra, rb *e2eRes, psnA, psnB uint32) *e2eOpsPair {
	p := &e2eOpsPair{ra: ra, rb: rb, scqA: ra.cq(t, 256), rcqA: ra.cq(t, 256), scqB: rb.cq(t, 256), rcqB: rb.cq(t, 256)}
	p.qa = ra.qp(t, verbs.QPTRC, p.scqA, p.rcqA, nil, 64)
	p.qb = rb.qp(t, verbs.QPTRC, p.scqB, p.rcqB, nil, 64)
	e2eConnect(t, env.pmtu, p.qa, env.a, psnA, p.qb, env.b, psnB)
	return p
}

// e2eOps: SEND, SEND_WITH_IMM, RDMA WRITE, RDMA WRITE WITH IMM and RDMA READ
// at sizes 0, 1, 4095, 4096, 4097 and 1 MiB, the two atomics, and all of
// them mixed in one post. Each case starts with both buffers set to a known
// image; afterwards both must equal the image with exactly the transferred
// bytes changed.
func e2eOps(t *testing.T, env *e2eEnv) {
	ra, rb := e2eNewRes(t, env.a, e2eOpsBuf), e2eNewRes(t, env.b, e2eOpsBuf)
	type dataOp struct {
		name   string
		op     verbs.WROpcode
		wcOp   verbs.WCOpcode
		recv   bool // consumes a receive WR at B
		recvOp verbs.WCOpcode
		imm    bool
		read   bool // data flows B -> A
	}
	ops := []dataOp{
		{"SEND", verbs.WRSend, verbs.WCSend, true, verbs.WCRecv, false, false},
		{"SEND_WITH_IMM", verbs.WRSendWithImm, verbs.WCSend, true, verbs.WCRecv, true, false},
		{"RDMA_WRITE", verbs.WRRDMAWrite, verbs.WCRDMAWrite, false, 0, false, false},
		{"RDMA_WRITE_WITH_IMM", verbs.WRRDMAWriteWithImm, verbs.WCRDMAWrite, true, verbs.WCRecvRDMAWithImm, true, false},
		{"RDMA_READ", verbs.WRRDMARead, verbs.WCRDMARead, false, 0, false, true},
	}
	for oi, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			start := time.Now()
			// A's first PSNs wrap past 0xFFFFFF within the 1 MiB message.
			p := e2eNewOpsPair(t, env, ra, rb, 0xFFFFFF-300+uint32(oi), 0xFFFE00+uint32(oi))
			src := ra // where the data comes from
			if o.read {
				src = rb
			}
			e2eFillBuf(ra.buf)
			e2eFillBuf(rb.buf)
			for i, n := range e2eSizes {
				e2eFill(src.buf[e2eSrcBase+e2eSlot(i):][:n], uint64(oi<<8|i))
			}
			wantA, wantB := slices.Clone(ra.buf), slices.Clone(rb.buf)
			wantDst := wantB
			if o.read {
				wantDst = wantA
			}
			for i, n := range e2eSizes {
				copy(wantDst[e2eDstBase+e2eSlot(i):], src.buf[e2eSrcBase+e2eSlot(i):][:n])
			}

			var rwrs []verbs.RecvWR
			var sendWCs, recvWCs []verbs.WC
			var sendLens []uint32
			var swrs []verbs.SendWR
			for i, n := range e2eSizes {
				slot := e2eSlot(i)
				wr := verbs.SendWR{WRID: uint64(0xA000 + i), Opcode: o.op, Flags: verbs.SendSignaled}
				if o.imm {
					wr.Imm = 0x80706050 + uint32(i)*0x01010101
				}
				switch {
				case o.read:
					wr.SGList = ra.sge(e2eDstBase+slot, n)
					wr.RemoteAddr, wr.RKey = rb.mr.Addr()+uint64(e2eSrcBase+slot), rb.mr.RKey()
				default:
					wr.SGList = ra.sge(e2eSrcBase+slot, n)
					wr.RemoteAddr, wr.RKey = rb.mr.Addr()+uint64(e2eDstBase+slot), rb.mr.RKey()
				}
				swrs = append(swrs, wr)
				wc := verbs.WC{WRID: wr.WRID, Status: verbs.WCSuccess, Opcode: o.wcOp, QPNum: p.qa.Num()}
				if o.read {
					wc.ByteLen = uint32(n)
				}
				sendWCs, sendLens = append(sendWCs, wc), append(sendLens, uint32(n))
				if o.recv {
					rwr := verbs.RecvWR{WRID: uint64(0x1000 + i)}
					if o.op != verbs.WRRDMAWriteWithImm { // WRITE WITH IMM needs no receive buffer
						rwr.SGList = rb.sge(e2eDstBase+slot, n+e2eGuard)
					}
					rwrs = append(rwrs, rwr)
					rwc := verbs.WC{WRID: rwr.WRID, Status: verbs.WCSuccess, Opcode: o.recvOp, ByteLen: uint32(n),
						QPNum: p.qb.Num(), SrcQP: p.qa.Num()}
					if o.imm {
						rwc.Imm, rwc.Flags = wr.Imm, verbs.WCFlagWithImm
					}
					recvWCs = append(recvWCs, rwc)
				}
			}
			sender := env.a // of the data
			if o.read {
				sender = env.b
			}
			sent0, timeouts0 := sender.Stats().TxPackets, env.a.Stats().Timeouts
			drops0 := e2eKernelDrops(env.pair.A)
			env.sync() // the test is done with the buffers until the completions
			if len(rwrs) > 0 {
				k, err := p.qb.PostRecv(rwrs)
				if err != nil || k != len(rwrs) {
					t.Fatalf("PostRecv: %d, %v", k, err)
				}
			}
			if k, err := p.qa.PostSend(swrs); err != nil || k != len(swrs) {
				t.Fatalf("PostSend: %d, %v", k, err)
			}
			ws := &e2eCQWant{name: "A send CQ", cq: p.scqA, n: len(swrs)}
			wr := &e2eCQWant{name: "B recv CQ", cq: p.rcqB, n: len(rwrs)}
			e2eCollect(t, ws, wr)
			e2eCheckWCs(t, "A send CQ", ws.got, sendWCs, sendLens)
			e2eCheckWCs(t, "B recv CQ", wr.got, recvWCs, nil)
			env.sync()
			e2eSame(t, "A's buffer", ra.buf, wantA)
			e2eSame(t, "B's buffer", rb.buf, wantB)
			e2eNoMore(t, "A recv CQ", p.rcqA)
			e2eNoMore(t, "B send CQ", p.scqB)
			e2eNoMore(t, "A send CQ", p.scqA)
			e2eNoMore(t, "B recv CQ", p.rcqB)
			minPkts := 0
			for _, n := range e2eSizes {
				minPkts += max(1, (n+env.pmtu.Bytes()-1)/env.pmtu.Bytes())
			}
			sent := sender.Stats().TxPackets - sent0 // with ACKs on the way
			t.Logf("%s, sizes %v: %v, %d packets sent by the data's sender (at least %d)", o.name, e2eSizes,
				time.Since(start).Round(time.Millisecond), sent, minPkts)
			if o.read {
				t.Run("retransmissions", func(t *testing.T) {
					// Nothing lost, nothing to ask again: the responses go
					// once. Twice is allowed (a reordering on the veth may
					// look like a loss and have the rest asked again once).
					timeouts, drops := env.a.Stats().Timeouts-timeouts0, e2eKernelDrops(env.pair.A)-drops0
					if timeouts > 0 || drops > 0 {
						t.Skipf("A's ACK timer fired %d times and its kernel dropped %d datagrams: retransmissions were due", timeouts, drops)
					}
					if sent > 2*uint64(minPkts) {
						e2eKnownBug(t, e2eBugReadRewind, "%d READ response packets for %d without a loss (e2eBugReadRewind)", sent, minPkts)
					}
				})
			}
		})
	}

	// Atomics: 8 bytes at an 8-byte aligned remote address; the value
	// before the operation comes back into the local SGE.
	type atomicCase struct {
		cmpAdd, swap uint64
		orig, after  uint64 // remote value before and after
	}
	for ai, c := range []struct {
		name  string
		op    verbs.WROpcode
		wcOp  verbs.WCOpcode
		init  uint64
		cases []atomicCase
	}{
		{"ATOMIC_CMP_AND_SWP", verbs.WRAtomicCmpAndSwp, verbs.WCCompSwap, 0x1122334455667788, []atomicCase{
			{0x1122334455667788, 0xCAFEBABEDEADBEEF, 0x1122334455667788, 0xCAFEBABEDEADBEEF}, // matches: swapped
			{0x1122334455667788, 0x0101010101010101, 0xCAFEBABEDEADBEEF, 0xCAFEBABEDEADBEEF}, // differs: unchanged
			{0xCAFEBABEDEADBEEF, 0, 0xCAFEBABEDEADBEEF, 0},                                   // matches again
		}},
		{"ATOMIC_FETCH_AND_ADD", verbs.WRAtomicFetchAndAdd, verbs.WCFetchAdd, 0xFFFFFFFFFFFFFFF0, []atomicCase{
			{0x20, 0, 0xFFFFFFFFFFFFFFF0, 0x10}, // wraps modulo 2^64
			{1, 0, 0x10, 0x11},
			{0x8000000000000000, 0, 0x11, 0x8000000000000011},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := e2eNewOpsPair(t, env, ra, rb, 0x654321+uint32(ai), 0x123456+uint32(ai))
			e2eFillBuf(ra.buf)
			e2eFillBuf(rb.buf)
			const remote = e2eDstBase + 4096 // 8-byte aligned (the buffer is)
			binary.NativeEndian.PutUint64(rb.buf[remote:], c.init)
			if (rb.mr.Addr()+remote)&7 != 0 {
				t.Fatalf("remote address %#x not 8-byte aligned", rb.mr.Addr()+remote)
			}
			wantA, wantB := slices.Clone(ra.buf), slices.Clone(rb.buf)
			var swrs []verbs.SendWR
			var wcs []verbs.WC
			for k, ac := range c.cases {
				local := e2eDstBase + e2eGuard + k*64
				swrs = append(swrs, verbs.SendWR{WRID: uint64(0xB000 + k), Opcode: c.op, Flags: verbs.SendSignaled,
					SGList: ra.sge(local, 8), RemoteAddr: rb.mr.Addr() + remote, RKey: rb.mr.RKey(), CompareAdd: ac.cmpAdd, Swap: ac.swap})
				wcs = append(wcs, verbs.WC{WRID: uint64(0xB000 + k), Status: verbs.WCSuccess, Opcode: c.wcOp, ByteLen: 8, QPNum: p.qa.Num()})
				binary.NativeEndian.PutUint64(wantA[local:], ac.orig)
				binary.NativeEndian.PutUint64(wantB[remote:], ac.after)
			}
			env.sync() // the test is done with the buffers until the completions
			if k, err := p.qa.PostSend(swrs); err != nil || k != len(swrs) {
				t.Fatalf("PostSend: %d, %v", k, err)
			}
			e2eCheckWCs(t, "A send CQ", e2ePoll(t, "A send CQ", p.scqA, len(swrs)), wcs, nil)
			env.sync()
			e2eSame(t, "A's buffer (returned values)", ra.buf, wantA)
			e2eSame(t, "B's buffer (target word)", rb.buf, wantB)
			e2eNoMore(t, "A send CQ", p.scqA)
			e2eNoMore(t, "B recv CQ", p.rcqB)
		})
	}

	// Every operation in one post: completions in posting order across
	// opcodes, each receive matched to its message.
	t.Run("mixed", func(t *testing.T) {
		p := e2eNewOpsPair(t, env, ra, rb, 0x7FFFFF, 0)
		e2eFillBuf(ra.buf)
		e2eFillBuf(rb.buf)
		e2eFill(ra.buf[e2eSrcBase:][:1<<20], 0xAAAA)
		e2eFill(rb.buf[e2eSrcBase:][:1<<20], 0xBBBB)
		const word = e2eDstBase + 1<<20 // atomic target in B
		binary.NativeEndian.PutUint64(rb.buf[word:], 40)
		wantA, wantB := slices.Clone(ra.buf), slices.Clone(rb.buf)
		qa, qb := p.qa.Num(), p.qb.Num()
		type step struct {
			wr    verbs.SendWR
			wc    verbs.WC
			recv  *verbs.RecvWR
			rwc   verbs.WC
			apply func()
		}
		rd := func(off, n int) []verbs.SGE { return rb.sge(off, n) }
		steps := []step{
			{wr: verbs.SendWR{Opcode: verbs.WRSend, SGList: ra.sge(0, 4097)},
				wc:    verbs.WC{Opcode: verbs.WCSend},
				recv:  &verbs.RecvWR{SGList: rd(e2eDstBase, 5000)},
				rwc:   verbs.WC{Opcode: verbs.WCRecv, ByteLen: 4097},
				apply: func() { copy(wantB[e2eDstBase:], ra.buf[:4097]) }},
			{wr: verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: ra.sge(5000, 9000), RemoteAddr: rb.mr.Addr() + e2eDstBase + 8192, RKey: rb.mr.RKey()},
				wc:    verbs.WC{Opcode: verbs.WCRDMAWrite},
				apply: func() { copy(wantB[e2eDstBase+8192:], ra.buf[5000:14000]) }},
			{wr: verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: ra.sge(e2eDstBase, 12289), RemoteAddr: rb.mr.Addr() + 100, RKey: rb.mr.RKey()},
				wc:    verbs.WC{Opcode: verbs.WCRDMARead, ByteLen: 12289},
				apply: func() { copy(wantA[e2eDstBase:], rb.buf[100:100+12289]) }},
			{wr: verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: ra.sge(e2eDstBase+65536, 8), RemoteAddr: rb.mr.Addr() + word, RKey: rb.mr.RKey(), CompareAdd: 2},
				wc: verbs.WC{Opcode: verbs.WCFetchAdd, ByteLen: 8},
				apply: func() {
					binary.NativeEndian.PutUint64(wantA[e2eDstBase+65536:], 40)
					binary.NativeEndian.PutUint64(wantB[word:], 42)
				}},
			{wr: verbs.SendWR{Opcode: verbs.WRSendWithImm, Imm: 0xFEEDF00D, SGList: ra.sge(20000, 1)},
				wc:    verbs.WC{Opcode: verbs.WCSend},
				recv:  &verbs.RecvWR{SGList: rd(e2eDstBase+32768, 64)},
				rwc:   verbs.WC{Opcode: verbs.WCRecv, ByteLen: 1, Imm: 0xFEEDF00D, Flags: verbs.WCFlagWithImm},
				apply: func() { wantB[e2eDstBase+32768] = ra.buf[20000] }},
			{wr: verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGList: ra.sge(e2eDstBase+65536+8, 8), RemoteAddr: rb.mr.Addr() + word, RKey: rb.mr.RKey(), CompareAdd: 42, Swap: 7},
				wc: verbs.WC{Opcode: verbs.WCCompSwap, ByteLen: 8},
				apply: func() {
					binary.NativeEndian.PutUint64(wantA[e2eDstBase+65536+8:], 42)
					binary.NativeEndian.PutUint64(wantB[word:], 7)
				}},
			{wr: verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, Imm: 3, SGList: nil, RemoteAddr: rb.mr.Addr() + e2eDstBase + 40000, RKey: rb.mr.RKey()},
				wc:   verbs.WC{Opcode: verbs.WCRDMAWrite},
				recv: &verbs.RecvWR{SGList: rd(e2eDstBase+45000, 64)},
				rwc:  verbs.WC{Opcode: verbs.WCRecvRDMAWithImm, ByteLen: 0, Imm: 3, Flags: verbs.WCFlagWithImm}},
			{wr: verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{ // three SGEs gathered into one message
				ra.sge(30000, 1000)[0], ra.sge(31500, 3000)[0], ra.sge(40000, 1)[0]}},
				wc: verbs.WC{Opcode: verbs.WCSend},
				recv: &verbs.RecvWR{SGList: []verbs.SGE{ // scattered into two
					rd(e2eDstBase+50000, 2500)[0], rd(e2eDstBase+60000, 2000)[0]}},
				rwc: verbs.WC{Opcode: verbs.WCRecv, ByteLen: 4001},
				apply: func() {
					msg := slices.Concat(ra.buf[30000:31000], ra.buf[31500:34500], ra.buf[40000:40001])
					copy(wantB[e2eDstBase+50000:], msg[:2500])
					copy(wantB[e2eDstBase+60000:], msg[2500:])
				}},
		}
		var swrs []verbs.SendWR
		var rwrs []verbs.RecvWR
		var swcs, rwcs []verbs.WC
		var lens []uint32
		for i, s := range steps {
			s.wr.WRID, s.wr.Flags = uint64(0xC000+i), verbs.SendSignaled
			swrs = append(swrs, s.wr)
			s.wc.WRID, s.wc.Status, s.wc.QPNum = s.wr.WRID, verbs.WCSuccess, qa
			swcs = append(swcs, s.wc)
			var n uint32
			for _, g := range s.wr.SGList {
				n += g.Length
			}
			lens = append(lens, n)
			if s.recv != nil {
				s.recv.WRID = uint64(0xD000 + i)
				rwrs = append(rwrs, *s.recv)
				s.rwc.WRID, s.rwc.Status, s.rwc.QPNum, s.rwc.SrcQP = s.recv.WRID, verbs.WCSuccess, qb, qa
				rwcs = append(rwcs, s.rwc)
			}
			if s.apply != nil {
				s.apply()
			}
		}
		env.sync() // the test is done with the buffers until the completions
		if k, err := p.qb.PostRecv(rwrs); err != nil || k != len(rwrs) {
			t.Fatalf("PostRecv: %d, %v", k, err)
		}
		if k, err := p.qa.PostSend(swrs); err != nil || k != len(swrs) {
			t.Fatalf("PostSend: %d, %v", k, err)
		}
		ws := &e2eCQWant{name: "A send CQ", cq: p.scqA, n: len(swrs)}
		wr := &e2eCQWant{name: "B recv CQ", cq: p.rcqB, n: len(rwrs)}
		e2eCollect(t, ws, wr)
		e2eCheckWCs(t, "A send CQ", ws.got, swcs, lens)
		e2eCheckWCs(t, "B recv CQ", wr.got, rwcs, nil)
		env.sync()
		e2eSame(t, "A's buffer", ra.buf, wantA)
		e2eSame(t, "B's buffer", rb.buf, wantB)
		e2eNoMore(t, "A recv CQ", p.rcqA)
		e2eNoMore(t, "B send CQ", p.scqB)
	})
}

// e2eFillBuf sets a whole buffer to the guard value.
func e2eFillBuf(b []byte) {
	for i := range b {
		b[i] = e2eFill8
	}
}

// e2eManyQPs: 64 RC QPs on device A, each connected to its own QP on B, all
// posting at once from their own goroutines: from A a SEND, a WRITE WITH
// IMM, a READ and a FETCH_AND_ADD of 1<<i on one shared word of B; from B a
// SEND back. Completions are checked per QP, in order; the 64 atomics must
// have been applied one at a time (each saw exactly the sum of those before
// it).
func e2eManyQPs(t *testing.T, env *e2eEnv) {
	const (
		n      = 64
		stride = 64 << 10
	)
	ra, rb := e2eNewRes(t, env.a, n*stride), e2eNewRes(t, env.b, n*stride+4096)
	scqA, rcqA := ra.cq(t, 1024), ra.cq(t, 1024)
	scqB, rcqB := rb.cq(t, 1024), rb.cq(t, 1024)
	qa, qb := make([]verbs.QP, n), make([]verbs.QP, n)
	for i := range n {
		qa[i] = ra.qp(t, verbs.QPTRC, scqA, rcqA, nil, 8)
		qb[i] = rb.qp(t, verbs.QPTRC, scqB, rcqB, nil, 8)
		e2eConnect(t, env.pmtu, qa[i], env.a, uint32(i)*0x3FFFF+11, qb[i], env.b, 0xFFFFFF-uint32(i)*977)
	}
	const counter = n * stride // in B, 8-byte aligned
	e2eFillBuf(ra.buf)
	e2eFillBuf(rb.buf)
	binary.NativeEndian.PutUint64(rb.buf[counter:], 0)
	sendLen := func(i int) int { return 5000 + 13*i }
	writeLen := func(i int) int { return 3000 + 7*i }
	readLen := func(i int) int { return 7000 + 11*i }
	backLen := func(i int) int { return 6000 + 5*i }
	for i := range n {
		base := i * stride
		e2eFill(ra.buf[base:][:sendLen(i)], uint64(i<<4|1))
		e2eFill(ra.buf[base+8192:][:writeLen(i)], uint64(i<<4|2))
		e2eFill(rb.buf[base+16384:][:readLen(i)], uint64(i<<4|3))
		e2eFill(rb.buf[base+24576:][:backLen(i)], uint64(i<<4|4))
	}
	wantA, wantB := slices.Clone(ra.buf), slices.Clone(rb.buf)
	sendWRs, backWRs := make([][]verbs.SendWR, n), make([][]verbs.SendWR, n)
	wantSA, wantRB := map[uint32][]verbs.WC{}, map[uint32][]verbs.WC{}
	wantSB, wantRA := map[uint32][]verbs.WC{}, map[uint32][]verbs.WC{}
	lensA := map[uint32][]uint32{}
	idx := map[uint32]int{}
	for i := range n {
		base := i * stride
		a, b := qa[i].Num(), qb[i].Num()
		idx[a] = i
		copy(wantB[base:], ra.buf[base:][:sendLen(i)])
		copy(wantB[base+8192:], ra.buf[base+8192:][:writeLen(i)])
		copy(wantA[base+16384:], rb.buf[base+16384:][:readLen(i)])
		copy(wantA[base+40960:], rb.buf[base+24576:][:backLen(i)])
		// wantA[base+32768:] (the FETCH_AND_ADD result) is filled in from
		// what came back, after the ordering check.
		_, err := qb[i].PostRecv([]verbs.RecvWR{
			{WRID: uint64(i<<8 | 1), SGList: rb.sge(base, sendLen(i)+e2eGuard)},
			{WRID: uint64(i<<8 | 2)},
		})
		e2eMust(t, err)
		_, err = qa[i].PostRecv([]verbs.RecvWR{{WRID: uint64(i<<8 | 3), SGList: ra.sge(base+40960, backLen(i)+e2eGuard)}})
		e2eMust(t, err)
		imm := 0xC0DE0000 | uint32(i)
		sendWRs[i] = []verbs.SendWR{
			{WRID: uint64(i<<8 | 0x10), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: ra.sge(base, sendLen(i))},
			{WRID: uint64(i<<8 | 0x11), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: imm, SGList: ra.sge(base+8192, writeLen(i)),
				RemoteAddr: rb.mr.Addr() + uint64(base+8192), RKey: rb.mr.RKey()},
			{WRID: uint64(i<<8 | 0x12), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: ra.sge(base+16384, readLen(i)),
				RemoteAddr: rb.mr.Addr() + uint64(base+16384), RKey: rb.mr.RKey()},
			{WRID: uint64(i<<8 | 0x13), Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: ra.sge(base+32768, 8),
				RemoteAddr: rb.mr.Addr() + counter, RKey: rb.mr.RKey(), CompareAdd: 1 << i},
		}
		backWRs[i] = []verbs.SendWR{{WRID: uint64(i<<8 | 0x20), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: rb.sge(base+24576, backLen(i))}}
		wantSA[a] = []verbs.WC{
			{WRID: uint64(i<<8 | 0x10), Opcode: verbs.WCSend, QPNum: a},
			{WRID: uint64(i<<8 | 0x11), Opcode: verbs.WCRDMAWrite, QPNum: a},
			{WRID: uint64(i<<8 | 0x12), Opcode: verbs.WCRDMARead, ByteLen: uint32(readLen(i)), QPNum: a},
			{WRID: uint64(i<<8 | 0x13), Opcode: verbs.WCFetchAdd, ByteLen: 8, QPNum: a},
		}
		lensA[a] = []uint32{uint32(sendLen(i)), uint32(writeLen(i)), uint32(readLen(i)), 8}
		wantRB[b] = []verbs.WC{
			{WRID: uint64(i<<8 | 1), Opcode: verbs.WCRecv, ByteLen: uint32(sendLen(i)), QPNum: b, SrcQP: a},
			{WRID: uint64(i<<8 | 2), Opcode: verbs.WCRecvRDMAWithImm, ByteLen: uint32(writeLen(i)), Imm: imm, Flags: verbs.WCFlagWithImm, QPNum: b, SrcQP: a},
		}
		wantSB[b] = []verbs.WC{{WRID: uint64(i<<8 | 0x20), Opcode: verbs.WCSend, QPNum: b}}
		wantRA[a] = []verbs.WC{{WRID: uint64(i<<8 | 3), Opcode: verbs.WCRecv, ByteLen: uint32(backLen(i)), QPNum: a, SrcQP: b}}
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	go1 := make(chan struct{})
	for i := range n {
		for _, side := range []struct {
			qp  verbs.QP
			wrs []verbs.SendWR
		}{{qa[i], sendWRs[i]}, {qb[i], backWRs[i]}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-go1
				if k, err := side.qp.PostSend(side.wrs); err != nil || k != len(side.wrs) {
					errs <- fmt.Errorf("QP %#x: PostSend: %d, %v", side.qp.Num(), k, err)
				}
			}()
		}
	}
	env.sync() // the test is done with the buffers until the completions
	close(go1)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	cw := []*e2eCQWant{
		{name: "A send CQ", cq: scqA, n: 4 * n}, {name: "B recv CQ", cq: rcqB, n: 2 * n},
		{name: "B send CQ", cq: scqB, n: n}, {name: "A recv CQ", cq: rcqA, n: n},
	}
	e2eCollect(t, cw...)
	elapsed := time.Since(start)
	for k, want := range []map[uint32][]verbs.WC{wantSA, wantRB, wantSB, wantRA} {
		got := map[uint32][]verbs.WC{}
		for _, w := range cw[k].got {
			got[w.QPNum] = append(got[w.QPNum], w)
		}
		for qpn, ws := range want {
			for j := range ws {
				ws[j].Status = verbs.WCSuccess
			}
			var lens []uint32
			if k == 0 {
				lens = lensA[qpn]
			}
			e2eCheckWCs(t, fmt.Sprintf("%s, QP %#x", cw[k].name, qpn), got[qpn], ws, lens)
		}
	}
	env.sync()
	// The atomics: sorted by the value each saw, each saw the sum of
	// those before it.
	type fa struct {
		orig, add uint64
		i         int
	}
	var fas []fa
	for i := range n {
		orig := binary.NativeEndian.Uint64(ra.buf[i*stride+32768:])
		fas = append(fas, fa{orig, 1 << i, i})
		binary.NativeEndian.PutUint64(wantA[i*stride+32768:], orig)
	}
	slices.SortFunc(fas, func(x, y fa) int {
		if x.orig < y.orig {
			return -1
		}
		if x.orig > y.orig {
			return 1
		}
		return 0
	})
	sum := uint64(0)
	for _, f := range fas {
		if f.orig != sum {
			t.Fatalf("FETCH_AND_ADD of QP %d returned %#x, want %#x (the sum of the adds before it): not atomic", f.i, f.orig, sum)
		}
		sum += f.add
	}
	binary.NativeEndian.PutUint64(wantB[counter:], sum)
	if got := binary.NativeEndian.Uint64(rb.buf[counter:]); got != 1<<64-1 || sum != got {
		t.Fatalf("counter %#x after 64 FETCH_AND_ADDs, want %#x", got, uint64(1<<64-1))
	}
	e2eSame(t, "A's buffer", ra.buf, wantA)
	e2eSame(t, "B's buffer", rb.buf, wantB)
	for _, w := range cw {
		e2eNoMore(t, w.name, w.cq)
	}
	t.Logf("%d QPs, 5 messages each, %d completions: %v", n, 7*n, elapsed.Round(time.Millisecond))
}

// e2eSRQ: one SRQ on device B feeds 8 RC QPs, whose peers on A send 16
// SEND_WITH_IMMs each. Only 8 receives are posted at first, one more per
// completion, so senders meet RNR NAKs and retry. Then 2 of the QPs each send
// one message longer than the send window, so that the sender interleaves
// messages of different QPs on the wire and the SRQ hands out receives to
// messages in progress at the same time.
func e2eSRQ(t *testing.T, env *e2eEnv) {
	const (
		nqp   = 8
		nmsg  = 16
		slot  = 8192
		total = nqp * nmsg
	)
	ra, rb := e2eNewRes(t, env.a, nqp*nmsg*slot), e2eNewRes(t, env.b, total*slot)
	srq, err := rb.pd.CreateSRQ(total, 1)
	e2eMust(t, err)
	t.Cleanup(func() { srq.Destroy() })
	scqA, rcqA := ra.cq(t, 1024), ra.cq(t, 64)
	scqB, rcqB := rb.cq(t, 64), rb.cq(t, 1024)
	qa, qb := make([]verbs.QP, nqp), make([]verbs.QP, nqp)
	byQPN := map[uint32]int{}
	for i := range nqp {
		qa[i] = ra.qp(t, verbs.QPTRC, scqA, rcqA, nil, 64)
		qb[i] = rb.qp(t, verbs.QPTRC, scqB, rcqB, srq, 64)
		e2eConnect(t, env.pmtu, qa[i], env.a, 1000*uint32(i), qb[i], env.b, 0xABCDE)
		byQPN[qb[i].Num()] = i
	}
	if _, err := qb[0].PostRecv([]verbs.RecvWR{{WRID: 1}}); !errors.Is(err, verbs.ErrInvalidWR) {
		t.Errorf("PostRecv on a QP with an SRQ: %v, want ErrInvalidWR", err)
	}
	size := func(i, s int) int { return (i*977 + s*1553) % 6000 } // 0 for the first message of QP 0
	e2eFillBuf(ra.buf)
	e2eFillBuf(rb.buf)
	for i := range nqp {
		for s := range nmsg {
			e2eFill(ra.buf[(i*nmsg+s)*slot:][:size(i, s)], uint64(0x5000+i*nmsg+s))
		}
	}
	env.sync()
	post := func(k int) {
		t.Helper()
		if _, err := srq.PostRecv([]verbs.RecvWR{{WRID: uint64(0xE000 + k), SGList: rb.sge(k*slot, slot)}}); err != nil {
			t.Fatal(err)
		}
	}
	posted := 0
	for ; posted < nqp; posted++ { // too few: senders meet RNR NAKs
		post(posted)
	}
	for i := range nqp {
		var wrs []verbs.SendWR
		for s := range nmsg {
			id := uint64(i<<8 | s)
			wrs = append(wrs, verbs.SendWR{WRID: id, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: uint32(i<<16 | s),
				SGList: ra.sge((i*nmsg+s)*slot, size(i, s))})
		}
		if k, err := qa[i].PostSend(wrs); err != nil || k != len(wrs) {
			t.Fatalf("PostSend: %d, %v", k, err)
		}
	}
	// Receive, reposting as completions come.
	var rwcs []verbs.WC
	deadline := time.Now().Add(e2ePollTimeout)
	wc := make([]verbs.WC, 16)
	for len(rwcs) < total {
		k := rcqB.Poll(wc)
		for _, w := range wc[:k] {
			rwcs = append(rwcs, w)
			if posted < total {
				post(posted)
				posted++
			}
		}
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d receives after %v (%d posted)", len(rwcs), total, e2ePollTimeout, posted)
			}
			e2eYield()
		}
	}
	ws := &e2eCQWant{name: "A send CQ", cq: scqA, n: total}
	e2eCollect(t, ws)
	env.sync()
	got := map[int][]verbs.WC{}
	for _, w := range ws.got {
		got[int(w.WRID>>8)] = append(got[int(w.WRID>>8)], w)
	}
	for i := range nqp {
		var want []verbs.WC
		var lens []uint32
		for s := range nmsg {
			want = append(want, verbs.WC{WRID: uint64(i<<8 | s), Status: verbs.WCSuccess, Opcode: verbs.WCSend, QPNum: qa[i].Num()})
			lens = append(lens, uint32(size(i, s)))
		}
		e2eCheckWCs(t, fmt.Sprintf("A send CQ, QP %d", i), got[i], want, lens)
	}
	wantB := slices.Clone(rb.buf)
	e2eFillBuf(wantB)
	used := map[uint64]bool{}
	next := make([]int, nqp) // next message expected per QP
	for _, w := range rwcs {
		i, ok := byQPN[w.QPNum]
		if !ok {
			t.Fatalf("receive completion for unknown QP: %+v", w)
		}
		s := next[i]
		next[i]++
		want := verbs.WC{WRID: w.WRID, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(size(i, s)),
			Imm: uint32(i<<16 | s), Flags: verbs.WCFlagWithImm, QPNum: qb[i].Num(), SrcQP: qa[i].Num()}
		if d := e2eWCDiff(w, want); d != "" {
			t.Fatalf("QP %d message %d: %s\n  got  %+v", i, s, d, w)
		}
		k := int(w.WRID - 0xE000)
		if k < 0 || k >= total || used[w.WRID] {
			t.Fatalf("QP %d message %d: SRQ WR %#x unknown or used twice", i, s, w.WRID)
		}
		used[w.WRID] = true
		copy(wantB[k*slot:], ra.buf[(i*nmsg+s)*slot:][:size(i, s)])
	}
	e2eSame(t, "B's SRQ buffers", rb.buf, wantB)
	e2eNoMore(t, "B recv CQ", rcqB)
	e2eNoMore(t, "A send CQ", scqA)

	t.Run("interleaved", func(t *testing.T) {
		// Two messages in progress at once on QPs sharing the SRQ, each
		// needing its own receive WR: one from A to QP 0 of which A sends
		// the first packets, then is held back; meanwhile a QP on B itself
		// (its packets go out of B's socket and back in) sends a whole
		// message to a ninth QP of the SRQ. Then A goes on.
		qx := rb.qp(t, verbs.QPTRC, scqB, rcqB, srq, 8)
		qs := rb.qp(t, verbs.QPTRC, scqB, scqB, nil, 8)
		e2eConnect(t, env.pmtu, qs, env.b, 0x333, qx, env.b, 0x444)
		mtu := env.pmtu.Bytes()
		const nbig = 2
		sizes := [nbig]int{128 * mtu, 16 * mtu}
		senders := [nbig]verbs.QP{qa[0], qs}
		peers := [nbig]verbs.QP{qb[0], qx}
		sa, sx, sb := ra.extraMR(t, sizes[0]), rb.extraMR(t, sizes[1]), rb.extraMR(t, nbig*(sizes[0]+slot))
		src := [nbig]verbs.MR{sa, sx}
		e2eFillBuf(sb.Buf())
		for i := range nbig {
			e2eFill(src[i].Buf(), uint64(0x6000+i))
		}
		env.sync()
		var rwrs []verbs.RecvWR
		for k := range nbig {
			rwrs = append(rwrs, verbs.RecvWR{WRID: uint64(0xF000 + k),
				SGList: []verbs.SGE{{Addr: sb.Addr() + uint64(k*(sizes[0]+slot)), Length: uint32(sizes[0] + slot), LKey: sb.LKey()}}})
		}
		if _, err := srq.PostRecv(rwrs); err != nil {
			t.Fatal(err)
		}
		post := func(i int) {
			t.Helper()
			if _, err := senders[i].PostSend([]verbs.SendWR{{WRID: uint64(0xF100 + i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{{Addr: src[i].Addr(), Length: uint32(sizes[i]), LKey: src[i].LKey()}}}}); err != nil {
				t.Fatal(err)
			}
		}
		// Hold A back at the 40th packet of its message: the first batch of
		// packets (32) is out, so B has a message in progress on QP 0.
		held, release := make(chan struct{}), make(chan struct{})
		var releaseOnce sync.Once
		letGo := func() { releaseOnce.Do(func() { close(release) }) }
		defer letGo() // never leave A's driver blocked
		n := 0
		hook := func(pkt []byte) {
			if len(pkt) < wire.BTHLen || wire.BTH(pkt).DestQP() != wire.QPN(peers[0].Num()) {
				return
			}
			if n++; n == 40 {
				close(held)
				<-release
			}
		}
		env.hold.Store(&hook)
		defer env.hold.Store(nil)
		post(0)
		select {
		case <-held:
		case <-time.After(e2ePollTimeout):
			t.Fatalf("A did not send 40 packets of its message in %v", e2ePollTimeout)
		}
		post(1)
		first := &e2eCQWant{name: "B recv CQ (the message from B)", cq: rcqB, n: 1}
		e2eCollect(t, first)
		letGo()
		ws := &e2eCQWant{name: "A send CQ", cq: scqA, n: 1}
		wr := &e2eCQWant{name: "B recv CQ", cq: rcqB, n: nbig, got: first.got}
		wx := &e2eCQWant{name: "B send CQ", cq: scqB, n: 1}
		e2eCollect(t, ws, wr, wx)
		env.sync()
		wantB := slices.Clone(sb.Buf())
		e2eFillBuf(wantB)
		used := map[uint64]int{}
		var bad []string
		for _, w := range wr.got {
			i := -1
			for k, p := range peers {
				if p.Num() == w.QPNum {
					i = k
				}
			}
			if i < 0 {
				t.Fatalf("receive completion for another QP: %+v", w)
			}
			want := verbs.WC{WRID: w.WRID, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(sizes[i]),
				QPNum: peers[i].Num(), SrcQP: senders[i].Num()}
			if d := e2eWCDiff(w, want); d != "" {
				bad = append(bad, fmt.Sprintf("message %d: %s", i, d))
			}
			if n, dup := used[w.WRID]; dup {
				bad = append(bad, fmt.Sprintf("messages %d and %d completed the same SRQ WR %#x", n, i, w.WRID))
			}
			used[w.WRID] = i
			if k := int(w.WRID - 0xF000); k >= 0 && k < nbig {
				copy(wantB[k*(sizes[0]+slot):], src[i].Buf())
			}
		}
		if !bytes.Equal(sb.Buf(), wantB) {
			bad = append(bad, "the data is not in the receive buffers each completion names")
		}
		if len(bad) > 0 {
			e2eKnownBug(t, e2eBugSRQPeek, "2 messages in progress at once on QPs sharing an SRQ (e2eBugSRQPeek): %s", strings.Join(bad, "; "))
		}
		for _, w := range append(ws.got, wx.got...) {
			if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCSend {
				t.Errorf("send completion %+v", w)
			}
		}
	})
}

// e2eUD: 4 UD QPs, two on each device; each sends to the other three
// (including the one on its own device) messages of 0, 1, 333 and 1024
// bytes, one of them SEND_WITH_IMM. Each receive starts with the 40-byte GRH
// whose last 20 bytes are the IPv4 header the packet came in: its source
// must be the sender's address.
func e2eUD(t *testing.T, env *e2eEnv) {
	const (
		qkey = 0x11112222
		slot = 8192
	)
	sizes := []int{0, 1, 333, 1024}
	type udQP struct {
		dev      *Device
		res      *e2eRes
		qp       verbs.QP
		scq, rcq verbs.CQ
		local    int // index among the QPs of its device
	}
	ra, rb := e2eNewRes(t, env.a, 1<<20), e2eNewRes(t, env.b, 1<<20)
	e2eFillBuf(ra.buf)
	e2eFillBuf(rb.buf)
	var qs []*udQP
	for j := range 4 {
		u := &udQP{dev: env.a, res: ra, local: j / 2}
		if j%2 == 1 {
			u.dev, u.res = env.b, rb
		}
		u.scq, u.rcq = u.res.cq(t, 64), u.res.cq(t, 64)
		u.qp = u.res.qp(t, verbs.QPTUD, u.scq, u.rcq, nil, 32)
		e2eUDToRTS(t, u.qp, qkey, uint32(j*100))
		qs = append(qs, u)
	}
	// AH per sender and destination device, from the sender's PD.
	ah := func(from *udQP, to *udQP) verbs.AH {
		h, err := from.res.pd.CreateAH(&verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: to.dev.GID(), PortNum: 1})
		e2eMust(t, err)
		t.Cleanup(func() { h.Destroy() })
		return h
	}
	recvOff := func(u *udQP, k int) int { return u.local*(256<<10) + k*slot }
	srcOff := func(u *udQP, d, k int) int { return 512<<10 + u.local*(256<<10) + (d*len(sizes)+k)*slot }
	// Receives: 3 senders x len(sizes) each.
	nrecv := 3 * len(sizes)
	for _, u := range qs {
		var rwrs []verbs.RecvWR
		for k := range nrecv {
			rwrs = append(rwrs, verbs.RecvWR{WRID: uint64(0x7000 + k), SGList: u.res.sge(recvOff(u, k), slot)})
		}
		if n, err := u.qp.PostRecv(rwrs); err != nil || n != nrecv {
			t.Fatalf("PostRecv: %d, %v", n, err)
		}
	}
	imm := func(j, d int) uint32 { return 0x5EED0000 | uint32(j<<8|d) }
	for j, u := range qs {
		for d := range qs {
			if d != j {
				for k, n := range sizes {
					e2eFill(u.res.buf[srcOff(u, d, k):][:n], uint64(j<<16|d<<8|k))
				}
			}
		}
	}
	env.sync()
	wantSend := make([][]verbs.WC, 4)
	sendLens := make([][]uint32, 4)
	for j, u := range qs {
		var wrs []verbs.SendWR
		for k, n := range sizes {
			for d, v := range qs {
				if d == j {
					continue
				}
				wr := verbs.SendWR{WRID: uint64(j<<16 | d<<8 | k), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
					SGList: u.res.sge(srcOff(u, d, k), n), AH: ah(u, v), RemoteQPN: v.qp.Num(), RemoteQKey: qkey}
				if k == 1 {
					wr.Opcode, wr.Imm = verbs.WRSendWithImm, imm(j, d)
				}
				wrs = append(wrs, wr)
				wantSend[j] = append(wantSend[j], verbs.WC{WRID: wr.WRID, Status: verbs.WCSuccess, Opcode: verbs.WCSend, QPNum: u.qp.Num()})
				sendLens[j] = append(sendLens[j], uint32(n))
			}
		}
		if n, err := u.qp.PostSend(wrs); err != nil || n != len(wrs) {
			t.Fatalf("QP %d: PostSend: %d, %v", j, n, err)
		}
	}
	var cw []*e2eCQWant
	for j, u := range qs {
		cw = append(cw, &e2eCQWant{name: fmt.Sprintf("QP %d send CQ", j), cq: u.scq, n: 3 * len(sizes)},
			&e2eCQWant{name: fmt.Sprintf("QP %d recv CQ", j), cq: u.rcq, n: nrecv})
	}
	e2eCollect(t, cw...)
	env.sync()
	// A sender is its address and QPN: QPNs are per device, and the two
	// devices number their QPs alike. The address comes from the GRH; the
	// payload, made from the sender's index, confirms it.
	type sender struct {
		addr netip.Addr
		qpn  uint32
	}
	senders := map[sender]int{}
	for j, u := range qs {
		senders[sender{u.dev.Addr(), u.qp.Num()}] = j
	}
	for d, v := range qs {
		e2eCheckWCs(t, fmt.Sprintf("QP %d send CQ", d), cw[2*d].got, wantSend[d], sendLens[d])
		next := map[int]int{} // per sender: the next message expected
		for k, w := range cw[2*d+1].got {
			grhSrc := wire.IPv4(v.res.buf[recvOff(v, k)+20:][:20]).Src()
			j, ok := senders[sender{grhSrc, w.SrcQP}]
			if !ok || j == d {
				t.Fatalf("QP %d receive %d: from QP %#x at %v (GRH), not one of the other QPs: %+v", d, k, w.SrcQP, grhSrc, w)
			}
			m := next[j]
			next[j]++
			if m >= len(sizes) {
				t.Fatalf("QP %d: more than %d messages from QP %d", d, len(sizes), j)
			}
			n := sizes[m]
			want := verbs.WC{WRID: uint64(0x7000 + k), Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(40 + n),
				QPNum: v.qp.Num(), SrcQP: qs[j].qp.Num(), Flags: verbs.WCFlagGRH}
			if m == 1 {
				want.Imm, want.Flags = imm(j, d), verbs.WCFlagGRH|verbs.WCFlagWithImm
			}
			if diff := e2eWCDiff(w, want); diff != "" {
				t.Fatalf("QP %d receive %d (message %d of QP %d): %s\n  got  %+v", d, k, m, j, diff, w)
			}
			buf := v.res.buf[recvOff(v, k):][:slot]
			grh := buf[:40]
			e2eSame(t, "GRH bytes 0-19 (unused for IPv4)", grh[:20], make([]byte, 20))
			ip := wire.IPv4(grh[20:])
			tlen := wire.IPv4UDPLen + wire.BTHLen + wire.DETHLen + n + (4-n%4)%4 + wire.ICRCLen
			if m == 1 {
				tlen += wire.ImmDtLen
			}
			if ip.Version() != 4 || ip.HeaderLen() != 20 || ip.Protocol() != wire.IPProtocolUDP || !ip.ChecksumOK() ||
				ip.Src() != qs[j].dev.Addr() || ip.Dst() != v.dev.Addr() || ip.TotalLen() != tlen {
				t.Fatalf("QP %d receive %d (from QP %d): IPv4 header in the GRH: version %d, IHL %d, protocol %d, checksum ok %v, %v -> %v, total length %d; want 4, 20, 17, true, %v -> %v, %d\n% x",
					d, k, j, ip.Version(), ip.HeaderLen(), ip.Protocol(), ip.ChecksumOK(), ip.Src(), ip.Dst(), ip.TotalLen(),
					qs[j].dev.Addr(), v.dev.Addr(), tlen, []byte(grh))
			}
			e2eSame(t, fmt.Sprintf("QP %d receive %d (message %d of QP %d): payload", d, k, m, j),
				buf[40:40+n], qs[j].res.buf[srcOff(qs[j], d, m):][:n])
			for x, c := range buf[40+n:] {
				if c != e2eFill8 {
					t.Fatalf("QP %d receive %d: byte %d past the message was written (%#02x)", d, k, 40+n+x, c)
				}
			}
		}
	}
	for _, w := range cw {
		e2eNoMore(t, w.name, w.cq)
	}

	t.Run("port_mtu", func(t *testing.T) {
		// A UD message may be as long as the port's MTU (rdma_rxe: the
		// device's MTU; UD QPs take no path MTU attribute).
		attr, err := ra.ctx.QueryPort(1)
		e2eMust(t, err)
		n := attr.ActiveMTU.Bytes()
		if n <= 1024 || env.pair.MTU < n+100 {
			t.Skipf("port MTU %d, veth MTU %d: nothing beyond the 1024-byte case", n, env.pair.MTU)
		}
		u, v := qs[0], qs[1]
		off := 900 << 10
		e2eFill(u.res.buf[off:][:n], 77)
		env.sync()
		if _, err := v.qp.PostRecv([]verbs.RecvWR{{WRID: 0x7777, SGList: v.res.sge(off, 40+n)}}); err != nil {
			t.Fatal(err)
		}
		_, err = u.qp.PostSend([]verbs.SendWR{{WRID: 0x7778, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: u.res.sge(off, n), AH: ah(u, v), RemoteQPN: v.qp.Num(), RemoteQKey: qkey}})
		if errors.Is(err, verbs.ErrInvalidWR) {
			e2eKnownBug(t, e2eBugUDMTU, "a UD send of %d bytes, the port's active MTU, is refused (e2eBugUDMTU): %v", n, err)
		}
		e2eMust(t, err)
		e2eCheckWCs(t, "send", e2ePoll(t, "send CQ", u.scq, 1),
			[]verbs.WC{{WRID: 0x7778, Status: verbs.WCSuccess, Opcode: verbs.WCSend, QPNum: u.qp.Num()}}, []uint32{uint32(n)})
		e2eCheckWCs(t, "recv", e2ePoll(t, "recv CQ", v.rcq, 1),
			[]verbs.WC{{WRID: 0x7777, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(40 + n), QPNum: v.qp.Num(),
				SrcQP: u.qp.Num(), Flags: verbs.WCFlagGRH}}, nil)
		env.sync()
		e2eSame(t, "payload", v.res.buf[off+40:][:n], u.res.buf[off:][:n])
	})
}

// e2eMisuse: the QP state machine and work requests refuse misuse with
// errors that match the verbs sentinels and name the problem, through the
// device, and a refused call changes nothing: the QP still connects and
// works afterwards. A smoke: the engine's TestStateMachineMisuse tries
// every refusal; the address handle's are the device's own.
func e2eMisuse(t *testing.T, env *e2eEnv) {
	ra, rb := e2eNewRes(t, env.a, 1<<16), e2eNewRes(t, env.b, 1<<16)
	cqA, cqB := ra.cq(t, 64), rb.cq(t, 64)
	qp := ra.qp(t, verbs.QPTRC, cqA, cqA, nil, 16)
	peer := rb.qp(t, verbs.QPTRC, cqB, cqB, nil, 16)
	send := []verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: ra.sge(0, 16)}}
	check := func(what string, err, target error, words ...string) {
		t.Helper()
		if !errors.Is(err, target) {
			t.Errorf("%s: error %v, want one matching %q", what, err, target)
			return
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %q", what, err, w)
			}
		}
		t.Logf("%s: %v", what, err)
	}
	state := func(want verbs.QPState) {
		t.Helper()
		a, err := qp.Query()
		e2eMust(t, err)
		if a.State != want {
			t.Fatalf("QP state %v, want %v", a.State, want)
		}
	}
	initAttr := &verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite}
	initMask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
	rtrAttr := &verbs.QPAttr{State: verbs.QPSRTR, PathMTU: env.pmtu, DestQPN: peer.Num(), RQPSN: 5, MaxDestRdAtomic: 1,
		MinRNRTimer: 12, AHAttr: verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: env.b.GID(), PortNum: 1}}
	rtrMask := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	rtsAttr := &verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 9, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
	rtsMask := verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic

	n, err := qp.PostSend(send)
	check("PostSend in RESET", err, verbs.ErrInvalidState, "RESET")
	if n != 0 {
		t.Errorf("PostSend in RESET posted %d", n)
	}
	err = qp.Modify(rtrAttr, rtrMask)
	check("RESET -> RTR", err, verbs.ErrInvalidState, "RESET", "RTR")
	err = qp.Modify(initAttr, initMask&^verbs.AttrAccessFlags)
	check("RESET -> INIT without ACCESS_FLAGS", err, verbs.ErrInvalidAttr, "ACCESS_FLAGS")
	state(verbs.QPSReset)

	e2eMust(t, qp.Modify(initAttr, initMask))
	bad := *rtrAttr
	bad.PathMTU = 7
	err = qp.Modify(&bad, rtrMask)
	check("INIT -> RTR with path MTU code 7", err, verbs.ErrInvalidAttr, "path MTU", "7")
	state(verbs.QPSInit)
	e2eMust(t, qp.Modify(rtrAttr, rtrMask))
	e2eMust(t, qp.Modify(rtsAttr, rtsMask))
	state(verbs.QPSRTS)

	// A bad work request in RTS: it is named, those before it post.
	copy(ra.buf, "sixteen bytes ok") // gathered when the SEND goes out
	env.sync()
	wrs := []verbs.SendWR{
		send[0],
		{WRID: 0xBAD, Opcode: verbs.WRAtomicFetchAndAdd, SGList: ra.sge(0, 4), RemoteAddr: rb.mr.Addr(), RKey: rb.mr.RKey()},
	}
	n, err = qp.PostSend(wrs)
	check("atomic with a 4-byte SGE", err, verbs.ErrInvalidWR, "0xbad", "8-byte")
	if n != 1 {
		t.Errorf("PostSend posted %d WRs before the bad one, want 1", n)
	}

	// The QP works: the SEND posted above reaches the peer.
	e2eRCToRTS(t, peer, env.pmtu, qp.Num(), env.a.GID(), 9, 5)
	_, err = peer.PostRecv([]verbs.RecvWR{{WRID: 3, SGList: rb.sge(0, 64)}})
	e2eMust(t, err)
	e2eCheckWCs(t, "A CQ", e2ePoll(t, "A CQ", cqA, 1),
		[]verbs.WC{{WRID: 1, Status: verbs.WCSuccess, Opcode: verbs.WCSend, QPNum: qp.Num()}}, []uint32{16})
	e2eCheckWCs(t, "B CQ", e2ePoll(t, "B CQ", cqB, 1),
		[]verbs.WC{{WRID: 3, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: 16, QPNum: peer.Num(), SrcQP: qp.Num()}}, nil)
	env.sync()
	e2eSame(t, "message", rb.buf[:16], []byte("sixteen bytes ok"))

	// UD: a send needs an address handle, which needs an IPv4-mapped GID.
	ud := ra.qp(t, verbs.QPTUD, cqA, cqA, nil, 16)
	e2eUDToRTS(t, ud, 1, 0)
	n, err = ud.PostSend([]verbs.SendWR{{WRID: 0xAD, Opcode: verbs.WRSend, SGList: ra.sge(0, 16), RemoteQPN: peer.Num(), RemoteQKey: 1}})
	check("UD send without an AH", err, verbs.ErrInvalidWR, "address handle", "0xad")
	if n != 0 {
		t.Errorf("UD send without an AH: %d posted", n)
	}
	_, err = ra.pd.CreateAH(&verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: verbs.GID{0xfe, 0x80, 15: 1}})
	check("AH to a GID that is not IPv4-mapped", err, verbs.ErrInvalidAttr, "GID")
	e2eNoMore(t, "A CQ", cqA)
}
