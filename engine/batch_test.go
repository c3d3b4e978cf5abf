package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// batchRun is what a workload left: every packet sent, in order, both
// engines' counters and every completion.
type batchRun struct {
	pkts   []captured
	sa, sb Stats
	wcs    []verbs.WC
}

// runBatchWorkload drives three RC QP pairs, each on a flow of its own
// (SourcePort 0: the QPs' flow ports), through WRITEs of mixed lengths
// (runs of equal ones, odd counts, multi-packet messages), SENDs and READs,
// with the link moving packets in batches or one at a time (single), and
// corrupting the packets corrupt picks. The regions are mem's six buffers,
// cleared first, so that two runs send the same addresses.
func runBatchWorkload(t *testing.T, mem [][]byte, single bool, corrupt func(n int) bool) batchRun {
	t.Helper()
	for _, m := range mem {
		clear(m)
	}
	a, err := New(Config{Local: netip.MustParseAddr("10.0.0.1")})
	must(t, err)
	b, err := New(Config{Local: netip.MustParseAddr("10.0.0.2")})
	must(t, err)
	l := newLink(t)
	l.a, l.b, l.single = a, b, single
	l.capture = []captured{}
	if corrupt != nil {
		l.mangle = func(n int, p []byte) {
			if corrupt(n) {
				p[len(p)/2] ^= 0x10 // payload or header, never the opcode
			}
		}
	}
	var xs, ys []*side
	for q := range 3 {
		x, y := newSideOn(t, a, mem[2*q]), newSideOn(t, b, mem[2*q+1])
		connectRC(t, x, y, verbs.MTU1024)
		xs, ys = append(xs, x), append(ys, y)
	}
	lens := []int{64, 64, 64, 64, 64, 64, 64, 100, 64, 64, 64, 7, 0, 300, 300, 300, 300, 300, 2500, 64, 64, 64, 64, 64, 33, 33, 33, 512, 513, 64}
	for round := range 5 {
		for q, x := range xs {
			y := ys[q]
			var wrs []verbs.SendWR
			for i, n := range lens[:len(lens)-q-round] { // odd and even counts
				wr := verbs.SendWR{WRID: uint64(round<<16 | q<<8 | i), Opcode: verbs.WRRDMAWrite, SGList: x.sge(i*16, n),
					RemoteAddr: y.mr.Addr() + uint64(i*64), RKey: y.mr.RKey()}
				switch {
				case i%11 == 5:
					wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRSend, 0, 0
					_, err := y.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: y.sge(8192, 4096)}})
					must(t, err)
				case i%13 == 7:
					wr.Opcode = verbs.WRRDMARead
				}
				if i%8 == 7 || i == len(lens)-q-round-1 {
					wr.Flags = verbs.SendSignaled
				}
				wrs = append(wrs, wr)
			}
			_, err := x.qp.PostSend(wrs)
			must(t, err)
		}
		// Both ends: the sender's completions once its messages are
		// acknowledged, the receiver's as SENDs land.
		l.run(t, func() bool {
			for _, x := range xs {
				if x.qp.InFlight() > 0 {
					return false
				}
				if w, _ := x.qp.Unsent(); w > 0 {
					return false
				}
			}
			return true
		})
	}
	r := batchRun{pkts: l.capture, sa: a.Stats(), sb: b.Stats()}
	var w [64]verbs.WC
	for _, s := range append(xs, ys...) {
		for _, cq := range []*CQ{s.scq, s.rcq} {
			for n := cq.Poll(w[:]); n > 0; n = cq.Poll(w[:]) {
				r.wcs = append(r.wcs, w[:n]...)
			}
		}
	}
	return r
}

// newSideOn is newSide for an RC QP with the region on buf.
func newSideOn(t *testing.T, e *Engine, buf []byte) *side {
	s := newSide(t, e, verbs.QPTRC, 1)
	must(t, s.mr.Deregister())
	var err error
	s.buf = buf
	s.mr, err = e.MRs.Register(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic, s.pd)
	must(t, err)
	return s
}

func compareRuns(t *testing.T, single, batch batchRun) {
	t.Helper()
	if len(single.pkts) != len(batch.pkts) {
		t.Fatalf("%d packets one at a time, %d in batches", len(single.pkts), len(batch.pkts))
	}
	for i := range single.pkts {
		s, b := single.pkts[i], batch.pkts[i]
		if !bytes.Equal(s.pkt, b.pkt) || s.src != b.src || s.dst != b.dst {
			t.Fatalf("packet %d differs:\n one at a time %x (%v to %v)\n in batches    %x (%v to %v)", i, s.pkt, s.src, s.dst, b.pkt, b.src, b.dst)
		}
	}
	if single.sa != batch.sa || single.sb != batch.sb {
		t.Fatalf("stats differ:\n one at a time %+v\n               %+v\n in batches    %+v\n               %+v", single.sa, single.sb, batch.sa, batch.sb)
	}
	if fmt.Sprint(single.wcs) != fmt.Sprint(batch.wcs) {
		t.Fatalf("completions differ:\n one at a time %v\n in batches    %v", single.wcs, batch.wcs)
	}
}

// TestBatchStepSame: moving packets in batches (BeginOutputBatch and
// EndOutputBatch around the outputs, DiffICRC4 over runs of four on
// input) sends the same bytes, counts the same and completes the same as
// moving them one at a time, over mixed flows, lengths and counts; and a
// packet corrupted inside a run of four is dropped for its ICRC alone.
func TestBatchStepSame(t *testing.T) {
	mem := make([][]byte, 6)
	for i := range mem {
		mem[i] = make([]byte, 1<<16)
	}
	single := runBatchWorkload(t, mem, true, nil)
	batch := runBatchWorkload(t, mem, false, nil)
	compareRuns(t, single, batch)
	if batch.sb.ICRCDrops != 0 || batch.sb.ICRCRecoveredChecks == 0 {
		t.Fatalf("receiver stats %+v", batch.sb)
	}
	corrupt := func(n int) bool { return n%37 == 6 }
	single = runBatchWorkload(t, mem, true, corrupt)
	batch = runBatchWorkload(t, mem, false, corrupt)
	compareRuns(t, single, batch)
	if d := batch.sa.ICRCDrops + batch.sb.ICRCDrops; d == 0 {
		t.Fatal("no corrupted packet dropped")
	}
}

// icrcInput is a received packet of the ICRC input tests: its bytes,
// source and what the packet path learnt of it.
type icrcInput struct {
	b    []byte
	from netip.Addr
	port uint16
	rx   RxInfo
}

var (
	icrcLocal = netip.MustParseAddr("10.0.0.2")
	icrcPeers = [2]netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.3")}
)

// icrcInputs builds SEND ONLY packets to QP 0x99 of an engine at icrcLocal.
type icrcInputs struct {
	ins []icrcInput
	ids wire.ICRCIDCache
	psn wire.PSN
}

// add appends a packet of n payload bytes from icrcPeers[peer] and port,
// its ICRC that of a datagram with Identification id and DF flag df, at
// place seg of a GRO train, its Identification seen by the packet path or
// not, and with a bit flipped after its ICRC was computed when bad.
func (s *icrcInputs) add(t testing.TB, peer int, port uint16, n int, id uint16, df bool, seg uint16, seen, bad bool) {
	fl := wire.Flow{Src: icrcPeers[peer], Dst: icrcLocal, SrcPort: port}
	pkt, err := wire.AppendTransport(nil, &wire.Header{Opcode: wire.RCSendOnly, DestQP: 0x99, PKey: wire.DefaultPKey, PSN: s.psn}, make([]byte, n))
	must(t, err)
	s.psn++
	must(t, fl.SetDatagramICRC(pkt))
	icrc := pkt[len(pkt)-wire.ICRCLen:]
	binary.LittleEndian.PutUint32(icrc, binary.LittleEndian.Uint32(icrc)^s.ids.Deltas(len(pkt)).Of(id, df))
	if bad {
		pkt[14] ^= 1
	}
	s.ins = append(s.ins, icrcInput{pkt, icrcPeers[peer], port, RxInfo{IPv4ID: id, IPv4DF: df, SeenIPv4: seen, GROSeg: seg}})
}

// inputAloneAndByFour inputs ins into two new engines, into one a packet
// at a time and into the other with DiffICRC4's answers for runs of four
// from one source, as the soft device does, and returns both engines'
// stats and how many packets DiffICRC4 took.
func inputAloneAndByFour(t testing.TB, ins []icrcInput) (alone, four Stats, took int) {
	newE := func() *Engine {
		e, err := New(Config{Local: icrcLocal})
		must(t, err)
		return e
	}
	one, by4 := newE(), newE()
	for i := range ins {
		one.InputPacket(1, ins[i].b, ins[i].from, ins[i].port, &ins[i].rx)
	}
	for i := 0; i < len(ins); {
		x := ins[i]
		if i+4 <= len(ins) && ins[i+1].from == x.from && ins[i+2].from == x.from && ins[i+3].from == x.from &&
			ins[i+1].port == x.port && ins[i+2].port == x.port && ins[i+3].port == x.port {
			var d [4]uint32
			known := by4.DiffICRC4(&[4][]byte{x.b, ins[i+1].b, ins[i+2].b, ins[i+3].b}, x.from, x.port, &d)
			for j := range 4 {
				rx := ins[i+j].rx
				rx.ICRCDiff, rx.ICRCDiffKnown = d[j], known
				if known {
					took++
				}
				by4.InputPacket(1, ins[i+j].b, ins[i+j].from, ins[i+j].port, &rx)
			}
			i += 4
			continue
		}
		by4.InputPacket(1, x.b, x.from, x.port, &x.rx)
		i++
	}
	return one.Stats(), by4.Stats(), took
}

// TestDiffICRC4Input: inputting packets with DiffICRC4's answers
// (RxInfo.ICRCDiff) counts and drops exactly as inputting them alone: GRO
// trains whose Identifications go up from 0 or from elsewhere, with DF or
// without, or stay 0, seen and unseen Identifications, corrupted packets
// inside runs of four, mixed sources, ports and lengths.
func TestDiffICRC4Input(t *testing.T) {
	var in icrcInputs
	for round := range 6 {
		// A GRO train of 7 going up from Identification 0, one of 6
		// staying at 0 (a sender that does not count), 5 alone with 0.
		for k := range uint16(7) {
			in.add(t, 0, 0xC000, 64, k, true, k, false, round == 2 && k == 2)
		}
		for k := range uint16(6) {
			in.add(t, 0, 0xC000, 64, 0, true, k, false, round == 3 && k == 1)
		}
		// Trains counting up from elsewhere (rdma_rxe's), across a wrap,
		// with DF and without; one claims an Identification off by one.
		for k := range uint16(8) {
			id := 0xFFFC + uint16(round)*0x1111 + k
			if round == 5 && k == 5 {
				id++
			}
			in.add(t, 1, 0xC003, 80, id, round%2 == 0, k, false, false)
		}
		for k := range 5 {
			in.add(t, 1, 0xC001, 100+round%2, 0, true, 0, false, round == 4 && k == 3)
		}
		// Seen Identifications: 0 (matched), and not, with DF and without.
		for k := range uint16(4) {
			in.add(t, 1, 0xC002, 48, k%2*9, k != 3, 0, true, round == 1 && k == 0)
		}
		// Mixed ports and lengths in one burst.
		for k := range 9 {
			in.add(t, k%2, 0xC000+uint16(k%3), 40+k%2*8, 0, true, 0, false, false)
		}
	}
	alone, s, took := inputAloneAndByFour(t, in.ins)
	if alone != s {
		t.Fatalf("stats differ:\n alone       %+v\n by DiffICRC4 %+v", alone, s)
	}
	// Each round's trains check their packets after the first, but one
	// corrupted or off by one, which is dropped while the train goes on:
	// the up train's 6 (round 2: 5), the fixed one's 5 (round 3: 4), the
	// other's 7 (round 5: 6).
	if want := uint64(6*6 - 1 + 6*5 - 1 + 6*7 - 1); s.ICRCTrainChecks != want {
		t.Errorf("%d packets checked as in a train, want %d", s.ICRCTrainChecks, want)
	}
	if s.ICRCDrops == 0 || s.ICRCTrainChecks == 0 || s.ICRCFullChecks == 0 {
		t.Fatalf("the cases were not all exercised: %+v", s)
	}
	if wire.FourLaneICRC() && took == 0 {
		t.Fatal("DiffICRC4 took nothing")
	}
}

// FuzzDiffICRC4Input: sequences of received packets the fuzzer describes,
// three bytes each (source and length; Identification; how it follows the
// packet before: in its GRO train or not, counting up or not, DF, seen,
// corrupted), count and drop exactly the same input alone and with
// DiffICRC4's answers, and nothing panics.
func FuzzDiffICRC4Input(f *testing.F) {
	f.Add([]byte{0x00, 0, 0x00, 0x00, 0, 0x03, 0x00, 0, 0x03, 0x00, 0, 0x03, 0x00, 0, 0x03})
	f.Add([]byte{0x0B, 0xFC, 0x20, 0x0B, 0, 0x23, 0x0B, 0, 0x23, 0x0B, 0, 0x23, 0x0B, 0, 0x63, 0x0B, 0, 0x23})
	f.Add([]byte{0x12, 9, 0x08, 0x12, 0, 0x0C, 0x12, 3, 0x10, 0x12, 0, 0x18})
	lens := [8]int{0, 36, 44, 64, 100, 480, 600, 1100}
	f.Fuzz(func(t *testing.T, data []byte) {
		var in icrcInputs
		var id uint16
		var seg uint16
		for len(data) >= 3 && len(in.ins) < 64 {
			src, idb, how := data[0], data[1], data[2]
			data = data[3:]
			peer, port, n := int(src&1), 0xC000+uint16(src>>1&3), lens[src>>3&7]
			follows, up, df, seen, bad := how&1 != 0, how&2 != 0, how&4 == 0, how&8 != 0, how&16 != 0
			if follows && len(in.ins) > 0 {
				seg++
				if up {
					id++
				}
				id ^= uint16(idb) << 8 // 0 keeps the train's rule
				prev := in.ins[len(in.ins)-1]
				peer, port, n = 0, prev.port, len(prev.b)-wire.BTHLen-wire.ICRCLen
				if prev.from == icrcPeers[1] {
					peer = 1
				}
			} else {
				seg, id = 0, uint16(idb)|uint16(how>>5)<<13
			}
			in.add(t, peer, port, n, id, df, seg, seen, bad)
		}
		alone, four, _ := inputAloneAndByFour(t, in.ins)
		if alone != four {
			t.Fatalf("stats differ:\n alone       %+v\n by DiffICRC4 %+v", alone, four)
		}
	})
}
