package soft

import (
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// TestPostPollNoAlloc: in steady state, posting a WRITE and a SEND with its
// receive, the driver moving the packets, and polling the completions
// allocate nothing anywhere in the process (AllocsPerRun counts every
// goroutine's allocations, the device drivers' included).
func TestPostPollNoAlloc(t *testing.T) {
	da, db := pipeDevices(t)
	a, b := newEnd(t, da, verbs.QPTRC, 1<<16), newEnd(t, db, verbs.QPTRC, 1<<16)
	connect(t, a, b)
	wr := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 4096, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 3000, LKey: a.mr.LKey()}}},
	}
	rwr := []verbs.RecvWR{{WRID: 3, SGList: []verbs.SGE{{Addr: b.mr.Addr() + 8192, Length: 4096, LKey: b.mr.LKey()}}}}
	wc := make([]verbs.WC, 4)
	round := func() {
		if _, err := b.qp.PostRecv(rwr); err != nil {
			t.Fatal(err)
		}
		if _, err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for got := 0; got < 2; {
			n := a.cq.Poll(wc) + b.cq.Poll(wc)
			got += n
			if n == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no completion")
				}
				runtime.Gosched()
			}
		}
	}
	for i := 0; i < 50; i++ { // warm up: buffers, timers, goroutine stacks
		round()
	}
	if n := testing.AllocsPerRun(500, round); n != 0 {
		t.Errorf("%v allocations per post/transfer/poll round", n)
	}
	// The pipe is a packetio.Gatherer: the 4096- and 3000-byte payloads
	// went from where they lie, and that path allocates nothing either.
	if g := da.Stats().TxGathered; g < 550 {
		t.Errorf("%d packets sent in pieces in 550 rounds, want one a round at least", g)
	}
}
