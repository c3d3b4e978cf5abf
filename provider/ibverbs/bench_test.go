//go:build linux && cgo && ibverbs

package ibverbs_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/goroce/goroce/provider/ibverbs"
	"github.com/goroce/goroce/verbs"
)

// The benchmarks measure what a cgo provider costs per work request: ns/op
// is per work request (or per poll call), so batch 1 and batch 32 compare
// directly. BenchmarkCgoNoop, one empty cgo call, is the baseline to quote
// them against, measured in the same run.

func BenchmarkCgoNoop(b *testing.B) {
	for b.Loop() {
		ibverbs.CgoNoop()
	}
}

// BenchmarkPostRecv: posting receives (no traffic; the queue is emptied by
// an ERROR/RESET cycle outside the timer every 256 WRs).
func BenchmarkPostRecv(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			l := newLoop(b, batch)
			rwrs := make([]verbs.RecvWR, batch)
			for i := range rwrs {
				rwrs[i] = verbs.RecvWR{WRID: uint64(i), SGList: l.sge}
			}
			b.ReportAllocs()
			posted := 0
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				if posted+batch > 256 {
					b.StopTimer()
					l.recycle(posted)
					posted = 0
					b.StartTimer()
				}
				if _, err := l.qb.PostRecv(rwrs); err != nil {
					b.Fatal(err)
				}
				posted += batch
			}
			b.StopTimer()
			l.recycle(posted)
		})
	}
}

// BenchmarkPostSend: posting RDMA WRITEs of 8 bytes, 1 or 32 per call; the
// completions are reaped with the timer stopped, so only the post is timed
// (for rdma_rxe that includes its doorbell system call, one per call).
func BenchmarkPostSend(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			l := newLoop(b, batch)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				if _, err := l.qa.PostSend(l.wrs); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				l.reap(batch)
				b.StartTimer()
			}
		})
	}
}

// BenchmarkPollFlushed: polling completions (the WR_FLUSH_ERR completions of
// 256 receives flushed by moving the QP to ERROR outside the timer), in
// polls of 1 or 32. Polls that find nothing count too (empty/op).
func BenchmarkPollFlushed(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			l := newLoop(b, 1)
			rwrs := make([]verbs.RecvWR, 256)
			for i := range rwrs {
				rwrs[i] = verbs.RecvWR{WRID: uint64(i), SGList: l.sge}
			}
			wc := make([]verbs.WC, batch)
			b.ReportAllocs()
			empty := 0
			b.ResetTimer()
			for i := 0; i < b.N; {
				b.StopTimer()
				if _, err := l.qb.PostRecv(rwrs); err != nil {
					b.Fatal(err)
				}
				l.toErr()
				time.Sleep(2 * time.Millisecond) // the kernel flushes
				b.StartTimer()
				deadline := time.Now().Add(10 * time.Second)
				for got := 0; got < len(rwrs); {
					k := l.cq.Poll(wc)
					if k == 0 {
						empty++
						if time.Now().After(deadline) {
							b.Fatalf("%d of %d flushed completions", got, len(rwrs))
						}
					}
					got += k
					i += k
				}
				b.StopTimer()
				l.toRTR()
				b.StartTimer()
			}
			b.ReportMetric(float64(empty)/float64(b.N), "empty/op")
		})
	}
}

// BenchmarkPollEmpty: one poll of an empty CQ (asking for 32).
func BenchmarkPollEmpty(b *testing.B) {
	l := newLoop(b, 1)
	wc := make([]verbs.WC, 32)
	b.ReportAllocs()
	for b.Loop() {
		if l.cq.Poll(wc) != 0 {
			b.Fatal("a completion in an idle CQ")
		}
	}
}

// BenchmarkWrite: RDMA WRITEs of 8 bytes to a QP of the same device, posted
// in batches of 1 or 32 and reaped, per WR: what the device does dominates.
func BenchmarkWrite(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			l := newLoop(b, batch)
			b.ReportAllocs()
			for i := 0; i < b.N; i += batch {
				if _, err := l.qa.PostSend(l.wrs); err != nil {
					b.Fatal(err)
				}
				l.reap(batch)
			}
		})
	}
}

// BenchmarkInterleaved measures, in each of b.N rounds, 256 empty cgo calls,
// 256 receives posted 1 and 32 per call, and 256 completions polled 1 and
// 32 per call, one after the other, so that every figure of a round meets
// the same load; it reports the medians over the rounds of each figure in
// ns per call or per WR, and of its ratio to the round's empty cgo call
// (x-noop) or to its batched counterpart (x-batch32). Run it with a round
// count: -bench Interleaved -benchtime 20x. (Its allocations are those of
// the QP state changes between the figures, outside the timed parts.)
func BenchmarkInterleaved(b *testing.B) {
	const n = 256
	l := newLoop(b, 1)
	rwrs := make([]verbs.RecvWR, n)
	for i := range rwrs {
		rwrs[i] = verbs.RecvWR{WRID: uint64(i), SGList: l.sge}
	}
	wc := make([]verbs.WC, 32)
	names := []string{"noop", "post1", "post32", "poll1", "poll32"}
	fig := make([][]float64, len(names))
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		for range n {
			ibverbs.CgoNoop()
		}
		fig[0] = append(fig[0], float64(time.Since(t0).Nanoseconds())/n)
		for k, batch := range []int{1, 32} {
			t0 = time.Now()
			for i := 0; i < n; i += batch {
				if _, err := l.qb.PostRecv(rwrs[i : i+batch]); err != nil {
					b.Fatal(err)
				}
			}
			fig[1+k] = append(fig[1+k], float64(time.Since(t0).Nanoseconds())/n)
			l.recycle(n)
		}
		for k, batch := range []int{1, 32} {
			if _, err := l.qb.PostRecv(rwrs); err != nil {
				b.Fatal(err)
			}
			l.toErr()
			time.Sleep(2 * time.Millisecond) // the kernel flushes
			deadline := time.Now().Add(10 * time.Second)
			t0 = time.Now()
			for got := 0; got < n; {
				m := l.cq.Poll(wc[:batch])
				if m == 0 && time.Now().After(deadline) {
					b.Fatalf("%d of %d flushed completions", got, n)
				}
				got += m
			}
			fig[3+k] = append(fig[3+k], float64(time.Since(t0).Nanoseconds())/n)
			l.toRTR()
		}
	}
	med := func(xs []float64) float64 {
		s := append([]float64(nil), xs...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	ratio := func(a, c []float64) float64 {
		r := make([]float64, len(a))
		for i := range a {
			r[i] = a[i] / c[i]
		}
		return med(r)
	}
	for i, name := range names {
		b.ReportMetric(med(fig[i]), name+"-ns")
		if i > 0 {
			b.ReportMetric(ratio(fig[i], fig[0]), name+"-x-noop")
		}
	}
	b.ReportMetric(ratio(fig[1], fig[2]), "post1-x-batch32")
	b.ReportMetric(ratio(fig[3], fig[4]), "poll1-x-batch32")
}
