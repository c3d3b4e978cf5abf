package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/verbs"
)

// pattern is the byte at offset i of every data slot a verifying test
// fills.
func pattern(i int) byte { return byte(i^i>>8^i>>16)*31 + 7 }

// fill writes the pattern where this side provides data: the sources of
// SEND and WRITE, the server's targets of READ.
func (s *session) fill() {
	q := s.o.QPs
	switch {
	case s.o.Test.Verb == Send || s.o.Test.Verb == Write:
		for i := 0; i < q; i++ {
			fillPattern(s.buf[i*s.buff : (i+1)*s.buff])
		}
	case !s.o.Client && s.o.Test.Verb == Read:
		for i := q; i < 2*q; i++ {
			fillPattern(s.buf[i*s.buff : (i+1)*s.buff])
		}
	}
}

func fillPattern(b []byte) {
	for i := range b {
		b[i] = pattern(i)
	}
}

// written returns the ranges [off, off+size) of a slot that n messages of
// size cover.
func (s *session) written(n uint64, size int) [][2]int {
	if size > s.cycle/2 {
		return [][2]int{{0, size}}
	}
	in := inc(size, s.cacheLine)
	k := min(n, uint64(s.cycle/in))
	r := make([][2]int, 0, k)
	for j := uint64(0); j < k; j++ {
		r = append(r, [2]int{int(j) * in, int(j)*in + size})
	}
	return r
}

// syncDevice orders what the device wrote into registered memory before
// what this goroutine reads next: a control call takes the device's lock,
// which its driver holds while it runs the engine (on the soft device). The
// network already orders them (the peer learned of the write from an ACK
// before it told us over TCP), but not in a way the race detector sees.
func (s *session) syncDevice() {
	if len(s.qps) > 0 {
		s.qps[0].Query()
	}
}

// checkSlots compares the covered ranges of slots first.. first+QPs-1 with
// the pattern.
func (s *session) checkSlots(first int, size int) error {
	s.syncDevice()
	for i := 0; i < s.o.QPs; i++ {
		slot := s.buf[(first+i)*s.buff : (first+i+1)*s.buff]
		for _, r := range s.written(uint64(s.o.Iters), size) {
			for off := r[0]; off < r[1]; off++ {
				if slot[off] != pattern(off) {
					return fmt.Errorf("%w: QP %d, byte %d of the slot is %#02x, want %#02x", ErrVerify, i, off, slot[off], pattern(off))
				}
			}
		}
	}
	return nil
}

// checkTargets verifies what a WRITE test's client wrote (server side).
func (s *session) checkTargets() error {
	if !s.o.Verify || s.o.Test.Verb != Write {
		return nil
	}
	return s.checkSlots(s.o.QPs, s.o.Size)
}

// timestamps returns n timestamps' room, every page of it written once
// (packetio.Prefault), as the kernel maps a page on its first write: a
// test's first pass over arrays of millions of timestamps (perftest's
// tposted and tcompleted) then takes no page faults, which cost a 64-byte
// write_bw a tenth of its message rate on a virtual machine.
func timestamps(n int) []int64 {
	t := make([]int64, n)
	packetio.Prefault(t)
	return t
}

// waiter waits for completions: it polls, yielding the processor between
// polls (the device's driver may need it), and after 50 µs without any
// arms the CQ and sleeps on the completion channel; with Options.Busy it
// never sleeps.
type waiter struct {
	s         *session
	idleSince int64
	clk       clock
}

// idle is called after a poll found nothing; it returns an error when ctx
// ends or the channel fails.
func (w *waiter) idle(ctx context.Context) error {
	if w.s.o.Busy {
		runtime.Gosched()
		return ctx.Err()
	}
	now := w.clk.now()
	if w.idleSince == 0 {
		w.idleSince = now
	} else if now-w.idleSince > int64(50*time.Microsecond) {
		w.idleSince = 0
		if err := w.s.cq.ReqNotify(false); err != nil {
			return err
		}
		_, err := w.s.ch.Wait(ctx)
		return err
	}
	runtime.Gosched()
	return ctx.Err()
}

func (w *waiter) busy() { w.idleSince = 0 }

// silence watches a UD test for loss: UD does not resend, so a test that
// has heard nothing for UDQuiet will hear no more. Its context, which the
// test's waits use, ends then; a timer reset at each sign of progress ends
// it, so that watching allocates nothing after the start.
type silence struct {
	ctx    context.Context
	cancel context.CancelFunc
	timer  *time.Timer
}

func newSilence(ctx context.Context) *silence {
	s := &silence{}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.timer = time.AfterFunc(UDQuiet, s.cancel)
	return s
}

// heard restarts the wait.
func (s *silence) heard() { s.timer.Reset(UDQuiet) }

// stop ends the watch.
func (s *silence) stop() {
	s.timer.Stop()
	s.cancel()
}

// fell reports whether the silence, not parent, ended the context.
func (s *silence) fell(parent context.Context) bool { return s.ctx.Err() != nil && parent.Err() == nil }

// progress prints a line a second while a test runs.
type progress struct {
	s     *session
	clk   clock
	last  int64
	start int64
}

func (p *progress) tick(done uint64, total uint64, size int) {
	if p.s.o.Progress == nil {
		return
	}
	now := p.clk.now()
	if now-p.last < int64(time.Second) {
		return
	}
	p.last = now
	el := float64(now-p.start) / 1e9
	o := &p.s.o
	rate := float64(done) / el
	if o.Duration > 0 {
		fmt.Fprintf(p.s.o.Progress, "%s: %.0f of %.0f s, %d iterations, %.2f MB/sec, %.6f Mpps\n",
			o.Test, el, o.Duration.Seconds(), done, rate*float64(size)/(1<<20), rate/1e6)
		return
	}
	fmt.Fprintf(p.s.o.Progress, "%s: %d of %d iterations (%.0f%%), %.2f MB/sec, %.6f Mpps\n",
		o.Test, done, total, 100*float64(done)/float64(total), rate*float64(size)/(1<<20), rate/1e6)
}

func wcError(w *verbs.WC, what string, n uint64) error {
	return fmt.Errorf("completion with error: %s (%d), vendor error %#x, opcode %v, wr_id %#x, after %d %s",
		w.Status, w.Status, w.VendorErr, w.Opcode, w.WRID, n, what)
}

// runBW is the client of a bandwidth test (run_iter_bw): every QP keeps up
// to TxDepth requests outstanding, one completion every CQMod requests.
// With Duplex it is both sides' loop (run_iter_bw; for SEND run_iter_bi:
// the messages the peer sends are taken in and their receives reposted
// too, and the server posts nothing before the first has arrived, so that
// its clock starts with the client's).
func (s *session) runBW(ctx context.Context, size int) (Result, error) {
	b := s.newBWRun(size)
	if s.o.WarmUp {
		if err := s.warmUp(ctx, b.wrs[:1], size); err != nil {
			return Result{}, err
		}
	}
	completed, first, lastDone, err := s.bwLoop(ctx, &b, size)
	if err != nil {
		return Result{}, err
	}
	return s.bwResult(size, completed, lastDone-first, &b)
}

// bwRun is what a bandwidth test's loop (bwLoop) posts and counts with: the
// work requests of a post and their SGEs; per QP the messages posted and
// completed, the count at its last signaled work request (a completion's
// WRID counts the messages since), the posts until its next signaled one
// (CQ moderation), where in its slot its next message goes, and with
// Duplex SEND the messages received; and unless the run is timed, the
// times each message was posted and completed (perftest's tposted and
// tcompleted).
type bwRun struct {
	sges                []verbs.SGE
	wrs                 []verbs.SendWR
	scnt, ccnt, lastSig []uint64
	toSig               []int
	cursors             []slotCursor
	rcnt                []uint64
	tposted, tcompleted []int64
}

// newBWRun makes a bandwidth test's counts and work requests for messages
// of size bytes. A post is a list of PostList work requests (-l; one by
// default), each with its own SGE. With Verify a SEND test sends every
// message from the start of its slot, whose bytes the receiver checks
// against the pattern from its first on: its cursors stay at 0.
func (s *session) newBWRun(size int) bwRun {
	o := &s.o
	q := len(s.qps)
	var b bwRun
	if o.Duration == 0 {
		b.tposted = timestamps(o.Iters * q)
		b.tcompleted = timestamps(o.Iters * q)
		runtime.GC() // as before the last handshake (script), for these arrays
	}
	b.scnt, b.ccnt, b.lastSig = make([]uint64, q), make([]uint64, q), make([]uint64, q)
	b.cursors, b.toSig = make([]slotCursor, q), make([]int, q)
	for i := range b.cursors {
		b.toSig[i] = o.CQMod
		if !o.Verify || o.Test.Verb != Send {
			b.cursors[i] = newSlotCursor(size, s.cycle, s.cacheLine)
		}
	}
	pl := max(o.PostList, 1)
	b.sges, b.wrs = make([]verbs.SGE, pl), make([]verbs.SendWR, pl)
	opcode := map[Verb]verbs.WROpcode{Send: verbs.WRSend, Write: verbs.WRRDMAWrite, Read: verbs.WRRDMARead, Atomic: o.Atomic}[o.Test.Verb]
	for j := range b.wrs {
		b.wrs[j] = verbs.SendWR{Opcode: opcode, SGList: b.sges[j : j+1]}
		if s.ahs != nil {
			b.wrs[j].RemoteQKey = UDQKey
		}
		if opcode == verbs.WRAtomicFetchAndAdd {
			b.wrs[j].CompareAdd = 1 // ATOMIC_ADD_VALUE
		}
	}
	if o.Duplex && o.Test.Verb == Send {
		b.rcnt = make([]uint64, q)
	}
	return b
}

// bwLoop is a bandwidth test's traffic, timed from its first post: it
// keeps every QP's window full, a post of PostList work requests at a
// time, and takes the completions, until all messages have completed
// (with Duplex SEND, all of the peer's have arrived too) or a timed run's
// time is up. It returns the messages completed, the time of the first
// post and that of the last completion. Its counts are local variables
// (the slices of b copied in), as the loop runs once per post. It is one
// function of about 100 lines on purpose: split into a post step and a
// completion step, each pass would make two more calls the compiler does
// not inline, inside the loop the report times.
func (s *session) bwLoop(ctx context.Context, b *bwRun, size int) (uint64, int64, int64, error) {
	o := &s.o
	q, n, timed, total := len(s.qps), uint64(o.Iters), o.Duration > 0, uint64(o.Iters*len(s.qps))
	scnt, ccnt, lastSig, toSig, cursors := b.scnt, b.ccnt, b.lastSig, b.toSig, b.cursors
	sges, wrs, rcnt, tposted, tcompleted := b.sges, b.wrs, b.rcnt, b.tposted, b.tcompleted
	pl, inline, base := len(wrs), s.inline(size), s.mr.Addr()
	clk := newClock()
	w, pr := waiter{s: s, clk: clk}, progress{s: s, clk: clk}
	deadline := int64(o.Duration) // 0 unless timed
	wctx, cancel := waitContext(ctx, o.Duration)
	defer cancel()
	var posted, completed, sigOut, got uint64 // got: messages received (Duplex SEND)
	var first, lastDone int64 = -1, 0
	bi := o.Duplex && o.Test.Verb == Send
	hold := bi && !o.Client
	for {
		stopPosting := timed && clk.now() >= deadline || hold
		if !timed && completed == total && (!bi || got == total) || timed && stopPosting && (sigOut == 0 || o.Test.Verb == Send) {
			// A timed SEND ends at its time, as perftest's: the last
			// messages may wait for receives the server, on its own
			// clock, no longer posts.
			break
		}
		progressed := false
		for i := 0; i < q && !stopPosting; i++ {
			for (timed || scnt[i] < n) && scnt[i]-ccnt[i]+uint64(pl) <= uint64(o.TxDepth) {
				r := &s.out.Remote[i]
				sig := 0
				for j := range wrs {
					off := cursors[i].next()
					sges[j] = verbs.SGE{Addr: base + uint64(i*s.buff+off), Length: uint32(size), LKey: s.mr.LKey()}
					wr := &wrs[j]
					wr.RemoteAddr, wr.RKey = r.VAddr+uint64(off), r.RKey
					if s.ahs != nil {
						wr.AH, wr.RemoteQPN = s.ahs[i], r.QPN
					}
					wr.Flags = inline
					c := scnt[i] + uint64(j) + 1 // this WR's count on QP i
					if toSig[i]--; toSig[i] == 0 || !timed && c == n {
						toSig[i] = o.CQMod
						wr.Flags |= verbs.SendSignaled
						wr.WRID = uint64(i)<<32 | (c - lastSig[i])
						lastSig[i] = c
						sig++
					}
				}
				if _, err := s.qps[i].PostSend(wrs); err != nil {
					return 0, 0, 0, fmt.Errorf("couldn't post send: QP %d, scnt=%d: %w", i, scnt[i], err)
				}
				t := clk.now()
				if first < 0 {
					first = t
				}
				posted = stamp(tposted, posted, uint64(pl), t, timed)
				sigOut += uint64(sig)
				scnt[i] += uint64(pl)
				progressed = true
			}
		}
		if k := s.cq.Poll(s.wc[:]); k > 0 {
			t := clk.now()
			for j := 0; j < k; j++ {
				wc := &s.wc[j]
				if wc.Status != verbs.WCSuccess {
					return 0, 0, 0, wcError(wc, "completions", completed)
				}
				if bi && wc.Opcode == verbs.WCRecv {
					if err := s.received(wc, rcnt, size); err != nil {
						return 0, 0, 0, err
					}
					got, hold = got+1, false
					continue
				}
				i, c := int(wc.WRID>>32), wc.WRID&0xFFFFFFFF
				if i >= q || ccnt[i]+c > scnt[i] {
					return 0, 0, 0, fmt.Errorf("completion for an unknown work request %#x", wc.WRID)
				}
				ccnt[i] += c
				sigOut--
				completed, lastDone = stamp(tcompleted, completed, c, t, timed), t
			}
			progressed = true
			pr.tick(completed, total, size)
		}
		if progressed {
			w.busy()
			continue
		}
		if err := w.idle(wctx); err != nil {
			if timed && ctx.Err() == nil {
				continue // the time is up: the loop's test ends the run
			}
			return 0, 0, 0, bwWaitError(err, bi, completed, posted, got, total)
		}
		pr.tick(completed, total, size)
	}
	return completed, first, lastDone, nil
}

// stamp records the time t of the k messages from the at-th on in ts,
// unless the run is timed (and keeps no times), and returns the count
// after them. It runs for every post and completion: it must stay small
// enough to be inlined.
func stamp(ts []int64, at, k uint64, t int64, timed bool) uint64 {
	if timed {
		return at + k
	}
	for ; k > 0; k-- {
		ts[at] = t
		at++
	}
	return at
}

// waitContext is the context a bandwidth test's waits use: a timed run's
// (d > 0) ends at its time, so that a sleep on the completion channel does
// not outlast it.
func waitContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return ctx, func() {}
}

// bwWaitError is the error of a bandwidth test whose wait for completions
// failed: how many of the messages posted had completed, and with Duplex
// SEND how many of the peer's had arrived.
func bwWaitError(err error, bi bool, completed, posted, got, total uint64) error {
	if bi {
		return fmt.Errorf("waiting for completions (%d of %d done, %d of %d messages received): %w", completed, posted, got, total, err)
	}
	return fmt.Errorf("waiting for completions (%d of %d done): %w", completed, posted, err)
}

// bwResult is the client's row of a bandwidth test (print_report_bw):
// the average over span, the nanoseconds from the first post to the last
// completion; unless timed, the peak (print_report_bw's search, skipped
// with -N) and what was verified.
func (s *session) bwResult(size int, completed uint64, span int64, b *bwRun) (Result, error) {
	o := &s.o
	r := Result{Size: size, Iters: completed}
	el := float64(span) / 1e9
	if el <= 0 {
		el = 1e-9
	}
	unit := float64(1 << 20)
	if o.Gbits {
		unit = 125e6
	}
	r.BWAvg = float64(size) * float64(completed) / el / unit
	r.MsgRate = float64(completed) / el / 1e6
	if o.Duration > 0 {
		return r, nil
	}
	if !o.NoPeak { // -N: no search, peak 0, as perftest prints it
		if best := peakDelta(b.tposted, b.tcompleted, o.CQMod); best > 0 {
			r.BWPeak = float64(size) / (best / 1e9) / unit
		}
	}
	if o.Verify && o.Test.Verb == Read {
		if err := s.checkSlots(0, size); err != nil {
			return r, err
		}
		r.Verified = true
	}
	// The server checks WRITE and SEND data before its last handshake
	// and fails it on a mismatch: a client that gets past it knows.
	r.Verified = r.Verified || o.Verify && (o.Test.Verb == Write || o.Test.Verb == Send)
	return r, nil
}

// inline is the flag a message of size bytes is posted with: SendInline
// when it fits Options.Inline (ctx_set_send_wqes: size <= inline_size).
func (s *session) inline(size int) verbs.SendFlags {
	if size <= s.o.Inline {
		return verbs.SendInline
	}
	return 0
}

// warmUpWRID marks the completions of warmUp's messages.
const warmUpWRID = 1<<64 - 1

// warmUp is perftest's perform_warm_up: on each QP in turn, TxDepth
// signaled messages of the test's (wrs[0], its opcode set) to the first
// slot, and a wait until all have completed. Nothing of it is timed or
// counted.
func (s *session) warmUp(ctx context.Context, wrs []verbs.SendWR, size int) error {
	o := &s.o
	w := waiter{s: s, clk: newClock()}
	base := s.mr.Addr()
	for i := range s.qps {
		wr := &wrs[0]
		wr.SGList[0] = verbs.SGE{Addr: base + uint64(i*s.buff), Length: uint32(size), LKey: s.mr.LKey()}
		r := &s.out.Remote[i]
		wr.RemoteAddr, wr.RKey = r.VAddr, r.RKey
		wr.Flags, wr.WRID = verbs.SendSignaled, warmUpWRID
		for k := 0; k < o.TxDepth; k++ {
			if _, err := s.qps[i].PostSend(wrs); err != nil {
				return fmt.Errorf("couldn't post send during warm up: QP %d, %d: %w", i, k, err)
			}
		}
		for left := o.TxDepth; left > 0; {
			k := s.cq.Poll(s.wc[:])
			for j := range s.wc[:k] {
				wc := &s.wc[j]
				if wc.Status != verbs.WCSuccess {
					return wcError(wc, "warm-up completions", uint64(o.TxDepth-left))
				}
				if wc.WRID != warmUpWRID {
					return fmt.Errorf("completion for an unknown work request %#x during warm up", wc.WRID)
				}
				left--
			}
			if k > 0 {
				w.busy()
			} else if err := w.idle(ctx); err != nil {
				return fmt.Errorf("waiting for warm-up completions (%d of %d done): %w", o.TxDepth-left, o.TxDepth, err)
			}
		}
	}
	return nil
}

// peakDelta is print_report_bw's search for the peak: the smallest average
// time per message over the windows from a post i to a signaled completion
// j, in nanoseconds. Long runs sample i so that the search stays near 2e7
// steps.
func peakDelta(tposted, tcompleted []int64, cqMod int) float64 {
	n := len(tposted)
	if n == 0 {
		return 0
	}
	best := float64(tcompleted[n-1] - tposted[0])
	stride := max(1, int(float64(n)*float64(n)/float64(cqMod)/2e7))
	for i := 0; i < n; i += stride {
		for j := (i+1+cqMod-1)/cqMod*cqMod - 1; j < n; j += cqMod {
			if t := float64(tcompleted[j]-tposted[i]) / float64(j-i+1); t < best {
				best = t
			}
		}
		if n%cqMod != 0 {
			j := n - 1
			if t := float64(tcompleted[j]-tposted[i]) / float64(j-i+1); t < best {
				best = t
			}
		}
	}
	return best
}

// recvSlot is the memory receive m of QP i lands in: its address, key and
// length, and with Verify the bytes the message itself lands in. Under UD
// the receive starts grhRoom bytes before the message, where the GRH goes
// (perftest's UD_ADDITION).
func (s *session) recvSlot(i int, m uint64, size int) (addr uint64, lkey, length uint32, msg []byte) {
	grh := s.grh
	if s.vbuf != nil {
		in := inc(s.maxSize+grh, s.cacheLine)
		off := (i*s.o.RxDepth + int(m%uint64(s.o.RxDepth))) * in
		return s.vmr.Addr() + uint64(off), s.vmr.LKey(), uint32(in), s.vbuf[off+grh : off+in]
	}
	off := s.rxHead + (s.o.QPs+i)*s.buff + slotOffset(m, size, s.cycle, s.cacheLine) - grh
	return s.mr.Addr() + uint64(off), s.mr.LKey(), uint32(max(size, 1) + grh), nil
}

// rposted counts the receives posted per QP for the current size.
func (s *session) postRecvs(size int) error {
	n := min(uint64(s.o.Iters), uint64(s.o.RxDepth))
	if s.o.Duration > 0 {
		n = uint64(s.o.RxDepth) // -D: no end to the messages
	}
	s.rposted = make([]uint64, len(s.qps))
	for i := range s.qps {
		for s.rposted[i] < n {
			if err := s.postRecv(i, size); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *session) postRecv(i, size int) error {
	addr, lkey, length, msg := s.recvSlot(i, s.rposted[i], size)
	clear(msg)
	s.rsge[0] = verbs.SGE{Addr: addr, Length: length, LKey: lkey}
	s.rwr[0] = verbs.RecvWR{WRID: uint64(i), SGList: s.rsge[:]}
	if _, err := s.qps[i].PostRecv(s.rwr[:]); err != nil {
		return fmt.Errorf("couldn't post receive %d on QP %d: %w", s.rposted[i], i, err)
	}
	s.rposted[i]++
	return nil
}

// received handles a receive completion of QP i: its check with Verify,
// and the next receive when more are due.
func (s *session) received(wc *verbs.WC, rcnt []uint64, size int) error {
	i := int(wc.WRID)
	if i >= len(s.qps) || wc.QPNum != s.qps[i].Num() {
		return fmt.Errorf("receive completion for an unknown work request %#x (QP %#x)", wc.WRID, wc.QPNum)
	}
	if s.vbuf != nil {
		_, _, _, msg := s.recvSlot(i, rcnt[i], size)
		want := size + s.grh // a UD receive's length counts the GRH
		if int(wc.ByteLen) != want {
			return fmt.Errorf("%w: message %d on QP %d is %d bytes, want %d", ErrVerify, rcnt[i], i, wc.ByteLen, want)
		}
		for off := 0; off < size; off++ {
			if msg[off] != pattern(off) {
				return fmt.Errorf("%w: message %d on QP %d: byte %d is %#02x, want %#02x", ErrVerify, rcnt[i], i, off, msg[off], pattern(off))
			}
		}
	}
	rcnt[i]++
	if s.o.Duration > 0 || s.rposted[i] < uint64(s.o.Iters) {
		return s.postRecv(i, size)
	}
	return nil
}

// takeMessage handles a completion the server of send_bw polled, got
// messages in: a receive, checked with Verify, and the next one posted.
func (s *session) takeMessage(wc *verbs.WC, rcnt []uint64, size int, got uint64) error {
	if wc.Status != verbs.WCSuccess {
		return wcError(wc, "messages received", got)
	}
	if wc.Opcode != verbs.WCRecv {
		return fmt.Errorf("unexpected completion %v", wc.Opcode)
	}
	return s.received(wc, rcnt, size)
}

// runSendServer is the receiving side of send_bw (run_iter_bw_server): it
// measures from the first message received to the last.
func (s *session) runSendServer(ctx context.Context, size int) (Result, error) {
	if s.o.Duration > 0 {
		return s.runSendServerTimed(ctx, size)
	}
	o := &s.o
	q := len(s.qps)
	n := uint64(o.Iters)
	total := n * uint64(q)
	tcompleted := timestamps(int(total))[:0]
	rcnt := make([]uint64, q)
	clk := newClock()
	w := waiter{s: s, clk: clk}
	pr := progress{s: s, clk: clk}
	var got uint64
	var sil *silence // UD, from the first message on
	wctx := ctx
	defer func() {
		if sil != nil {
			sil.stop()
		}
	}()
	for got < total {
		k := s.cq.Poll(s.wc[:])
		if k == 0 {
			if err := w.idle(wctx); err != nil {
				if sil != nil && sil.fell(ctx) {
					return s.sendServerResult(size, tcompleted), fmt.Errorf("%w: %d of %d messages arrived, then none for %v: the rest were lost",
						ErrUDLoss, got, total, UDQuiet)
				}
				return Result{}, fmt.Errorf("waiting for messages (%d of %d received): %w", got, total, err)
			}
			pr.tick(got, total, size)
			continue
		}
		w.busy()
		if sil != nil {
			sil.heard()
		} else if o.UD {
			sil = newSilence(ctx)
			wctx = sil.ctx
		}
		t := clk.now()
		for j := 0; j < k; j++ {
			if err := s.takeMessage(&s.wc[j], rcnt, size, got); err != nil {
				return Result{}, err
			}
			tcompleted = append(tcompleted, t)
			got++
		}
		pr.tick(got, total, size)
	}
	return s.sendServerResult(size, tcompleted), nil
}

// runSendServerTimed is the receiving side of send_bw -D: it counts the
// messages that arrive for Options.Duration from the first on (perftest's
// server starts its clock on its first message too), reposting every
// receive; the peak is not measured, as perftest's is not under -D.
func (s *session) runSendServerTimed(ctx context.Context, size int) (Result, error) {
	o := &s.o
	rcnt := make([]uint64, len(s.qps))
	clk := newClock()
	w := waiter{s: s, clk: clk}
	pr := progress{s: s, clk: clk}
	var got uint64
	var first, last int64
	wctx := ctx // from the first message on, ends with the run: a sleep on the channel ends then too
	for got == 0 || clk.now()-first < int64(o.Duration) {
		k := s.cq.Poll(s.wc[:])
		if k == 0 {
			if err := w.idle(wctx); err != nil {
				if got > 0 && ctx.Err() == nil {
					break // the end came while waiting
				}
				return Result{}, fmt.Errorf("waiting for messages (%d received): %w", got, err)
			}
			continue
		}
		w.busy()
		t := clk.now()
		if got == 0 {
			first = t
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, o.Duration)
			defer cancel()
		}
		for j := 0; j < k; j++ {
			if err := s.takeMessage(&s.wc[j], rcnt, size, got); err != nil {
				return Result{}, err
			}
			got++
		}
		last = t
		pr.tick(got, 0, size)
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
	}
	r := Result{Size: size, Iters: got}
	unit := float64(1 << 20)
	if o.Gbits {
		unit = 125e6
	}
	if el := float64(last-first) / 1e9; got > 1 && el > 0 {
		// The first message marks the start: got-1 arrived after it.
		r.BWAvg = float64(size) * float64(got-1) / el / unit
		r.MsgRate = float64(got-1) / el / 1e6
	}
	return r, nil
}

// sendServerResult is send_bw's server's row from the arrival times of the
// messages received.
func (s *session) sendServerResult(size int, tcompleted []int64) Result {
	o := &s.o
	total := uint64(len(tcompleted))
	r := Result{Size: size, Iters: total, Verified: o.Verify && total == uint64(o.Iters*len(s.qps))}
	unit := float64(1 << 20)
	if o.Gbits {
		unit = 125e6
	}
	if total > 1 {
		el := float64(tcompleted[total-1]-tcompleted[0]) / 1e9
		if el <= 0 {
			el = 1e-9
		}
		// The first message marks the start: total-1 messages arrived after it.
		r.BWAvg = float64(size) * float64(total-1) / el / unit
		r.MsgRate = float64(total-1) / el / 1e6
		// Peak: the best window of CQMod consecutive messages.
		best := math.Inf(1)
		win := min(o.CQMod, int(total-1))
		for j := win; j < int(total); j++ {
			if d := float64(tcompleted[j]-tcompleted[j-win]) / float64(win); d > 0 && d < best {
				best = d
			}
		}
		if !o.NoPeak {
			if !math.IsInf(best, 1) {
				r.BWPeak = float64(size) / (best / 1e9) / unit
			}
			// Messages come in batches, a time for each poll, and a window
			// within a batch measures nothing: the windows across batches
			// may all be slower than the whole run, itself a window (and
			// with every message in one poll there is no other).
			r.BWPeak = max(r.BWPeak, r.BWAvg)
		}
	}
	return r
}

// latResult computes perftest's latency figures from the post times of a
// ping-pong (print_report_lat): deltas between consecutive posts, divided
// by rtt (2 for SEND and WRITE, whose round trip is two messages).
func latResult(size int, tposted []int64, rtt float64) Result {
	n := len(tposted)
	r := Result{Size: size, Iters: uint64(n)}
	delta := make([]float64, n-1)
	for i := range delta {
		delta[i] = float64(tposted[i+1]-tposted[i]) / 1e3 / rtt
	}
	slices.Sort(delta)
	m := len(delta) - 2 // LAT_MEASURE_TAIL
	if m < 1 {
		m = 1
	}
	if (m-1)%2 != 0 {
		r.Typical = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		r.Typical = delta[m/2]
	}
	r.P50 = r.Typical
	var sum float64
	for _, d := range delta[:m] {
		sum += d
	}
	r.Avg = sum / float64(m)
	var v float64
	for _, d := range delta[:m] {
		v += (d - r.Avg) * (d - r.Avg)
	}
	r.Stdev = math.Sqrt(v / float64(m))
	at := func(i int) float64 { return delta[min(i, len(delta)-1)] }
	r.Min = delta[0]
	r.MaxAll = delta[len(delta)-1]
	r.Max = at(m)
	r.P99 = at(int(math.Ceil(float64(m) * 0.99)))
	r.P999 = at(int(math.Ceil(float64(m) * 0.999)))
	return r
}

// runSendLat is send_lat's ping-pong (run_iter_lat_send): the client sends
// first; each side sends once it has received.
func (s *session) runSendLat(ctx context.Context, size int) (Result, error) {
	o := &s.o
	timed := o.Duration > 0
	n, tposted := s.pingPongCount()
	wrs := s.pingPongWR(verbs.WRSend, size)
	clk := newClock()
	l := s.newSendLat(ctx, clk, size, n)
	defer l.stop()
loop:
	for l.scnt < n || l.rcnt[0] < n || l.ccnt < l.scnt {
		if l.tm.up(ctx) {
			break
		}
		if l.rcnt[0] < n && !(l.scnt < 1 && o.Client) {
			for l.rcnt[0] < l.scnt+boolInt(!o.Client) && l.rcnt[0] < n {
				if err := l.poll(); errors.Is(err, errTimeUp) {
					break loop
				} else if err != nil {
					return Result{}, fmt.Errorf("waiting for message %d: %w", l.rcnt[0]+1, err)
				}
			}
		}
		if l.scnt < n {
			for l.scnt-l.ccnt >= uint64(s.sqDepth()) {
				if err := l.poll(); errors.Is(err, errTimeUp) {
					break loop
				} else if err != nil {
					return Result{}, fmt.Errorf("waiting for a send completion: %w", err)
				}
			}
			t := clk.now()
			if timed {
				l.tm.begin(ctx, t)
			} else {
				tposted[l.scnt] = t
			}
			if _, err := s.qps[0].PostSend(wrs); err != nil {
				return Result{}, fmt.Errorf("couldn't post send: scnt=%d: %w", l.scnt, err)
			}
			l.scnt++
			continue
		}
		if err := l.poll(); err != nil {
			return Result{}, fmt.Errorf("finishing (%d of %d received, %d of %d sends completed): %w", l.rcnt[0], n, l.ccnt, l.scnt, err)
		}
	}
	if timed {
		return l.tm.result(size, l.ccnt, 2), nil
	}
	r := latResult(size, tposted, 2)
	r.Verified = o.Verify
	return r, nil
}

// pingPongCount is the number of exchanges of a SEND or WRITE ping-pong
// and the room for the time of each send. A timed run exchanges until its
// time is up (write_lat's count byte wrapping around) and keeps no times.
func (s *session) pingPongCount() (uint64, []int64) {
	if s.o.Duration > 0 {
		return math.MaxUint64 >> 1, nil
	}
	return uint64(s.o.Iters), timestamps(s.o.Iters)
}

// pingPongWR is the work request a SEND or WRITE ping-pong posts for each
// of its messages: size bytes from the start of the buffer, signaled, and
// inline when they fit; a WRITE's aimed at the peer's first slot, a UD
// SEND's at the peer's QP through its AH.
func (s *session) pingPongWR(op verbs.WROpcode, size int) []verbs.SendWR {
	sges := []verbs.SGE{{Addr: s.mr.Addr(), Length: uint32(size), LKey: s.mr.LKey()}}
	wrs := []verbs.SendWR{{Opcode: op, Flags: verbs.SendSignaled | s.inline(size), SGList: sges}}
	r0 := &s.out.Remote[0]
	if op == verbs.WRRDMAWrite {
		wrs[0].RemoteAddr, wrs[0].RKey = r0.VAddr, r0.RKey
	}
	if s.ahs != nil {
		wrs[0].AH, wrs[0].RemoteQPN, wrs[0].RemoteQKey = s.ahs[0], r0.QPN, UDQKey
	}
	return wrs
}

// sendLat is what send_lat's ping-pong (runSendLat) counts and its waits
// (poll) answer to: the n exchanges of size bytes; the messages sent,
// received and whose sends completed; the run's context, and the one a
// wait uses (under UD the watch's for loss, sil, which ends it after
// UDQuiet without a message).
type sendLat struct {
	s          *session
	size       int
	n          uint64
	scnt, ccnt uint64
	rcnt       []uint64 // the one QP's, as session.received counts them
	w          waiter
	pr         progress
	tm         timer
	sil        *silence
	ctx, wctx  context.Context
}

// newSendLat prepares send_lat's ping-pong of n exchanges of size bytes,
// on clk; under UD it starts the watch for loss, which stop ends.
func (s *session) newSendLat(ctx context.Context, clk clock, size int, n uint64) sendLat {
	l := sendLat{s: s, size: size, n: n, rcnt: make([]uint64, 1), w: waiter{s: s, clk: clk},
		pr: progress{s: s, clk: clk}, ctx: ctx, wctx: ctx}
	if s.o.UD {
		l.sil = newSilence(ctx)
		l.wctx = l.sil.ctx
	}
	l.tm = timer{o: &s.o, clk: clk}
	return l
}

// stop ends the timed run's clock and the UD watch.
func (l *sendLat) stop() {
	l.tm.stop()
	if l.sil != nil {
		l.sil.stop()
	}
}

// poll takes the completions there are, messages received (their receives
// reposted) and sends completed, or waits when there are none. A UD test
// that hears nothing for UDQuiet fails with ErrUDLoss; a wait that a timed
// run's time ends returns errTimeUp.
func (l *sendLat) poll() error {
	s := l.s
	k := s.cq.Poll(s.wc[:])
	for j := 0; j < k; j++ {
		wc := &s.wc[j]
		if wc.Status != verbs.WCSuccess {
			return wcError(wc, "messages received", l.rcnt[0])
		}
		if wc.Opcode == verbs.WCRecv {
			if err := s.received(wc, l.rcnt, l.size); err != nil {
				return err
			}
		} else {
			l.ccnt++
		}
	}
	if k > 0 {
		l.w.busy()
		l.pr.tick(l.rcnt[0], l.n, l.size)
		if l.sil != nil {
			l.sil.heard()
		}
		return nil
	}
	err := l.w.idle(l.tm.ctx(l.wctx))
	if err != nil && l.sil != nil && l.sil.fell(l.ctx) {
		return fmt.Errorf("%w: nothing for %v after %d of %d messages received and %d sent", ErrUDLoss, UDQuiet, l.rcnt[0], l.n, l.scnt)
	}
	if err != nil && l.tm.up(l.ctx) {
		return errTimeUp
	}
	return err
}

// errTimeUp ends a timed ping-pong's wait: its time is up.
var errTimeUp = errors.New("bench: the time is up")

// timer is a timed ping-pong's clock (-D on send_lat and write_lat): each
// side's runs from its first message sent (the server's from its answer to
// the client's first), as perftest's server starts its own at its first
// message received; a side whose time is up stops, the other stops on its
// own time, a wait for a message that will not come ending with it.
type timer struct {
	o      *Options
	clk    clock
	start  int64 // first send; 0: not yet
	cancel context.CancelFunc
	wctx   context.Context // ends with the time, from the start on
}

// begin starts the time at t, the first send.
func (tm *timer) begin(ctx context.Context, t int64) {
	if tm.start != 0 {
		return
	}
	tm.start = t
	tm.wctx, tm.cancel = context.WithTimeout(ctx, tm.o.Duration)
}

// ctx is the context a wait uses: parent until the time runs, then one
// that ends with it too (the run's context's child: a timed run is never
// UD, whose watch gives the other parent).
func (tm *timer) ctx(parent context.Context) context.Context {
	if tm.wctx != nil {
		return tm.wctx
	}
	return parent
}

// up reports whether the time ran out (and ctx did not end).
func (tm *timer) up(ctx context.Context) bool {
	return tm.start != 0 && ctx.Err() == nil && tm.clk.now()-tm.start >= int64(tm.o.Duration)
}

func (tm *timer) stop() {
	if tm.cancel != nil {
		tm.cancel()
	}
}

// result is perftest's timed latency row (print_report_lat_duration):
// the average of the round trips (rtt messages each) in the time, and the
// exchanges a second.
func (tm *timer) result(size int, iters uint64, rtt float64) Result {
	r := Result{Size: size, Iters: iters}
	if el := float64(tm.clk.now()-tm.start) / 1e3; iters > 0 && el > 0 { // µs
		r.Avg = el / rtt / float64(iters)
		r.TPS = float64(iters) / (el / 1e6)
	}
	return r
}

func boolInt(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// sqDepth is how many sends a latency test keeps outstanding: its QPs are
// created with room for a few more than -t, since the ACK of a message may
// come after the peer's answer to it.
func (s *session) sqDepth() int { return s.sq }

// runWriteLat is write_lat's ping-pong (run_iter_lat_write): each side
// writes size bytes whose last byte is its iteration count into the peer's
// slot and waits for the peer's count to appear in its own; the server
// writes first.
func (s *session) runWriteLat(ctx context.Context, size int) (Result, error) {
	o := &s.o
	n, tposted := s.pingPongCount()
	clk := newClock()
	l := writeLat{s: s, size: size, n: n, wrs: s.pingPongWR(verbs.WRRDMAWrite, size), tposted: tposted,
		pr: progress{s: s, clk: clk}, tm: timer{o: o, clk: clk}}
	defer l.tm.stop()
	if err := l.exchange(ctx); err != nil {
		return Result{}, err
	}
	if o.Duration > 0 {
		return l.tm.result(size, l.ccnt, 2), nil
	}
	r := latResult(size, tposted, 2)
	if o.Verify {
		if err := s.checkPeerWrite(size); err != nil {
			return r, err
		}
		r.Verified = true
	}
	return r, nil
}

// writeLat is what write_lat's ping-pong (runWriteLat) posts and counts: n
// exchanges of size bytes, each a post of wrs, the time of each in tposted
// (untimed), and the completions of this side's writes.
type writeLat struct {
	s       *session
	size    int
	n       uint64
	wrs     []verbs.SendWR
	tposted []int64
	ccnt    uint64
	pr      progress
	tm      timer
}

// exchange runs the ping-pong: each exchange waits for the peer's count
// to appear (the server's first excepted), then writes its own, until n
// have been made or a timed run's time is up. Its counts of writes posted
// and received are local variables, as the loop runs once per message.
func (l *writeLat) exchange(ctx context.Context) error {
	s, o := l.s, &l.s.o
	n, size, timed, clk, tposted := l.n, l.size, o.Duration > 0, l.tm.clk, l.tposted
	postIdx, pollIdx := size-1, o.QPs*s.buff+size-1
	var scnt, rcnt uint64
loop:
	for scnt < n || l.ccnt < n || rcnt < n {
		if l.tm.up(ctx) {
			break
		}
		if rcnt < n && !(scnt < 1 && !o.Client) {
			rcnt++
			var since int64
			for spins := 0; loadByte(s.buf, pollIdx) != byte(rcnt); spins++ {
				if spins%64 == 63 {
					if err := l.pollCQ(); err != nil {
						return err
					}
					if err := ctx.Err(); err != nil {
						return fmt.Errorf("waiting for write %d: %w", rcnt, err)
					}
					if l.tm.up(ctx) {
						break loop
					}
					if napTime(&since, clk.now(), o.Busy) {
						time.Sleep(time.Microsecond)
						continue
					}
				}
				runtime.Gosched()
			}
		}
		if scnt < n {
			for scnt-l.ccnt >= uint64(s.sqDepth()) {
				if err := l.pollCQ(); err != nil {
					return err
				}
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("waiting for a write completion: %w", err)
				}
				if l.tm.up(ctx) {
					break loop
				}
				runtime.Gosched()
			}
			if t := clk.now(); timed {
				l.tm.begin(ctx, t)
			} else {
				tposted[scnt] = t
			}
			scnt++
			storeByte(s.buf, postIdx, byte(scnt))
			if _, err := s.qps[0].PostSend(l.wrs); err != nil {
				return fmt.Errorf("couldn't post write: scnt=%d: %w", scnt, err)
			}
			if !timed {
				l.pr.tick(scnt, n, size)
			}
		}
		if err := l.pollCQ(); err != nil {
			return err
		}
		if scnt == n && rcnt == n && l.ccnt < n {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("waiting for the last write completions: %w", err)
			}
			runtime.Gosched()
		}
	}
	return nil
}

// napTime reports whether write_lat's wait for the peer's count, looking
// again at now, should nap a microsecond rather than yield. since is the
// time of its first look; 0 before it, and this look then sets it. The
// wait spins for 50 µs, then naps between looks unless busy: a loop that
// never blocks keeps a processor from the device's driver and the network
// poller, and a late write then waits for the runtime's 10 ms safety net.
// It runs in the wait's loop: it must stay small enough to be inlined.
func napTime(since *int64, now int64, busy bool) bool {
	if *since == 0 {
		*since = now
		return false
	}
	return !busy && now-*since > int64(50*time.Microsecond)
}

// pollCQ counts the completions of this side's writes.
func (l *writeLat) pollCQ() error {
	s := l.s
	k := s.cq.Poll(s.wc[:])
	for j := 0; j < k; j++ {
		if s.wc[j].Status != verbs.WCSuccess {
			return wcError(&s.wc[j], "writes completed", l.ccnt)
		}
		l.ccnt++
	}
	return nil
}

// checkPeerWrite verifies what the peer of write_lat wrote into this
// side's slot, but for its count in the last byte.
func (s *session) checkPeerWrite(size int) error {
	s.syncDevice()
	slot := s.buf[s.o.QPs*s.buff:]
	for off := 0; off < size-1; off++ {
		if slot[off] != pattern(off) {
			return fmt.Errorf("%w: byte %d written by the peer is %#02x, want %#02x", ErrVerify, off, slot[off], pattern(off))
		}
	}
	return nil
}

// runReadAtomicLat is read_lat's and atomic_lat's loop (run_iter_lat): one
// request at a time, each waited for; the round trip is the latency.
func (s *session) runReadAtomicLat(ctx context.Context, size int) (Result, error) {
	o := &s.o
	n := uint64(o.Iters)
	timed := o.Duration > 0
	var tposted []int64
	if !timed {
		tposted = timestamps(int(n))
	}
	opcode := verbs.WRRDMARead
	if o.Test.Verb == Atomic {
		opcode = o.Atomic
	}
	var sges [1]verbs.SGE
	var wrs [1]verbs.SendWR
	sges[0] = verbs.SGE{Addr: s.mr.Addr(), Length: uint32(size), LKey: s.mr.LKey()}
	r0 := &s.out.Remote[0]
	wrs[0] = verbs.SendWR{Opcode: opcode, Flags: verbs.SendSignaled, SGList: sges[:], RemoteAddr: r0.VAddr, RKey: r0.RKey}
	if opcode == verbs.WRAtomicFetchAndAdd {
		wrs[0].CompareAdd = 1
	}
	clk := newClock()
	w := waiter{s: s, clk: clk}
	pr := progress{s: s, clk: clk}
	var scnt uint64
	for timed && clk.now() < int64(o.Duration) || !timed && scnt < n {
		t := clk.now()
		if !timed {
			tposted[scnt] = t
		}
		if _, err := s.qps[0].PostSend(wrs[:]); err != nil {
			return Result{}, fmt.Errorf("couldn't post: scnt=%d: %w", scnt, err)
		}
		scnt++
		for {
			k := s.cq.Poll(s.wc[:1])
			if k == 1 {
				if s.wc[0].Status != verbs.WCSuccess {
					return Result{}, wcError(&s.wc[0], "completed", scnt-1)
				}
				w.busy()
				break
			}
			if err := w.idle(ctx); err != nil {
				return Result{}, fmt.Errorf("waiting for completion %d: %w", scnt, err)
			}
		}
		pr.tick(scnt, n, size)
	}
	if timed {
		el := float64(clk.now()) / 1e3
		return Result{Size: size, Iters: scnt, Avg: el / float64(scnt), TPS: float64(scnt) / (el / 1e6)}, nil
	}
	return latResult(size, tposted, 1), nil
}

// quieter is a device that can wait until its link is quiet (the soft
// device).
type quieter interface {
	WaitQuiet(quiet, limit time.Duration) bool
}

// drain waits until the device has been quiet for 20 ms (at most a
// second), so that the last ACKs leave before the QPs are destroyed.
func (s *session) drain() {
	q, ok := s.vctx.Device().(quieter)
	if !ok {
		time.Sleep(50 * time.Millisecond)
		return
	}
	q.WaitQuiet(20*time.Millisecond, time.Second)
}
