package soft

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/fault"
	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/verbs"
)

var soakOps = flag.Int("soak.ops", 100000, "operations in TestSoakFaults (a longer soak: raise it)")

// TestSoakFaults runs mixed RC operations (SEND, WRITE, READ, CAS, FAA) on 16
// QP pairs over a packet path that drops 5 % of packets, duplicates 1 %,
// reorders 2 % and corrupts 0.1 %, both ways. Every operation must complete
// exactly once, successfully, in post order per QP; every byte is checked;
// the atomics must end where sequential execution puts them.
func TestSoakFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("soak skipped in -short mode")
	}
	fo := fault.Options{Drop: 0.05, Duplicate: 0.01, Reorder: 0.02, Corrupt: 0.001}
	pa, pb := pipe.New(netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"), pipe.Options{Queue: 8192})
	fo.Seed = 1
	fa := fault.New(pa, fo)
	fo.Seed = 2
	fb := fault.New(pb, fo)
	da, err := New(Options{Name: "a", Conn: fa})
	must(t, err)
	db, err := New(Options{Name: "b", Conn: fb})
	must(t, err)
	defer db.Close()
	defer da.Close()
	goroutines := runtime.NumGoroutine()
	start := time.Now()
	completed := soak(t, da, db, *soakOps, 110*time.Second)
	t.Logf("%d operations on %d QPs in %v; a: %+v; faults a->b %+v", completed, soakQPs, time.Since(start).Round(time.Millisecond), da.Stats(), fa.FaultStats())
	t.Logf("b: %+v; faults b->a %+v", db.Stats(), fb.FaultStats())
	da.Close()
	db.Close()
	time.Sleep(10 * time.Millisecond)
	if g := runtime.NumGoroutine(); g > goroutines {
		t.Errorf("%d goroutines after, %d before", g, goroutines)
	}
}

// soakQPs is the number of QP pairs soak runs.
const soakQPs = 16

// soak runs ops mixed RC operations (SEND, WRITE, READ, CAS, FAA) on
// soakQPs QP pairs from device da to db, at most 8 outstanding per QP, and
// checks that every operation completes exactly once, successfully, in post
// order per QP, with every byte and every atomic result right, that the
// atomics' words end where sequential execution puts them, and that no
// completion comes late. It fails the test when the operations take longer
// than limit, and returns how many completed.
func soak(t *testing.T, da, db *Device, ops int, limit time.Duration) int {
	t.Helper()
	const nqp, window, area, slots = soakQPs, 8, 512 << 10, 16
	type qpState struct {
		a, b       *end
		posted     uint64 // WRIDs 1..posted posted on a
		done       uint64 // completed in order
		recvPosted uint64
		recvDone   uint64
		ops        []op
		faa, cas   uint64 // expected remote values
	}
	qps := make([]*qpState, nqp)
	ca, _ := da.Open()
	cb, _ := db.Open()
	pdA, _ := ca.AllocPD()
	pdB, _ := cb.AllocPD()
	bufA, bufB := make([]byte, nqp*area), make([]byte, nqp*area)
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	mrA, err := pdA.RegMR(bufA, all)
	must(t, err)
	mrB, err := pdB.RegMR(bufB, all)
	must(t, err)
	for i := range qps {
		mk := func(d *Device, ctx verbs.Context, pd verbs.PD, mr verbs.MR, buf []byte) *end {
			cq, err := ctx.CreateCQ(256, nil)
			must(t, err)
			qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
				Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
			must(t, err)
			return &end{dev: d, ctx: ctx, pd: pd, cq: cq, qp: qp, mr: mr, buf: buf}
		}
		s := &qpState{a: mk(da, ca, pdA, mrA, bufA), b: mk(db, cb, pdB, mrB, bufB)}
		connectTimeout(t, s.a, s.b, 14) // 67 ms ACK timeout (race-detector builds run 5-10x slower)
		qps[i] = s
	}
	r := rand.New(rand.NewPCG(7, 7))
	base := func(e *end, i int) uint64 { return e.mr.Addr() + uint64(i*area) }
	// Per QP area, in 8 KiB slots chosen by WRID (a slot is reused only once
	// the op that used it completed): on a, sources at [0,128K) and READ
	// targets at [128K,256K); on b, SEND and WRITE targets at [0,128K), the
	// FAA word at 256K and the CAS word at 256K+8; atomic results on a at
	// 256K + 8*slot.
	slot := func(w uint64) int { return int(w%slots) * 8192 }
	start := time.Now()
	wc := make([]verbs.WC, 32)
	total, completed := ops, 0
	issued := 0
	deadline := time.Now().Add(limit)
	for completed < total {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %d of %d operations completed", time.Since(start), completed, total)
		}
		progress := false
		for i, s := range qps {
			// Post while the window has room.
			for issued < total && s.posted-s.done < window {
				o := op{kind: opKind(r.IntN(5)), size: 1 + r.IntN(8192), seed: byte(r.Uint32())}
				wrid := s.posted + 1
				src := bufA[i*area+slot(wrid) : i*area+slot(wrid)+o.size]
				for j := range src {
					src[j] = byte(j) ^ o.seed ^ byte(wrid)
				}
				wr := verbs.SendWR{WRID: wrid, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{{Addr: base(s.a, i) + uint64(slot(wrid)), Length: uint32(o.size), LKey: mrA.LKey()}}, RKey: mrB.RKey()}
				switch o.kind {
				case opSend:
					wr.Opcode = verbs.WRSend
					_, err := s.b.qp.PostRecv([]verbs.RecvWR{{WRID: wrid, SGList: []verbs.SGE{{Addr: base(s.b, i) + uint64(slot(wrid)), Length: 8192, LKey: mrB.LKey()}}}})
					must(t, err)
					s.recvPosted++
				case opWrite, opRead:
					// A WRITE then a READ of the same bytes back.
					wr.Opcode, wr.RemoteAddr = verbs.WRRDMAWrite, base(s.b, i)+uint64(slot(wrid))
					o.kind = opWrite
				case opFAA:
					add := uint64(r.Uint32())
					wr.Opcode, wr.RemoteAddr, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, base(s.b, i)+256<<10, add
					wr.SGList[0] = verbs.SGE{Addr: base(s.a, i) + 256<<10 + uint64(wrid%slots)*8, Length: 8, LKey: mrA.LKey()}
					o.want, s.faa = s.faa, s.faa+add
				case opCAS:
					next := r.Uint64()
					wr.Opcode, wr.RemoteAddr, wr.CompareAdd, wr.Swap = verbs.WRAtomicCmpAndSwp, base(s.b, i)+256<<10+8, s.cas, next
					wr.SGList[0] = verbs.SGE{Addr: base(s.a, i) + 256<<10 + uint64(wrid%slots)*8, Length: 8, LKey: mrA.LKey()}
					o.want, s.cas = s.cas, next
				}
				if _, err := s.a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
					t.Fatal(err)
				}
				s.ops = append(s.ops, o)
				s.posted++
				issued++
				if o.kind == opWrite { // and the READ back
					rd := verbs.SendWR{WRID: s.posted + 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
						SGList: []verbs.SGE{{Addr: base(s.a, i) + 128<<10 + uint64(slot(s.posted+1)), Length: uint32(o.size), LKey: mrA.LKey()}}, RemoteAddr: base(s.b, i) + uint64(slot(wrid)), RKey: mrB.RKey()}
					if _, err := s.a.qp.PostSend([]verbs.SendWR{rd}); err != nil {
						t.Fatal(err)
					}
					s.ops = append(s.ops, op{kind: opRead, size: o.size, seed: o.seed, writeID: wrid})
					s.posted++
					issued++
				}
				break // one post per QP per round: no WR is in flight when its buffers are reused
			}
			// Completions of a, in order.
			n := s.a.cq.Poll(wc)
			for _, w := range wc[:n] {
				progress = true
				if w.Status != verbs.WCSuccess || w.WRID != s.done+1 {
					t.Fatalf("QP %d: completion %+v, want WRID %d SUCCESS (%v)", i, w, s.done+1, da.Stats())
				}
				o := s.ops[s.done]
				s.done++
				completed++
				switch o.kind {
				case opRead:
					off := i*area + 128<<10 + slot(w.WRID)
					got := bufA[off : off+o.size]
					for j := range got {
						if got[j] != byte(j)^o.seed^byte(o.writeID) {
							t.Fatalf("QP %d WRID %d: READ back byte %d = %#x", i, w.WRID, j, got[j])
						}
					}
				case opFAA, opCAS:
					res := binary.NativeEndian.Uint64(bufA[i*area+256<<10+int(w.WRID%slots)*8:])
					if res != o.want {
						t.Fatalf("QP %d WRID %d %v: fetched %d, want %d", i, w.WRID, o.kind, res, o.want)
					}
				}
			}
			// Receive completions on b, in order.
			n = s.b.cq.Poll(wc)
			for _, w := range wc[:n] {
				progress = true
				if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRecv {
					t.Fatalf("QP %d: receive completion %+v", i, w)
				}
				o := s.ops[w.WRID-1]
				if o.kind != opSend || w.ByteLen != uint32(o.size) || w.WRID <= s.recvDone {
					t.Fatalf("QP %d: receive %+v for op %+v (after %d)", i, w, o, s.recvDone)
				}
				s.recvDone = w.WRID
				got := bufB[i*area+slot(w.WRID) : i*area+slot(w.WRID)+o.size]
				for j := range got {
					if got[j] != byte(j)^o.seed^byte(w.WRID) {
						t.Fatalf("QP %d WRID %d: SEND byte %d = %#x", i, w.WRID, j, got[j])
					}
				}
			}
		}
		if !progress {
			runtime.Gosched()
		}
	}
	for i, s := range qps {
		faa := binary.NativeEndian.Uint64(bufB[i*area+256<<10:])
		cas := binary.NativeEndian.Uint64(bufB[i*area+256<<10+8:])
		if faa != s.faa || cas != s.cas {
			t.Errorf("QP %d: remote words %d/%d, want %d/%d", i, faa, cas, s.faa, s.cas)
		}
	}
	// Nothing may complete twice: no late completions.
	time.Sleep(20 * time.Millisecond)
	for i, s := range qps {
		if n := s.a.cq.Poll(wc) + s.b.cq.Poll(wc); n != 0 {
			t.Errorf("QP %d: %d extra completions: %+v", i, n, wc[:n])
		}
	}
	// Give everything back, so that nothing of the run stays reachable.
	for _, s := range qps {
		for _, e := range []*end{s.a, s.b} {
			must(t, e.qp.Destroy())
			must(t, e.cq.Destroy())
		}
	}
	must(t, mrA.Dereg())
	must(t, mrB.Dereg())
	return completed
}

type opKind int

const (
	opSend opKind = iota
	opWrite
	opRead
	opFAA
	opCAS
)

func (k opKind) String() string { return [...]string{"SEND", "WRITE", "READ", "FAA", "CAS"}[k] }

type op struct {
	kind    opKind
	size    int
	seed    byte
	writeID uint64
	want    uint64
}

var _ = bytes.Equal
var _ = fmt.Sprint

func connectTimeout(t testing.TB, a, b *end, timeout uint8) {
	for _, p := range [2][2]*end{{a, b}, {b, a}} {
		x, y := p[0], p[1]
		must(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		must(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: y.qp.Num(), RQPSN: 0xFFFF00,
			MaxDestRdAtomic: 16, MinRNRTimer: 1, AHAttr: verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: y.dev.GID()}},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
		must(t, x.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0xFFFF00, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	}
}
