//go:build linux

package uring_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/uring"
)

// thread runs functions on one goroutine locked to its OS thread.
type thread struct{ fns chan func() }

func newThread(t *testing.T) *thread {
	th := &thread{fns: make(chan func())}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for f := range th.fns {
			f()
		}
	}()
	t.Cleanup(func() { close(th.fns) })
	return th
}

// do runs f on the thread and waits for it.
func (th *thread) do(f func()) {
	done := make(chan struct{})
	th.fns <- func() { f(); close(done) }
	<-done
}

// A single-issuer ring (SINGLE_ISSUER|DEFER_TASKRUN) driven from one locked
// thread per Conn: batches both ways, a deadline, Wake from another
// goroutine, and a clear error when another thread uses it.
func TestSingleIssuer(t *testing.T) {
	a, b := loopbackPair(t, uring.Listen, uring.Options{SingleIssuer: true, GSO: uring.OffloadOff})
	if !a.Features().DeferTaskrun {
		t.Skipf("kernel without IORING_SETUP_DEFER_TASKRUN (Linux 6.1); features %v", a.Features())
	}
	t.Logf("features %v", a.Features())
	ta, tb := newThread(t), newThread(t)
	var got []packetiotest.Received
	for round := range 5 {
		ta.do(func() { packetiotest.Send(t, a, b, round*32, 32, 1000) })
		tb.do(func() { got = packetiotest.Recv(t, b, 32, 5*time.Second) })
		packetiotest.Check(t, got, a, b, round*32, 1000)
		tb.do(func() { packetiotest.Send(t, b, a, round*32, 32, 64) })
		ta.do(func() { got = packetiotest.Recv(t, a, 32, 5*time.Second) })
		packetiotest.Check(t, got, b, a, round*32, 64)
	}

	// A deadline on an idle Conn.
	var err error
	var n int
	deadline := time.Now().Add(30 * time.Millisecond)
	tb.do(func() {
		pkts, e := b.Receive(deadline)
		n, err = len(pkts), e
	})
	if err != nil || n != 0 || time.Now().Before(deadline) {
		t.Fatalf("Receive to a deadline = %d, %v (early: %v)", n, err, time.Now().Before(deadline))
	}

	// Wake from this goroutine ends a Receive blocked on b's thread.
	done := make(chan error, 1)
	go tb.do(func() {
		_, e := b.Receive(time.Time{})
		done <- e
	})
	time.Sleep(20 * time.Millisecond)
	b.Wake()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not end the Receive")
	}

	// Another thread is refused with ErrWrongThread.
	other := newThread(t)
	other.do(func() { _, err = b.Receive(time.Now().Add(10 * time.Millisecond)) })
	if !errors.Is(err, uring.ErrWrongThread) {
		t.Fatalf("Receive from another thread = %v, want ErrWrongThread", err)
	}
	t.Logf("from another thread: %v", err)

	// Still working on its own thread.
	ta.do(func() { packetiotest.Send(t, a, b, 0, 8, 64) })
	tb.do(func() { got = packetiotest.Recv(t, b, 8, 5*time.Second) })
	packetiotest.Check(t, got, a, b, 0, 64)
}

// One locked thread may be the single issuer of both rings of a pair; the
// steady state of TxBatch, Transmit and Receive on single-issuer rings
// makes no allocation either.
func TestSingleIssuerNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	a, b := loopbackPair(t, uring.Listen, uring.Options{SingleIssuer: true, GSO: uring.OffloadOff})
	if !a.Features().DeferTaskrun {
		t.Skipf("kernel without IORING_SETUP_DEFER_TASKRUN; features %v", a.Features())
	}
	th := newThread(t)
	var fill [128]byte
	var fail string
	roundTrip := func() {
		batch := a.TxBatch(16)
		for i := range batch {
			batch[i].Buf = append(batch[i].Buf[:0], fill[:]...)
			batch[i].Addr = b.LocalAddr()
		}
		if n, err := a.Transmit(batch); n != 16 || err != nil {
			fail = "transmit failed"
			return
		}
		for got := 0; got < 16; {
			pkts, err := b.Receive(time.Now().Add(5 * time.Second))
			if err != nil || len(pkts) == 0 {
				fail = "receive failed"
				return
			}
			got += len(pkts)
		}
	}
	var allocs float64
	th.do(func() {
		roundTrip()
		allocs = testing.AllocsPerRun(100, roundTrip)
	})
	if fail != "" {
		t.Fatal(fail)
	}
	if allocs != 0 {
		t.Errorf("TxBatch+Transmit+Receive of 16 packets on single-issuer rings: %v allocations, want 0", allocs)
	}
}
