//go:build linux

package uring_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/uring"
	"github.com/goroce/goroce/wire"
)

// TestWaitArmedElsewhere: a Receive that waits for a
// datagram whose receive another OS thread armed, that thread then asleep,
// returns it when it arrives, not at its deadline: the kernel wakes the
// sleeping thread to complete the receive (task work), and the completion
// ends the wait. A Wake ends such a wait too. Under one
// processor as under two.
func TestWaitArmedElsewhere(t *testing.T) {
	eachPath(t, []int{1, 2}, waitArmedElsewhere)
}

// eachPath runs f on each receive path (paths) under each GOMAXPROCS of
// procs (0: as the test runs), a subtest each.
func eachPath(t *testing.T, procs []int, f func(*testing.T, listenFunc)) {
	for _, n := range procs {
		for _, p := range paths {
			name := p.name
			if n > 0 {
				name = fmt.Sprintf("%s/GOMAXPROCS=%d", p.name, n)
			}
			t.Run(name, func(t *testing.T) {
				if n > 0 {
					defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
				}
				f(t, p.listen)
			})
		}
	}
}

func waitArmedElsewhere(t *testing.T, listen listenFunc) {
	a, b := loopbackPair(t, listen, uring.Options{})
	armed, release := make(chan struct{}), make(chan struct{})
	go func() {
		runtime.LockOSThread() // this thread arms, then sleeps
		defer runtime.UnlockOSThread()
		if _, err := b.Receive(packetio.PollDeadline()); err != nil {
			t.Error(err)
		}
		close(armed)
		<-release
	}()
	<-armed
	defer close(release)
	type result struct {
		n   int
		err error
		at  time.Duration
	}
	got := make(chan result, 1)
	start := time.Now()
	go func() {
		n := 0
		var err error
		for n == 0 && err == nil && time.Since(start) < 5*time.Second {
			var pkts []packetio.Packet
			pkts, err = b.Receive(start.Add(5 * time.Second))
			n = len(pkts)
		}
		got <- result{n, err, time.Since(start)}
	}()
	time.Sleep(50 * time.Millisecond) // the receiver waits by now
	pkts := a.TxBatch(1)
	pkts[0].Buf = pkts[0].Buf[:wire.MinPacketLen]
	pkts[0].Addr = lo2
	if _, err := a.Transmit(pkts); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.n != 1 {
		t.Fatalf("Receive: %d packets, %v", r.n, r.err)
	}
	if r.at > 2*time.Second {
		t.Fatalf("the datagram came back after %v: the wait did not end when it arrived", r.at)
	}
	// A Wake ends a wait with nothing to read.
	start = time.Now()
	go func() {
		_, err := b.Receive(start.Add(5 * time.Second))
		got <- result{0, err, time.Since(start)}
	}()
	time.Sleep(50 * time.Millisecond)
	b.Wake()
	if r := <-got; r.err != nil || r.at > 2*time.Second {
		t.Fatalf("Wake ended the wait after %v (%v)", r.at, r.err)
	}
}

// TestWakeWhileYielding: under one processor, a Wake ends a Receive that
// waits without a deadline while the waking goroutine keeps the processor
// busy, yielding it (runtime.Gosched) between looks, as a caller polling a
// completion queue does: the Receive returns within a few yields. (Woken
// only through the ring's descriptor, it returned when the runtime next
// polled the network: with a goroutine always runnable, every 10 ms.)
func TestWakeWhileYielding(t *testing.T) {
	eachPath(t, []int{1}, func(t *testing.T, listen listenFunc) {
		_, b := loopbackPair(t, listen, uring.Options{})
		for range 20 {
			done := make(chan error, 1)
			go func() {
				pkts, err := b.Receive(time.Time{})
				if err == nil && len(pkts) > 0 {
					err = fmt.Errorf("%d packets from nowhere", len(pkts))
				}
				done <- err
			}()
			for range 100 { // let it park
				runtime.Gosched()
			}
			b.Wake()
			returned := false
			for i := 0; i < 10000 && !returned; i++ {
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
					returned = true
				default:
					runtime.Gosched()
				}
			}
			if !returned {
				t.Fatal("Receive still waiting 10000 yields after Wake")
			}
		}
	})
}
