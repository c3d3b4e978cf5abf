package verbs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/rdmatest"
)

// fullSendQueue returns a pair whose A side's send queue (4 requests) is
// full of SENDs that B has no receives for: they wait, RNR NAKed and
// retried forever, until B posts receives.
func fullSendQueue(t *testing.T) *rdmatest.Pair {
	p := rdmatest.RC(t, &rdmatest.Options{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	for i := 0; i < 4; i++ {
		p.A.Post(t, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: p.A.SGE(i*64, 64)})
	}
	if _, err := p.A.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGList: p.A.SGE(0, 64)}}); !errors.Is(err, verbs.ErrQueueFull) {
		t.Fatalf("a fifth SEND on a queue of 4: %v, want ErrQueueFull", err)
	}
	return p
}

func TestPostSendContextWaitsForRoom(t *testing.T) {
	p := fullSendQueue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := verbs.PostSendContext(ctx, p.A.QP, []verbs.SendWR{
			{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: p.A.SGE(256, 64)},
			{WRID: 5, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: p.A.SGE(320, 64)}})
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("PostSendContext returned %d, %v with the queue full", r.n, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	for i := 0; i < 6; i++ {
		p.B.PostRecv(t, i*64, 64)
	}
	select {
	case r := <-done:
		if r.n != 2 || r.err != nil {
			t.Fatalf("PostSendContext: %d, %v; want 2, nil", r.n, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("PostSendContext still waits 5 s after the receives freed the queue")
	}
	wcs := p.A.WaitSend(t, 6)
	for _, wc := range wcs {
		if err := wc.Err(); err != nil {
			t.Errorf("WR %d: %v", wc.WRID, err)
		}
	}
	if got := p.B.WaitRecv(t, 6); len(got) != 6 {
		t.Fatalf("%d receives completed, want 6", len(got))
	}
}

func TestPostSendContextCancel(t *testing.T) {
	p := fullSendQueue(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		n, err := verbs.PostSendContext(ctx, p.A.QP, []verbs.SendWR{{Opcode: verbs.WRSend, SGList: p.A.SGE(0, 64)}})
		if n != 0 {
			err = errors.New("posted on a full queue")
		}
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("PostSendContext after cancel: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("PostSendContext still waits 2 s after its context was cancelled")
	}
	// Any other error returns at once, without waiting.
	dead, stop := context.WithTimeout(context.Background(), time.Hour)
	defer stop()
	if _, err := verbs.PostSendContext(dead, p.A.QP, []verbs.SendWR{{}}); !errors.Is(err, verbs.ErrInvalidWR) {
		t.Fatalf("the zero SendWR through PostSendContext: %v", err)
	}
}

// TestZeroSendWRRefused: the zero SendWR (an RDMA WRITE to address 0 with
// rkey 0) and RDMA/atomic requests without an rkey are refused at post,
// the error naming the field, and nothing reaches the peer: the QP stays
// up and the next request succeeds.
func TestZeroSendWRRefused(t *testing.T) {
	p := rdmatest.RC(t, nil)
	rkey, raddr := p.B.MR.RKey(), p.B.MR.Addr()
	cases := []struct {
		name string
		wr   verbs.SendWR
		want []string
	}{
		{"zero", verbs.SendWR{}, []string{"zero SendWR", "RKey"}},
		{"write", verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: p.A.SGE(0, 8), RemoteAddr: raddr}, []string{"RDMA_WRITE", "RKey"}},
		{"write imm", verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, SGList: p.A.SGE(0, 8), RemoteAddr: raddr}, []string{"RDMA_WRITE_WITH_IMM", "RKey"}},
		{"read", verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: p.A.SGE(0, 8), RemoteAddr: raddr}, []string{"RDMA_READ", "RKey"}},
		{"cas", verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGList: p.A.SGE(0, 8), RemoteAddr: raddr}, []string{"ATOMIC_CMP_AND_SWP", "RKey"}},
		{"faa", verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: p.A.SGE(0, 8), RemoteAddr: raddr}, []string{"ATOMIC_FETCH_AND_ADD", "RKey"}},
		{"atomic write", verbs.SendWR{Opcode: verbs.WRAtomicWrite, SGList: p.A.SGE(0, 8), RemoteAddr: raddr}, []string{"ATOMIC_WRITE", "RKey"}},
		{"flush", verbs.SendWR{Opcode: verbs.WRFlush, RemoteAddr: raddr, FlushLen: 8}, []string{"FLUSH", "RKey"}},
	}
	good := verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: p.A.SGE(0, 8), RemoteAddr: raddr, RKey: rkey}
	for _, c := range cases {
		// A good request, then the bad one: the good one is posted, PostSend
		// says the second is bad.
		n, err := p.A.QP.PostSend([]verbs.SendWR{good, c.wr})
		if n != 1 || !errors.Is(err, verbs.ErrInvalidWR) {
			t.Fatalf("%s: PostSend = %d, %v; want 1, ErrInvalidWR", c.name, n, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not name %q", c.name, err, w)
			}
		}
		if wc := p.A.WaitSend(t, 1); len(wc) != 1 || wc[0].Err() != nil {
			t.Fatalf("%s: the good WRITE before it: %+v", c.name, wc)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = verbs.CheckSendWRs([]verbs.SendWR{good, good}) }); n != 0 {
		t.Errorf("CheckSendWRs of good requests allocates %v times", n)
	}
}
