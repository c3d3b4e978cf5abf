package engine

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// pktBatch is a batch of packets moved between the two goroutines of
// BenchmarkPostPollPipelined, recycled through a free list.
type pktBatch struct {
	n    int
	lens [pipeBatch]int
	buf  [pipeBatch][wire.MaxPMTU + 128]byte
}

const pipeBatch = 64

// outputBatch fills pb with what e has to send, at most pipeBatch packets.
func outputBatch(e *Engine, now int64, pb *pktBatch) {
	pb.n = 0
	for pb.n < pipeBatch {
		n, _, ok := e.Output(now, pb.buf[pb.n][:])
		if !ok {
			return
		}
		pb.lens[pb.n] = n
		pb.n++
	}
}

func inputBatch(e *Engine, now int64, pb *pktBatch, from netip.Addr) {
	for i := range pb.n {
		e.Input(now, pb.buf[i][:pb.lens[i]], from, wire.RoCEv2Port)
	}
}

// BenchmarkPostPollPipelined is BenchmarkPostPoll with each engine on a
// goroutine of its own, as on two hosts: the requester posts 64-byte
// WRITEs, sends their packets and takes the ACKs back while the responder
// executes the previous batch. Packets move between the goroutines in
// batches over channels that both sides poll without sleeping, as a
// polling driver does (a stand-in for the network, a few ns a packet). It
// measures the rate the pair sustains when each side has an idle
// processor of its own (GOMAXPROCS >= 2); when the processors are shared
// with other work the spinning sides take turns and the rate collapses, so
// read it only on a quiet machine. BenchmarkPostPoll's ns/op is the per-WQE
// cost of both sides together.
func BenchmarkPostPollPipelined(b *testing.B) {
	l := newLink(b)
	l.a.cfg.Clock, l.b.cfg.Clock = verbs.Now, verbs.Now
	x, y := newSide(b, l.a, verbs.QPTRC, 1<<16), newSide(b, l.b, verbs.QPTRC, 1<<16)
	connectRC(b, x, y, verbs.MTU4096)
	const batch, inFlight = 32, 4 // WQEs per post; posts outstanding (SQ depth 256)
	wrs := make([]verbs.SendWR, batch)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: x.sge(0, 64), RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
	}
	wrs[batch-1].Flags = verbs.SendSignaled
	toB, toA := make(chan *pktBatch, 8), make(chan *pktBatch, 8)
	free := make(chan *pktBatch, 16)
	for range cap(free) {
		free <- new(pktBatch)
	}
	done := make(chan struct{})
	var stop atomic.Bool
	go func() { // the responder
		defer close(done)
		for {
			var pb *pktBatch
			select { // spin, as a polling driver does: no sleep, no wake-up
			case pb = <-toB:
			default:
				if stop.Load() {
					return
				}
				continue
			}
			inputBatch(l.b, 1, pb, l.a.Local())
			outputBatch(l.b, 1, pb) // the ACKs, in the same batch's memory
			if pb.n == 0 {
				free <- pb
				continue
			}
			toA <- pb
		}
	}()
	wc := make([]verbs.WC, batch)
	posted, retired, out := 0, 0, 0
	send := func() { // what the requester has to send, as its driver would
		for {
			pb := <-free
			if outputBatch(l.a, 1, pb); pb.n == 0 {
				free <- pb
				return
			}
			toB <- pb
		}
	}
	take := func(pb *pktBatch) {
		inputBatch(l.a, 1, pb, l.b.Local())
		free <- pb
		for k := x.scq.Poll(wc); k > 0; k = x.scq.Poll(wc) {
			retired += k * batch
			out -= k
		}
		send() // an ACK may release packets that waited for it (a cork, the window)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for retired < b.N {
		if posted < b.N && out < inFlight {
			if _, err := x.qp.PostSend(wrs); err != nil {
				b.Fatal(err)
			}
			posted += batch
			out++
			send()
		}
		select {
		case pb := <-toA:
			take(pb)
		default:
		}
	}
	b.StopTimer()
	stop.Store(true)
	<-done
	b.ReportMetric(float64(retired)/b.Elapsed().Seconds()/1e6, "MWQE/s")
}
