package soft

import (
	"sync/atomic"
	"time"
)

// The driver stands aside while an application only polls, as Linux's
// preferred busy polling does (SO_PREFER_BUSY_POLL with
// napi_defer_hard_irqs, Linux 5.11): a thread that busy-polls a queue does
// the device's work itself, and the interrupt-driven path stays off until
// it has not polled for a while (gro_flush_timeout), when the kernel takes
// the device back.
//
// Here a Poll that finds its CQ empty drives the packet path inline
// (pollInline: it receives what arrived, and the engine's input sends
// what that allows), and records when it did (pollAt). A driver that
// finds an application polling (polled) lets go of the packet path and
// waits without it (standBy) until a post needs a round (ring) or no Poll
// came for pollGrace. Otherwise the driver and the polling application
// are two goroutines spinning on one packet path, and each round of one
// holds it from the other: one RC QP WRITing 256 MiB as one WRITE, whose
// application found its CQ empty for the whole transfer, ran at 300-700
// MB/s between two namespaces on a machine of two processors, against
// 1.2-1.4 GB/s as 4,096 WRITEs of 64 KiB (and 0.9-1.6 GB/s for both with
// an application that slept 20 µs between empty polls); standing by, the
// one WRITE runs at 1.4-1.6 GB/s.
//
// The polling application runs the engine's timers meanwhile (runDue):
// each inline receive looks whether the engine's next timer (dueAt, which
// whoever last computed it under mu stored) is due, runs it and sends
// what it released, as the driver's round would. A driver that woke for
// each timer instead (a held ACK due 5 µs after the SEND it acknowledges,
// twice a round trip of a ping-pong) took the packet path for a round each
// time, and a round whose thread the kernel preempted held it from the
// application for milliseconds: a 64-byte ping-pong's p99.9 went from
// 0.1-0.2 ms to 3.5 ms.
//
// The driver keeps the path, as before, for postHold after the
// application posted (notePosts) and for lossHold after the engine showed
// a sign of loss or congestion (noteLoss). An application that posts
// while it polls has work of its own, and the driver receiving beside it
// on another processor is worth more than the processor it takes:
// `goroce bench write_bw` at 4 KiB ran at 0.90x standing by (medians of 6
// interleaved rounds). And under congestion an application's loop is a
// coarse clock: with the senders' pacing and the receiver's ACKs timed by
// its polls, the incast through a 500 Mbit/s bottleneck that drops fell to
// 0.64-0.71x the bottleneck's rate, from 0.93x.

// standbyState is a device's state of standing by (Device.sb). Every
// empty Poll writes pollAt: it has a cache line of its own, so that the
// driver's and the posters' reads of the fields around it do not miss on
// each poll.
type standbyState struct {
	_           [64]byte
	pollAt      atomic.Int64 // engine time of the last Poll that found its CQ empty
	_           [56]byte
	standby     atomic.Bool   // the driver stands by, not holding io
	stoodBy     atomic.Uint64 // times it did
	inlineTicks atomic.Uint64 // times a polling application ran the engine's due timers (runDue)
	dueAt       atomic.Int64  // the engine's next timer (0: none) as standBy or runDue last read it, with mu held (noteDue)
	dueSeen     atomic.Int64  // when runDue last read the next timer
	lossAt      atomic.Int64  // when the engine last showed a sign of loss (0: never; noteLoss)
	postAt      atomic.Int64  // when the driver last saw posts (0: never; notePosts)
	kicks       atomic.Uint64 // calls of kickQP, and pushes that sent
	kicksSeen   uint64        // kicks when the driver last looked (notePosts); the driver's own
	signs       uint64        // the engine's LossSigns when noteLoss last looked; mu
	rings       atomic.Uint64 // calls of ring: work that needs a driver's round
	nudge       chan struct{} // wakes a driver standing by; holds one
}

// pollGrace is how long after an empty Poll the driver still stands by.
const pollGrace = 50 * time.Microsecond

// polled reports whether, at now, an application's Poll found its CQ
// empty within the last pollGrace, and the driver saw no post for postHold and the
// engine no sign of loss for lossHold: the application may then drive the
// packet path alone.
func (d *Device) polled(now int64) bool {
	at, loss, post := d.sb.pollAt.Load(), d.sb.lossAt.Load(), d.sb.postAt.Load()
	return at != 0 && now-at < int64(pollGrace) && (loss == 0 || now-loss >= int64(lossHold)) && (post == 0 || now-post >= int64(postHold))
}

// postHold: the driver keeps the packet path for this long after it saw
// the application post (notePosts).
const postHold = time.Millisecond

// notePosts records when the driver saw posts: kicks moved since it
// last looked. A post also wakes a driver standing by (kickQP). Called by
// the driver.
func (d *Device) notePosts() {
	if k := d.sb.kicks.Load(); k != d.sb.kicksSeen {
		d.sb.kicksSeen = k
		d.sb.postAt.Store(max(d.now(), 1))
	}
}

// lossHold: the driver keeps the packet path for this long after the
// engine showed a sign of loss or congestion (noteLoss).
const lossHold = 100 * time.Millisecond

// noteLoss records when the engine last showed a sign of loss or
// congestion (engine.Engine.LossSigns), and reports whether it did since
// the last look. Called with mu held.
func (d *Device) noteLoss(now int64) bool {
	n := d.eng.LossSigns()
	if n == d.sb.signs {
		return false
	}
	d.sb.signs = n
	d.sb.lossAt.Store(max(now, 1))
	return true
}

// standBy waits without the packet path while an application polls, until
// the device closes, a ring asks for a round (rings moved from seenRings),
// or no Poll came for pollGrace; the application runs the timers meanwhile
// (runDue), from the next one the engine has, read here. Called by the
// driver, holding nothing.
func (d *Device) standBy(seenRings uint64) {
	d.sb.stoodBy.Add(1)
	d.sb.standby.Store(true)
	defer d.sb.standby.Store(false)
	// After standby is set: an inline input that saw it clear had its
	// timers armed before this reads them.
	d.mu.Lock()
	d.noteDue()
	d.mu.Unlock()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for !d.closed.Load() && d.sb.rings.Load() == seenRings {
		if d.sb.kicks.Load() != d.sb.kicksSeen {
			d.notePosts()
			return
		}
		wait := time.Duration(d.sb.pollAt.Load() + int64(pollGrace) - d.now())
		if wait <= 0 {
			return
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-d.sb.nudge:
			return
		case <-d.gone:
			return
		case <-timer.C:
		}
	}
}

// runDue follows an inline receive (input: it took packets in) while the
// driver stands by: the engine's timers that are due run, what they
// release is sent, and the next one is read again after an input, which
// may have armed one, and at least every dueRefresh, which bounds how late
// a timer armed otherwise runs (a post's ends the standing by anyway).
// Called with io held.
func (d *Device) runDue(input bool) {
	if !d.sb.standby.Load() {
		return
	}
	now := d.now()
	due := d.sb.dueAt.Load()
	expired := due != 0 && now >= due
	if !expired && !input && now-d.sb.dueSeen.Load() < int64(dueRefresh) {
		return
	}
	d.lockTx()
	d.mu.Lock()
	if expired {
		d.eng.Tick(now)
		d.flush(now)
		d.sb.inlineTicks.Add(1)
	}
	d.noteDue()
	d.sb.dueSeen.Store(now)
	loss := d.noteLoss(now)
	d.mu.Unlock()
	d.unlockTx()
	if loss {
		d.wake() // the driver takes the packet path back
	}
}

// dueRefresh: runDue reads the engine's next timer at least this often.
const dueRefresh = 20 * time.Microsecond

// noteDue reads the engine's next timer into dueAt. Called with mu held.
func (d *Device) noteDue() { d.sb.dueAt.Store(d.eng.NextDeadline()) }
