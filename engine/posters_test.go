package engine

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// TestConcurrentPosters: goroutines post signaled 64-byte WRITEs to one RC
// QP at once, one WR a call, into a send queue of 256 they keep full
// (ErrQueueFull: post again), while the link runs. The send queue's lock is
// a bit of its tail's word: every WR must complete exactly once, each
// poster's in the order it posted them, and its data must land. Run it
// under -race too: the slots a poster fills and the engine reads are
// ordered by that word alone.
func TestConcurrentPosters(t *testing.T) {
	l, a, b := rcLink(t)
	const posters, each, size = 4, 500, 64
	for i := range a.buf {
		a.buf[i] = byte(i*7 + 3)
	}
	var wg sync.WaitGroup
	errs := make(chan error, posters)
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				off := uint64((p*each + i) % (len(a.buf) / size) * size)
				wr := []verbs.SendWR{{WRID: uint64(p)<<32 | uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGList:     []verbs.SGE{{Addr: a.mr.Addr() + off, Length: size, LKey: a.mr.LKey()}},
					RemoteAddr: b.mr.Addr() + off, RKey: b.mr.RKey()}}
				for {
					n, err := a.qp.PostSend(wr)
					if n == 1 {
						break
					}
					if !errors.Is(err, verbs.ErrQueueFull) {
						errs <- err
						return
					}
					runtime.Gosched()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	next := make([]uint64, posters)
	wc := make([]verbs.WC, 64)
	got := 0
	deadline := time.Now().Add(20 * time.Second)
	for got < posters*each {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d WRs completed after 20 s", got, posters*each)
		}
		l.step()
		k := a.scq.Poll(wc)
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("WR %#x: %v", w.WRID, w.Status)
			}
			p, i := w.WRID>>32, w.WRID&0xFFFFFFFF
			if p >= posters || i != next[p] {
				t.Fatalf("completion of WR %#x: poster %d expected its WR %d next", w.WRID, p, next[min(p, posters-1)])
			}
			next[p]++
			got++
		}
		select {
		case err := <-errs:
			t.Fatalf("post: %v", err)
		default:
		}
		if k == 0 {
			runtime.Gosched()
		}
	}
	<-done
	if k := a.scq.Poll(wc); k != 0 {
		t.Fatalf("%d completions more than the %d WRs posted", k, posters*each)
	}
	if p := a.qp.Posted(); p != posters*each {
		t.Fatalf("Posted() = %d, want %d", p, posters*each)
	}
	for i := range a.buf {
		if b.buf[i] != a.buf[i] {
			t.Fatalf("byte %d: %#x, want %#x", i, b.buf[i], a.buf[i])
		}
	}
}
