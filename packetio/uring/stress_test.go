//go:build linux

package uring_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/uring"
)

// Everything at once, on each receive path: a stream of numbered packets
// in batches of random sizes, a receiver with few buffers (the multishot
// receive runs dry and is armed again) and random deadlines, Wake storms
// from another goroutine, and the receiver echoing every 16th packet (its
// Transmit reaps receive completions and sets them aside). Every packet
// must arrive once and in order (loopback keeps order), every echo must
// come back, and the counters must agree.
//
// Under one processor too (GOMAXPROCS=1, as goroce bench runs each side),
// where all three goroutines share a thread: with Receive waiting in Go's
// netpoller, the single-shot path failed here with an echo after the next
// one, when its RECVMSGs were outstanding side by side rather than as one
// chain (armChain): one handed to an io-wq worker completed out of order.
func TestStress(t *testing.T) { eachPath(t, []int{0, 1}, stress) }

func stress(t *testing.T, listen listenFunc) {
	const total = 20000
	a, b := loopbackPair(t, listen, uring.Options{RxBuffers: 64, Batch: 32, GSO: uring.OffloadOff})
	var received atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // Wake storm
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b.Wake()
			a.Wake()
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		}
	}()
	recvErr := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(1, 2))
		next := uint32(0)
		end := time.Now().Add(20 * time.Second)
		for next < total {
			if time.Now().After(end) {
				recvErr <- errors.New("receiver: out of time")
				return
			}
			var deadline time.Time
			switch rng.IntN(3) {
			case 0:
				deadline = time.Now().Add(time.Duration(rng.IntN(2000)) * time.Microsecond)
			case 1:
				deadline = time.Unix(1, 0) // poll
			}
			pkts, err := b.Receive(deadline)
			if err != nil {
				recvErr <- err
				return
			}
			var echo []uint32
			for _, pk := range pkts {
				if len(pk.Buf) < 4 {
					recvErr <- errors.New("short packet")
					return
				}
				seq := binary.BigEndian.Uint32(pk.Buf)
				if seq != next {
					recvErr <- errors.New("out of order or lost: got " + itoa(seq) + " want " + itoa(next))
					return
				}
				if seq%16 == 0 {
					echo = append(echo, seq)
				}
				next++
			}
			received.Store(int64(next))
			if len(echo) > 0 {
				batch := b.TxBatch(len(echo))
				for i := range batch {
					batch[i].Buf = binary.BigEndian.AppendUint32(batch[i].Buf[:0], echo[i])
					batch[i].Addr = a.LocalAddr()
				}
				if n, err := b.Transmit(batch); err != nil || n != len(batch) {
					recvErr <- errors.New("echo transmit failed")
					return
				}
			}
		}
		recvErr <- nil
	}()

	rng := rand.New(rand.NewPCG(3, 4))
	echoes := 0
	drain := func(deadline time.Time) {
		pkts, err := a.Receive(deadline)
		if err != nil {
			t.Fatal(err)
		}
		for _, pk := range pkts {
			if want := uint32(echoes * 16); binary.BigEndian.Uint32(pk.Buf) != want {
				t.Fatalf("echo %d carries %d, want %d", echoes, binary.BigEndian.Uint32(pk.Buf), want)
			}
			echoes++
		}
	}
	end := time.Now().Add(20 * time.Second)
	for sent := 0; sent < total; {
		for int64(sent)-received.Load() > 48 { // under the receiver's 64 buffers
			if time.Now().After(end) {
				t.Fatalf("sender: receiver stuck at %d of %d sent", received.Load(), sent)
			}
			drain(time.Unix(1, 0))
			runtime.Gosched()
		}
		batch := a.TxBatch(min(1+rng.IntN(32), total-sent))
		for i := range batch {
			batch[i].Buf = binary.BigEndian.AppendUint32(batch[i].Buf[:0], uint32(sent+i))
			batch[i].Buf = append(batch[i].Buf, make([]byte, rng.IntN(1000))...)
			batch[i].Addr = b.LocalAddr()
		}
		n, err := a.Transmit(batch)
		if err != nil || n != len(batch) {
			t.Fatalf("Transmit = %d, %v", n, err)
		}
		sent += n
	}
	if err := <-recvErr; err != nil {
		t.Fatal(err)
	}
	for echoes < total/16 && time.Now().Before(end) {
		drain(time.Now().Add(10 * time.Millisecond))
	}
	close(stop)
	wg.Wait()
	if echoes != total/16 {
		t.Fatalf("%d echoes, want %d", echoes, total/16)
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.PacketsOut != total || sb.PacketsIn != total || sb.PacketsOut != total/16 || sa.PacketsIn != total/16 ||
		sa.BytesOut != sb.BytesIn || sa.TxErrors+sb.TxErrors+sa.RxDrops+sb.RxDrops != 0 {
		t.Errorf("stats a %+v b %+v", sa, sb)
	}
	t.Logf("b: %d receives with packets, %d wakes consumed", sb.RxBatches, sb.Wakes)

	// Close while a Receive waits, from another goroutine (after
	// consuming a Wake the storm may have left pending).
	if _, err := b.Receive(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.Receive(time.Time{})
		done <- err
	}()
	time.Sleep(5 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, packetio.ErrClosed) {
		t.Fatalf("Receive during Close = %v", err)
	}
}

func itoa(v uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
