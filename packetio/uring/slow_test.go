//go:build linux

package uring_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/uring"
)

// TestSlowReceiver: io_uring must never drop what a socket would have
// queued. A receiver whose multishot receive is armed stops calling Receive
// while 1,200 datagrams arrive (they fit in the socket's receive buffer, so
// a plain socket would queue them all); then it drains slowly, holding each
// batch's buffers for a millisecond, while bursts keep coming. Every
// datagram must arrive, once and in order, on each receive mode.
func TestSlowReceiver(t *testing.T) {
	const stalled, bursts, burst, size = 1200, 10, 300, 512
	total := stalled + bursts*burst
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			a, b := loopbackPair(t, p.listen, uring.Options{RxBuffers: 128, Batch: 32, GSO: uring.OffloadOff})
			dst := b.LocalAddrPort()
			seq := uint32(0)
			send := func(n int) {
				t.Helper()
				for n > 0 {
					batch := a.TxBatch(min(n, 32))
					for i := range batch {
						buf := batch[i].Buf[:size]
						binary.BigEndian.PutUint32(buf, seq)
						seq++
						batch[i].Buf, batch[i].Addr, batch[i].Port = buf, dst.Addr(), dst.Port()
					}
					if k, err := a.Transmit(batch); err != nil || k != len(batch) {
						t.Fatalf("Transmit: %d of %d: %v", k, len(batch), err)
					}
					n -= len(batch)
				}
			}
			next := uint32(0)
			receive := func(until uint32, hold time.Duration, deadline time.Time) error {
				for next < until {
					if time.Now().After(deadline) {
						return fmt.Errorf("received %d of %d datagrams", next, until)
					}
					pkts, err := b.Receive(time.Now().Add(50 * time.Millisecond))
					if err != nil {
						return err
					}
					for _, pk := range pkts {
						if got := binary.BigEndian.Uint32(pk.Buf); got != next {
							return fmt.Errorf("datagram %d arrived where %d was due (lost or reordered)", got, next)
						}
						next++
					}
					time.Sleep(hold) // the batch's buffers stay lent meanwhile
				}
				return nil
			}
			// Arm the receive, then stall while the first datagrams arrive.
			if _, err := b.Receive(time.Unix(1, 0)); err != nil {
				t.Fatal(err)
			}
			send(stalled)
			time.Sleep(50 * time.Millisecond)
			done := make(chan error, 1)
			go func() { done <- receive(uint32(total), time.Millisecond, time.Now().Add(30*time.Second)) }()
			for range bursts {
				send(burst)
				time.Sleep(50 * time.Millisecond)
			}
			if err := <-done; err != nil {
				t.Fatalf("%v; receiver stats %+v", err, b.Stats())
			}
			if st := b.Stats(); st.RxDrops != 0 || st.PacketsIn != uint64(total) {
				t.Errorf("receiver stats %+v: want %d in and no drops", st, total)
			}
		})
	}
}
