package verbstest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Fresh is a pair of contexts the suite may close, made by Env.Fresh for
// one test: A and B reach each other as Env's do. CloseDeviceA closes A's
// device (soft.Device.Close); nil when closing the context is all there is
// (libibverbs: ibv_close_device).
type Fresh struct {
	A, B         verbs.Context
	CloseDeviceA func() error
}

// wakeBound is how soon Close must wake a waiter.
const wakeBound = 100 * time.Millisecond

// testBusy: destroying what something still uses is refused with ErrBusy
// and changes nothing; in the right order everything goes.
func testBusy(t *testing.T, env *Env) {
	p := newRCPair(t, env, true)
	a := p.a
	srq, err := a.pd.CreateSRQ(4, 1)
	if err != nil {
		t.Fatalf("CreateSRQ: %v", err)
	}
	t.Cleanup(func() { check(t, "Destroy SRQ", srq.Destroy()) })
	qs := a.createQP(t, verbs.QPTRC, srq)
	busy := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, verbs.ErrBusy) {
			t.Errorf("%s while in use: %v, want an error matching verbs.ErrBusy", what, err)
		}
	}
	busy("Dealloc PD with QPs and an MR", a.pd.Dealloc())
	busy("Close PD with QPs and an MR", a.pd.Close())
	busy("Destroy CQ under a QP", a.scq.Destroy())
	busy("Destroy CQ under a QP", a.rcq.Close())
	busy("Destroy channel with CQs", a.ch.Destroy())
	busy("Destroy SRQ under a QP", srq.Destroy())

	// Nothing changed: the refused objects still work, events included.
	postRecv(t, srq, verbs.RecvWR{WRID: 1, SGList: a.sge(0, 64)})
	postRecv(t, p.qb, verbs.RecvWR{WRID: 2, SGList: p.b.sge(0, 64)})
	post(t, p.qa, verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(64, 64)})
	ctx, cancel := context.WithTimeout(context.Background(), env.Wait)
	defer cancel()
	wc := make([]verbs.WC, 1)
	if n, err := verbs.PollWait(ctx, a.ch, a.scq, wc); err != nil || n != 1 {
		t.Fatalf("PollWait after refused destroys: %d, %v", n, err)
	}
	expect(t, wc[0], 3, verbs.WCSuccess, verbs.WCSend)
	if n, err := verbs.PollWait(ctx, p.b.ch, p.b.rcq, wc); err != nil || n != 1 {
		t.Fatalf("PollWait for the receive: %d, %v", n, err)
	}
	expect(t, wc[0], 2, verbs.WCSuccess, verbs.WCRecv)
	mr2, err := a.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatalf("RegMR on the PD a Dealloc refused: %v", err)
	}

	// In order: QPs, then SRQ and CQs, then channel, MRs, PD.
	check(t, "Destroy QP", qs.Destroy())
	check(t, "Destroy SRQ", srq.Destroy())
	busy("Dealloc PD with a QP and MRs", a.pd.Dealloc())
	check(t, "Destroy QP", p.qa.Destroy())
	check(t, "Destroy QP twice", p.qa.Close())
	busy("Destroy channel with CQs", a.ch.Destroy())
	check(t, "Destroy CQ", a.scq.Destroy())
	busy("Destroy channel with a CQ", a.ch.Destroy())
	check(t, "Destroy CQ", a.rcq.Close())
	check(t, "Destroy channel", a.ch.Destroy())
	busy("Dealloc PD with MRs", a.pd.Dealloc())
	check(t, "Dereg", mr2.Dereg())
	check(t, "Dereg", a.mr.Close())
	check(t, "Dealloc PD", a.pd.Dealloc())
	check(t, "Dealloc PD twice", a.pd.Dealloc())
	if _, err := a.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("RegMR on a deallocated PD: %v, want verbs.ErrDestroyed", err)
	}
	if err := a.scq.ReqNotify(false); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("ReqNotify on a destroyed CQ: %v, want verbs.ErrDestroyed", err)
	}
	if _, err := p.qa.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}}); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("PostSend on a destroyed QP: %v, want verbs.ErrDestroyed", err)
	}
}

// testChannelDestroyWakes: destroying a channel wakes its waiters.
func testChannelDestroyWakes(t *testing.T, env *Env) {
	ch, err := env.A.CreateCompChannel()
	if err != nil {
		t.Fatalf("CreateCompChannel: %v", err)
	}
	t.Cleanup(func() { check(t, "Destroy channel", ch.Destroy()) })
	woke := make(chan error, 2)
	for range 2 {
		go func() { _, err := ch.Wait(context.Background()); woke <- err }()
	}
	time.Sleep(20 * time.Millisecond) // let them block
	start := time.Now()
	check(t, "Destroy channel", ch.Destroy())
	for range 2 {
		select {
		case err := <-woke:
			if !errors.Is(err, verbs.ErrDestroyed) {
				t.Errorf("Wait woken by Destroy: %v, want verbs.ErrDestroyed", err)
			}
		case <-time.After(time.Second):
			t.Fatalf("Wait not woken %v after the channel's Destroy", time.Second)
		}
	}
	if d := time.Since(start); d > wakeBound {
		t.Errorf("waiters woke %v after Destroy, want within %v", d, wakeBound)
	}
	if _, err := ch.Wait(context.Background()); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("Wait on a destroyed channel: %v, want verbs.ErrDestroyed", err)
	}
}

// testClosed: after the context (or its device) closes, waiters wake
// within wakeBound and every call fails with ErrDestroyed, while destroys
// return nil.
func testClosed(t *testing.T, env *Env) {
	for _, how := range []string{"Context.Close", "device close"} {
		t.Run(how, func(t *testing.T) {
			f := env.Fresh(t)
			closeIt := f.A.Close
			if how == "device close" {
				if f.CloseDeviceA == nil {
					t.Skip("the provider's device closes with its context")
				}
				closeIt = f.CloseDeviceA
			}
			sa := newSide(t, env, f.A, env.GIDIndexA, true)
			sb := newSide(t, env, f.B, env.GIDIndexB, false)
			qa, qb := sa.createQP(t, verbs.QPTRC, nil), sb.createQP(t, verbs.QPTRC, nil)
			connectRC(t, env, qa, sa, sb, qb.Num())
			connectRC(t, env, qb, sb, sa, qa.Num())
			srq, err := sa.pd.CreateSRQ(4, 1)
			if err != nil {
				t.Fatalf("CreateSRQ: %v", err)
			}
			ah, err := sa.pd.CreateAH(&verbs.AHAttr{DGID: sb.gid, SGIDIndex: uint8(sa.gidx), HopLimit: 64, PortNum: env.Port})
			if err != nil {
				t.Fatalf("CreateAH: %v", err)
			}
			if err := sa.rcq.ReqNotify(false); err != nil {
				t.Fatalf("ReqNotify: %v", err)
			}
			closeWakesWaiters(t, how, f.A, sa, closeIt)
			checkClosedCalls(t, env, how, f.A, sa, sb, qa, srq)
			// Destroying what the close destroyed is harmless, in any order.
			for what, c := range map[string]func() error{"PD": sa.pd.Dealloc, "CQ": sa.scq.Destroy, "channel": sa.ch.Destroy,
				"MR": sa.mr.Dereg, "SRQ": srq.Destroy, "AH": ah.Destroy, "QP": qa.Destroy, "context": f.A.Close} {
				if err := c(); err != nil {
					t.Errorf("destroy %s after %s: %v, want nil", what, how, err)
				}
			}
		})
	}
}

// closeWakesWaiters blocks three waiters on ctx, side sa's: one in the
// channel's Wait, one in PollWait on the receive CQ (armed), one in
// GetAsyncEvent. It then closes ctx with closeIt (how names it) and checks
// that each wakes with ErrDestroyed within wakeBound.
func closeWakesWaiters(t *testing.T, how string, ctx verbs.Context, sa *side, closeIt func() error) {
	woke := make(chan error, 3)
	go func() { _, err := sa.ch.Wait(context.Background()); woke <- err }()
	go func() {
		_, err := verbs.PollWait(context.Background(), sa.ch, sa.rcq, make([]verbs.WC, 1))
		woke <- err
	}()
	go func() { _, err := ctx.GetAsyncEvent(context.Background()); woke <- err }()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	if err := closeIt(); err != nil {
		t.Fatalf("%s: %v", how, err)
	}
	for range 3 {
		select {
		case err := <-woke:
			if !errors.Is(err, verbs.ErrDestroyed) {
				t.Errorf("waiter woken by %s: %v, want verbs.ErrDestroyed", how, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("a waiter still blocked 2 s after %s", how)
		}
	}
	if d := time.Since(start); d > wakeBound {
		t.Errorf("waiters woke %v after %s, want within %v", d, how, wakeBound)
	}
}

// checkClosedCalls checks that every call on ctx, closed by how, and on the
// objects made from it (side sa's, its QP qa and SRQ srq) fails with
// ErrDestroyed. sb is the other side, whose GID the AH and the QP's
// attributes name.
func checkClosedCalls(t *testing.T, env *Env, how string, ctx verbs.Context, sa, sb *side, qa verbs.QP, srq verbs.SRQ) {
	destroyed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, verbs.ErrDestroyed) {
			t.Errorf("%s after %s: %v, want verbs.ErrDestroyed", what, how, err)
		}
	}
	_, err := ctx.AllocPD()
	destroyed("AllocPD", err)
	_, err = ctx.CreateCompChannel()
	destroyed("CreateCompChannel", err)
	_, err = ctx.CreateCQ(4, nil)
	destroyed("CreateCQ", err)
	_, err = ctx.QueryPort(env.Port)
	destroyed("QueryPort", err)
	_, err = ctx.GetAsyncEvent(context.Background())
	destroyed("GetAsyncEvent", err)
	_, err = sa.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	destroyed("RegMR", err)
	_, err = sa.pd.CreateQP(&verbs.QPInitAttr{SendCQ: sa.scq, RecvCQ: sa.rcq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	destroyed("CreateQP", err)
	_, err = sa.pd.CreateSRQ(4, 1)
	destroyed("CreateSRQ", err)
	_, err = sa.pd.CreateAH(&verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: sb.gid, PortNum: env.Port})
	destroyed("CreateAH", err)
	_, err = qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SGList: sa.sge(0, 8)}})
	destroyed("PostSend", err)
	_, err = qa.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: sa.sge(0, 8)}})
	destroyed("PostRecv", err)
	_, err = srq.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: sa.sge(0, 8)}})
	destroyed("SRQ PostRecv", err)
	destroyed("Modify", qa.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState))
	_, err = qa.Query()
	destroyed("Query", err)
	destroyed("ReqNotify", sa.rcq.ReqNotify(false))
	_, err = sa.ch.Wait(context.Background())
	destroyed("Wait", err)
}

// testCloseOrder closes everything in random orders, from several
// goroutines, while others post, poll and wait: nothing may panic or hang,
// and every error says ErrBusy or ErrDestroyed.
func testCloseOrder(t *testing.T, env *Env) {
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	for round := range rounds {
		seed := uint64(round)*0x9e3779b97f4a7c15 + uint64(time.Now().UnixNano())
		rng := rand.New(rand.NewPCG(seed, 1))
		f := env.Fresh(t)
		sa := newSide(t, env, f.A, env.GIDIndexA, true)
		sb := newSide(t, env, f.B, env.GIDIndexB, true)
		qa, qb := sa.createQP(t, verbs.QPTRC, nil), sb.createQP(t, verbs.QPTRC, nil)
		connectRC(t, env, qa, sa, sb, qb.Num())
		connectRC(t, env, qb, sb, sa, qa.Num())
		srq, err := sa.pd.CreateSRQ(8, 1)
		if err != nil {
			t.Fatalf("CreateSRQ: %v", err)
		}

		r := &closeRace{f: f, sa: sa, sb: sb, qa: qa, qb: qb, srq: srq, stop: make(chan struct{})}
		r.startUsers()
		r.closeAll(rng)
		close(r.stop)
		done := make(chan struct{})
		go func() { r.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d (seed %#x): goroutines still blocked 5 s after everything closed", round, seed)
		}
		for _, err := range r.bad {
			t.Errorf("round %d (seed %#x): %v", round, seed, err)
		}
	}
}

// closeRace is a round of testCloseOrder: the two contexts and their
// objects, the goroutines using them (wg; stop ends those that do not end
// by themselves) and the errors they met that the test does not allow.
type closeRace struct {
	f      Fresh
	sa, sb *side
	qa, qb verbs.QP
	srq    verbs.SRQ

	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	bad  []error // under mu
}

// report keeps err, from what, unless it is nil or one of the errors a
// call racing with the closes may meet.
func (r *closeRace) report(what string, err error) {
	if err == nil || errors.Is(err, verbs.ErrDestroyed) || errors.Is(err, verbs.ErrBusy) ||
		errors.Is(err, verbs.ErrQueueFull) || errors.Is(err, verbs.ErrInvalidState) ||
		errors.Is(err, context.DeadlineExceeded) {
		return
	}
	r.mu.Lock()
	r.bad = append(r.bad, errors.New(what+": "+err.Error()))
	r.mu.Unlock()
}

// loop calls f in a goroutine of its own until r.stop closes or f says
// ErrDestroyed, reporting its other errors as what's.
func (r *closeRace) loop(what string, f func() error) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			select {
			case <-r.stop:
				return
			default:
			}
			if err := f(); errors.Is(err, verbs.ErrDestroyed) {
				return
			} else {
				r.report(what, err)
			}
		}
	}()
}

// wait polls cq, sleeping on ch, in a goroutine of its own until the first
// error, which it reports as what's.
func (r *closeRace) wait(what string, ch verbs.CompChannel, cq verbs.CQ) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		w := make([]verbs.WC, 8)
		for {
			// No deadline: only the close can end a wait.
			if _, err := verbs.PollWait(context.Background(), ch, cq, w); err != nil {
				r.report(what, err)
				return
			}
		}
	}()
}

// startUsers starts the goroutines that use the objects while they close:
// one posting sends, RDMA writes and receives, one polling, one posting to
// the SRQ, one waiting on each side's send CQ and one reading A's async
// events.
func (r *closeRace) startUsers() {
	sa, sb, qa, qb, srq := r.sa, r.sb, r.qa, r.qb, r.srq
	wcs := make([]verbs.WC, 8)
	r.loop("post", func() error {
		postRecvErr := func() error {
			_, err := qb.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: sb.sge(0, 64)}})
			return err
		}
		if err := postRecvErr(); err != nil {
			return err
		}
		_, err := qa.PostSend([]verbs.SendWR{{WRID: 7, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sa.sge(0, 64)},
			{WRID: 8, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: sa.sge(64, 64),
				RemoteAddr: sb.mr.Addr(), RKey: sb.mr.RKey()}})
		time.Sleep(time.Millisecond)
		return err
	})
	r.loop("poll", func() error {
		sb.rcq.Poll(wcs)
		time.Sleep(100 * time.Microsecond)
		return nil
	})
	r.loop("srq", func() error {
		_, err := srq.PostRecv([]verbs.RecvWR{{WRID: 10, SGList: sa.sge(128, 8)}})
		time.Sleep(time.Millisecond)
		return err
	})
	r.wait("wait a", sa.ch, sa.scq)
	r.wait("wait b", sb.ch, sb.scq)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_, err := r.f.A.GetAsyncEvent(context.Background())
		for err == nil {
			_, err = r.f.A.GetAsyncEvent(context.Background())
		}
		r.report("async", err)
	}()
}

// closeAll closes every object, and A's device when it closes apart, in an
// order shuffled with rng, from three goroutines each sleeping a random
// moment after each close; then it closes both contexts again, for
// whatever a refusal left.
func (r *closeRace) closeAll(rng *rand.Rand) {
	sa, sb, f := r.sa, r.sb, r.f
	closers := []func() error{r.qa.Close, r.qb.Close, r.srq.Close, sa.scq.Close, sa.rcq.Close, sb.scq.Close,
		sb.rcq.Close, sa.ch.Close, sb.ch.Close, sa.mr.Close, sb.mr.Close, sa.pd.Close, sb.pd.Close, f.A.Close, f.B.Close}
	if f.CloseDeviceA != nil {
		closers = append(closers, f.CloseDeviceA)
	}
	rng.Shuffle(len(closers), func(i, j int) { closers[i], closers[j] = closers[j], closers[i] })
	sleeps := make([]time.Duration, len(closers))
	for i := range sleeps {
		sleeps[i] = time.Duration(rng.IntN(300)) * time.Microsecond
	}
	time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
	var cw sync.WaitGroup
	for g := range 3 {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for i := g; i < len(closers); i += 3 {
				r.report("close", closers[i]())
				time.Sleep(sleeps[i])
			}
		}()
	}
	cw.Wait()
	// Whatever a refusal left, the contexts' Close takes.
	r.report("context close", f.A.Close())
	r.report("context close", f.B.Close())
}
