package engine

import (
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestPostPollAllocs: posting, moving packets, and polling allocate nothing
// in steady state.
func TestPostPollAllocs(t *testing.T) {
	l := newLink(t)
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	connectRC(t, a, b, verbs.MTU1024)
	wr := []verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: a.sge(0, 4096), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}
	rwr := []verbs.RecvWR{{WRID: 2, SGList: b.sge(8192, 4096)}}
	swr := []verbs.SendWR{{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 2000)}}
	wc := make([]verbs.WC, 8)
	round := func() {
		if _, err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if _, err := b.qp.PostRecv(rwr); err != nil {
			t.Fatal(err)
		}
		if _, err := a.qp.PostSend(swr); err != nil {
			t.Fatal(err)
		}
		for l.step() {
		}
		n := a.scq.Poll(wc) + b.rcq.Poll(wc)
		if n != 3 {
			t.Fatalf("%d completions", n)
		}
	}
	round()
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%v allocations per post/transfer/poll round", allocs)
	}
}

// BenchmarkPostPoll measures posting and retiring unsignaled-then-signaled
// WRITEs through the engine, both ends in one goroutine: the in-process
// post+poll rate.
func BenchmarkPostPoll(b *testing.B) {
	l := newLink(b)
	x, y := newSide(b, l.a, verbs.QPTRC, 1<<16), newSide(b, l.b, verbs.QPTRC, 1<<16)
	connectRC(b, x, y, verbs.MTU4096)
	const batch = 32
	wrs := make([]verbs.SendWR, batch)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: x.sge(0, 64), RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
	}
	wrs[batch-1].Flags = verbs.SendSignaled
	wc := make([]verbs.WC, batch)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		if _, err := x.qp.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
		for l.step() {
		}
		if x.scq.Poll(wc) != 1 {
			b.Fatal("no completion")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "MWQE/s")
}
