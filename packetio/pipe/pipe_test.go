package pipe_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/pipe"
)

var (
	addrA = netip.MustParseAddr("192.0.2.1")
	addrB = netip.MustParseAddr("192.0.2.2")
)

func TestConformance(t *testing.T) {
	packetiotest.Run(t, func(t *testing.T) (packetio.Conn, packetio.Conn) {
		a, b := pipe.New(addrA, addrB, pipe.Options{})
		return a, b
	})
}

func TestMetadata(t *testing.T) {
	a, b := pipe.New(addrA, addrB, pipe.Options{})
	defer a.Close()
	defer b.Close()
	if !packetio.PerPacketSourcePort(a) {
		t.Error("a pipe end does not say it sends from each packet's source port")
	}
	// Port 0 arrives as 4791 (the UDP path's own port), another as itself.
	for _, c := range []struct{ send, want uint16 }{{0, 4791}, {0xC123, 0xC123}} {
		batch := a.TxBatch(1)
		batch[0].Buf = append(batch[0].Buf[:0], "hello"...)
		batch[0].Addr = addrB
		batch[0].Port = c.send
		if _, err := a.Transmit(batch); err != nil {
			t.Fatal(err)
		}
		// The sender may reuse its buffer at once.
		copy(batch[0].Buf, "XXXXX")
		pkts, err := b.Receive(time.Now().Add(time.Second))
		if err != nil || len(pkts) != 1 {
			t.Fatalf("Receive = %d, %v", len(pkts), err)
		}
		want := packetio.Packet{Buf: []byte("hello"), Addr: addrA, Port: c.want, Local: addrB}
		if p := pkts[0]; !bytes.Equal(p.Buf, want.Buf) || p.Addr != want.Addr || p.Port != want.Port || p.Local != want.Local || p.TOS != 0 {
			t.Fatalf("sent from port %d: got %+v, want %+v", c.send, p, want)
		}
	}
}

func TestDropOnFull(t *testing.T) {
	tests := []struct {
		name              string
		queue, batch      int
		send              int // packets sent before receiving
		wantRx, wantDrops int
	}{
		{"fits", 8, 4, 8, 8, 0},
		{"overflow", 8, 4, 20, 8, 12},
		{"default queue", 0, 32, 1100, 1024, 76},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := pipe.New(addrA, addrB, pipe.Options{Queue: tt.queue, Batch: tt.batch})
			defer a.Close()
			defer b.Close()
			for sent := 0; sent < tt.send; {
				n := min(tt.batch, tt.send-sent)
				packetiotest.Send(t, a, b, sent, n, 32)
				sent += n
			}
			got := packetiotest.Recv(t, b, tt.wantRx, 5*time.Second)
			packetiotest.Check(t, got, a, b, 0, 32) // the first ones are kept
			if pkts, _ := b.Receive(time.Now().Add(10 * time.Millisecond)); len(pkts) != 0 {
				t.Fatalf("%d more packets than the queue holds", len(pkts))
			}
			if s := b.Stats(); s.RxDrops != uint64(tt.wantDrops) || s.PacketsIn != uint64(tt.wantRx) {
				t.Errorf("receiver stats %+v, want %d drops and %d in", s, tt.wantDrops, tt.wantRx)
			}
			if s := a.Stats(); s.PacketsOut != uint64(tt.send) || s.TxErrors != 0 {
				t.Errorf("sender stats %+v, want %d out, no errors", s, tt.send)
			}
		})
	}
}

// The packets returned by the last Receive count against the queue until
// the next Receive.
func TestHeldPacketsCountAgainstQueue(t *testing.T) {
	a, b := pipe.New(addrA, addrB, pipe.Options{Queue: 4, Batch: 4})
	defer a.Close()
	defer b.Close()
	packetiotest.Send(t, a, b, 0, 4, 16)
	if pkts, err := b.Receive(time.Now().Add(time.Second)); len(pkts) != 4 || err != nil {
		t.Fatalf("Receive = %d, %v", len(pkts), err)
	}
	packetiotest.Send(t, a, b, 4, 2, 16) // queue still full: dropped
	if d := b.Stats().RxDrops; d != 2 {
		t.Fatalf("RxDrops = %d, want 2", d)
	}
	packetiotest.Send(t, a, b, 6, 2, 16)
	if d := b.Stats().RxDrops; d != 4 {
		t.Fatalf("RxDrops = %d, want 4", d)
	}
	if pkts, _ := b.Receive(time.Now().Add(10 * time.Millisecond)); len(pkts) != 0 {
		t.Fatalf("Receive = %d packets, want 0", len(pkts))
	}
	packetiotest.Send(t, a, b, 8, 3, 16)
	packetiotest.Check(t, packetiotest.Recv(t, b, 3, time.Second), a, b, 8, 16)
}

func TestNoRoute(t *testing.T) {
	a, b := pipe.New(addrA, addrB, pipe.Options{})
	defer a.Close()
	defer b.Close()
	batch := a.TxBatch(3)
	for i := range batch {
		batch[i].Buf = append(batch[i].Buf[:0], byte(i))
		batch[i].Addr = addrB
	}
	batch[0].Addr = netip.MustParseAddr("192.0.2.99")
	batch[2].Addr = netip.AddrFrom16(addrB.As16()) // IPv4-mapped: same address
	n, err := a.Transmit(batch)
	var te *packetio.TransmitError
	if n != 2 || !errors.As(err, &te) || te.Index != 0 || te.Addr != batch[0].Addr || !errors.Is(err, packetio.ErrNoRoute) {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	got := packetiotest.Recv(t, b, 2, time.Second)
	if got[0].Buf[0] != 1 || got[1].Buf[0] != 2 {
		t.Fatalf("got packets %d and %d, want 1 and 2", got[0].Buf[0], got[1].Buf[0])
	}
}

func BenchmarkPipe(b *testing.B) {
	for _, size := range []int{64, 1024} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			const batch = 32
			x, y := pipe.New(addrA, addrB, pipe.Options{})
			defer x.Close()
			defer y.Close()
			body := make([]byte, size)
			b.ReportAllocs()
			b.SetBytes(batch * int64(size))
			for b.Loop() {
				pkts := x.TxBatch(batch)
				for i := range pkts {
					pkts[i].Buf = append(pkts[i].Buf[:0], body...)
					pkts[i].Addr = addrB
				}
				if _, err := x.Transmit(pkts); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < batch; {
					rx, err := y.Receive(time.Time{})
					if err != nil {
						b.Fatal(err)
					}
					got += len(rx)
				}
			}
			b.ReportMetric(float64(b.N)*batch/b.Elapsed().Seconds(), "packets/s")
		})
	}
}
