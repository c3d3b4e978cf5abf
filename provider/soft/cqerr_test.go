package soft_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/rdmatest"
)

type waitResult struct {
	n   int
	err error
	at  time.Time
}

// pollWaiter runs PollWait on cq in a loop (one completion at a time) until
// it returns an error, and reports that error and when it came.
func pollWaiter(ctx context.Context, ch verbs.CompChannel, cq verbs.CQ) <-chan waitResult {
	out := make(chan waitResult, 1)
	go func() {
		wc := make([]verbs.WC, 1)
		total := 0
		for {
			n, err := verbs.PollWait(ctx, ch, cq, wc)
			total += n
			if err != nil {
				out <- waitResult{n: total, err: err, at: time.Now()}
				return
			}
		}
	}()
	return out
}

// TestPollWaitCQOverrun: a CQ that overruns under a PollWait waiter makes
// it return an error matching verbs.ErrCQOverrun (after the completions the
// CQ kept) within 100 ms, and CQ.Err says the same.
func TestPollWaitCQOverrun(t *testing.T) {
	const sends = 32
	for attempt := 0; attempt < 3; attempt++ {
		p := rdmatest.RC(t, &rdmatest.Options{CQSize: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.B.RecvCQ.Err(); err != nil {
			t.Fatalf("a fresh CQ has an error: %v", err)
		}
		for i := 0; i < sends; i++ {
			p.B.PostRecv(t, i*64, 64)
		}
		res := pollWaiter(ctx, p.B.RecvCh, p.B.RecvCQ)
		time.Sleep(10 * time.Millisecond) // the waiter blocks on the channel
		wrs := make([]verbs.SendWR, sends)
		for i := range wrs {
			wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: p.A.SGE(i*64, 64)}
		}
		wrs[sends-1].Flags = verbs.SendSignaled
		p.A.Post(t, wrs...)
		ev, err := p.B.Ctx.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("no async event: %v", err)
		}
		raised := time.Now()
		if ev.Type != verbs.EventCQErr {
			t.Fatalf("async event %v, want CQ_ERR", ev.Type)
		}
		var r waitResult
		select {
		case r = <-res:
		case <-time.After(5 * time.Second):
			t.Fatal("PollWait still waits 5 s after the overrun")
		}
		if !errors.Is(r.err, verbs.ErrCQOverrun) {
			t.Fatalf("PollWait returned %v after %d completions, want ErrCQOverrun", r.err, r.n)
		}
		if err := p.B.RecvCQ.Err(); !errors.Is(err, verbs.ErrCQOverrun) {
			t.Fatalf("CQ.Err = %v", err)
		}
		if r.n >= sends {
			t.Logf("attempt %d: all %d receives were polled before the overrun; again", attempt, r.n)
			continue
		}
		if d := r.at.Sub(raised); d > 100*time.Millisecond {
			t.Fatalf("PollWait returned the overrun %v after CQ_ERR", d)
		}
		t.Logf("PollWait: %d completions, then %v (%v after CQ_ERR)", r.n, r.err, r.at.Sub(raised))
		return
	}
	t.Fatal("32 SENDs into a CQ of 1 never overran it")
}

// TestPollWaitCQDestroyed: destroying a CQ, then closing the context, under
// a PollWait waiter makes it return an error matching verbs.ErrDestroyed
// within 100 ms.
func TestPollWaitCQDestroyed(t *testing.T) {
	p := rdmatest.RC(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := p.A.Ctx.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	for _, kill := range []string{"destroy", "close context"} {
		cq, err := p.A.Ctx.CreateCQ(4, ch)
		if err != nil {
			t.Fatal(err)
		}
		res := pollWaiter(ctx, ch, cq)
		time.Sleep(20 * time.Millisecond)
		select {
		case r := <-res:
			t.Fatalf("PollWait returned %v before the CQ went", r.err)
		default:
		}
		start := time.Now()
		if kill == "destroy" {
			err = cq.Destroy()
		} else {
			err = p.A.Ctx.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-res:
			if !errors.Is(r.err, verbs.ErrDestroyed) {
				t.Fatalf("%s: PollWait returned %v", kill, r.err)
			}
			if d := r.at.Sub(start); d > 100*time.Millisecond {
				t.Fatalf("%s: PollWait returned %v later", kill, d)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: PollWait still waits 5 s later", kill)
		}
		if err := cq.Err(); !errors.Is(err, verbs.ErrDestroyed) {
			t.Fatalf("%s: CQ.Err = %v", kill, err)
		}
	}
}
