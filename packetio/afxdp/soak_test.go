//go:build linux

package afxdp_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
)

var soakPackets = flag.Int("afxdp.soak", 200000, "packets of TestNetnsSoak (10000000 for the long soak)")

// pumpResult is what pump measured.
type pumpResult struct {
	received int
	elapsed  time.Duration
	err      error
}

// pump sends n packets of size bytes from a to b, each carrying its
// sequence number, with at most window in flight (sent and not yet
// received), and receives them on the calling goroutine, checking that they
// arrive once and in order. It stops after limit, or after a second with
// nothing received.
func pump(a, b packetio.Conn, n, size, window int, limit time.Duration) pumpResult {
	var received atomic.Int64
	var stop, waiting atomic.Bool
	wake := make(chan struct{}, 1)
	sendErr := make(chan error, 1)
	start := time.Now()
	go func() {
		to := b.LocalAddr()
		sent := 0
		for sent < n && !stop.Load() {
			room := window - (sent - int(received.Load()))
			if room < 8 {
				// Sleep until the receiver makes room (not spin: the two
				// sides and the kernel's work share two cores).
				waiting.Store(true)
				if window-(sent-int(received.Load())) < 8 && !stop.Load() {
					select {
					case <-wake:
					case <-time.After(100 * time.Millisecond):
					}
				}
				waiting.Store(false)
				continue
			}
			batch := a.TxBatch(min(32, room, n-sent))
			for i := range batch {
				buf := batch[i].Buf[:size]
				binary.BigEndian.PutUint64(buf, uint64(sent+i))
				buf[size-1] = byte(sent + i)
				batch[i].Buf, batch[i].Addr = buf, to
			}
			k, err := a.Transmit(batch)
			if err != nil {
				sendErr <- err
				return
			}
			sent += k
		}
		sendErr <- nil
	}()
	res := pumpResult{}
	end := start.Add(limit)
	last := time.Now()
	for res.received < n && res.err == nil {
		now := time.Now()
		if now.After(end) || now.Sub(last) > time.Second {
			res.err = fmt.Errorf("received %d of %d packets (stalled or over time)", res.received, n)
			break
		}
		pkts, err := b.Receive(now.Add(100 * time.Millisecond))
		if err != nil {
			res.err = err
			break
		}
		if len(pkts) > 0 {
			last = now
		}
		for i := range pkts {
			p := pkts[i].Buf
			if len(p) != size {
				res.err = fmt.Errorf("packet %d: %d bytes, want %d", res.received, len(p), size)
				break
			}
			if seq := binary.BigEndian.Uint64(p); seq != uint64(res.received) || p[size-1] != byte(seq) {
				res.err = fmt.Errorf("packet %d carries sequence %d", res.received, seq)
				break
			}
			res.received++
		}
		received.Store(int64(res.received))
		if waiting.Load() {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
	res.elapsed = time.Since(start)
	stop.Store(true)
	if err := <-sendErr; err != nil && res.err == nil {
		res.err = fmt.Errorf("transmit: %w", err)
	}
	return res
}

// TestNetnsSoak sends -afxdp.soak packets (200,000 by default; 10,000,000
// for the long soak) of 256 bytes one way over AF_XDP between two
// namespaces, and a quarter as many of 4132 bytes (a 4174-byte Ethernet frame: a
// 4096-byte path MTU's largest RoCE packet) over veth of MTU 9000
// (multi-buffer: each sent and received in two frames), and reconciles
// every counter: what the sender handed to the kernel, what the device
// dropped, what the XDP program redirected, what the kernel dropped at the
// socket (RX ring full, no fill-ring frame, other) and what Receive
// returned. Nothing the kernel delivered is lost, and with the window below
// the ring size nothing is dropped at all.
func TestNetnsSoak(t *testing.T) {
	for _, c := range []struct {
		name    string
		pair    func(testing.TB) *netns.Pair
		size, n int
		multi   bool
	}{
		{"mtu1500", newPair, 256, *soakPackets, false},
		{"mtu9000", newJumboPair, jumboFrame - 42, *soakPackets / 4, true},
	} {
		t.Run(c.name, func(t *testing.T) { soak(t, c.pair(t), c.size, c.n, c.multi) })
	}
}

func soak(t *testing.T, p *netns.Pair, size, n int, multi bool) {
	a := listenIn(t, p.A, p.AddrA, afxdp.Options{})
	b := listenIn(t, p.B, p.AddrB, afxdp.Options{})
	limit := 30*time.Second + time.Duration(n)*20*time.Microsecond
	res := pump(a, b, n, size, 512, limit)
	if res.err != nil {
		t.Fatal(res.err)
	}
	sa, sb := a.Stats(), b.Stats()
	xa, err := a.XDPStats()
	if err != nil {
		t.Fatal(err)
	}
	xb, err := b.XDPStats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d packets of %d B in %v (%.0f packets/s), mode %s", res.received, size, res.elapsed.Round(time.Millisecond), float64(res.received)/res.elapsed.Seconds(), a.Mode())
	t.Logf("sender %+v\n%+v", sa, xa)
	t.Logf("receiver %+v\n%+v", sb, xb)
	if sa.PacketsOut != uint64(n) || sa.TxErrors != 0 {
		t.Errorf("sender handed %d packets to the kernel (%d errors), want %d", sa.PacketsOut, sa.TxErrors, n)
	}
	if xa.TxDropped != 0 || xa.TxInvalidDescs != 0 {
		t.Errorf("the sender's device dropped %d frames, %d invalid descriptors", xa.TxDropped, xa.TxInvalidDescs)
	}
	// Everything the XDP program redirected was delivered or counted by
	// the kernel as dropped at the socket.
	if xb.Redirected != sb.PacketsIn+xb.RxRingFull+xb.RxDropped {
		t.Errorf("receiver: redirected %d != received %d + RX ring full %d + dropped %d", xb.Redirected, sb.PacketsIn, xb.RxRingFull, xb.RxDropped)
	}
	if sb.PacketsIn != uint64(n) || xb.RxRingFull != 0 || xb.RxDropped != 0 || xb.RxFillRingEmpty != 0 || sb.RxDrops != 0 || xb.NoSocket != 0 {
		t.Errorf("receiver lost packets: received %d of %d; RX ring full %d, dropped %d, fill ring empty %d, malformed %d, no socket %d",
			sb.PacketsIn, n, xb.RxRingFull, xb.RxDropped, xb.RxFillRingEmpty, sb.RxDrops, xb.NoSocket)
	}
	if chained := uint64(0); multi {
		chained = uint64(n)
		if xa.TxChained != chained || xb.RxChained != chained {
			t.Errorf("%d packets sent chained, %d received chained; want %d", xa.TxChained, xb.RxChained, chained)
		}
	} else if xa.TxChained != 0 || xb.RxChained != 0 {
		t.Errorf("single-buffer: %d packets sent chained, %d received chained", xa.TxChained, xb.RxChained)
	}
}
