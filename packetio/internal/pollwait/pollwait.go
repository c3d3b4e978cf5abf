// Package pollwait is the wait in Go's netpoller that the packet paths
// reading a file descriptor the netpoller watches (packetio/afxdp's socket,
// packetio/udp's epoll instance, Epoll) share: Receive's wait with a
// deadline, and Wake, which ends that wait at once from another goroutine
// by setting a read deadline in the past.
//
// Wake sets a pending flag, then, if Receive is parked in the netpoller,
// the past deadline; the read callback checks the flag after Receive is
// parked (Stop), so either the callback sees the wake or the deadline ends
// the wait.
package pollwait

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// Waiter waits for one file in the netpoller. Init sets it up; Begin, Wait,
// Stop and Consume are called by the goroutine that calls Receive, Wake by
// any.
type Waiter struct {
	f           *os.File
	raw         syscall.RawConn
	closed      *atomic.Bool   // the Conn's: Wake does nothing once set
	wakes       *atomic.Uint64 // the Conn's count of Wakes consumed
	deadline    time.Time      // the read deadline last set on f, valid when deadlineSet
	deadlineSet bool
	poll        bool        // this Receive does not wait
	waking      atomic.Bool // a Wake is pending
	parked      atomic.Bool // Receive may be waiting in the netpoller
}

// Init sets the file w waits for, its raw connection, the Conn's closed flag
// and its counter of Wakes.
func (w *Waiter) Init(f *os.File, raw syscall.RawConn, closed *atomic.Bool, wakes *atomic.Uint64) {
	w.f, w.raw, w.closed, w.wakes = f, raw, closed, wakes
}

// pastUnread: a deadline before this Unix time (1971) is past without
// reading the clock (packetio.PollDeadline).
const pastUnread = 365 * 24 * 3600

// Begin starts a Receive with deadline and returns the deadline to Wait
// with: a read deadline that has passed makes the poller fail without
// trying to read, so a deadline already past means no deadline, but no
// wait either (Stop reports true).
func (w *Waiter) Begin(deadline time.Time) time.Time {
	w.poll = false
	if !deadline.IsZero() && (deadline.Unix() < pastUnread || !time.Now().Before(deadline)) {
		w.poll, deadline = true, time.Time{}
	}
	return deadline
}

// Wait waits, with the deadline Begin returned, for read (the netpoller
// callback) to report true, and reports whether it did: false when Receive
// returns no packets (a Wake came, or the deadline passed). The past
// deadline of a Wake already taken only makes it wait again; read has then
// found nothing and changed nothing. Errors are the file's.
func (w *Waiter) Wait(deadline time.Time, read func(fd uintptr) bool) (bool, error) {
	for {
		if !w.deadlineSet || !w.deadline.Equal(deadline) {
			if err := w.f.SetReadDeadline(deadline); err != nil {
				return false, err
			}
			w.deadline, w.deadlineSet = deadline, true
		}
		w.parked.Store(true)
		err := w.raw.Read(read)
		w.parked.Store(false)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return false, err
		}
		w.deadlineSet = false // a Wake may have replaced it
		if w.waking.Swap(false) {
			w.wakes.Add(1)
			return false, nil
		}
		if w.poll || (!deadline.IsZero() && !time.Now().Before(deadline)) {
			return false, nil
		}
	}
}

// Stop reports, for a read callback that found nothing, whether Receive
// should stop waiting all the same: it only polls, or a Wake is pending.
func (w *Waiter) Stop() bool { return w.poll || w.waking.Load() }

// Consume takes a Wake pending when Receive returns packets: it is counted,
// and the read deadline set again by the next Wait.
func (w *Waiter) Consume() {
	if w.waking.Swap(false) {
		w.deadlineSet = false
		w.wakes.Add(1)
	}
}

// Wake makes a Receive waiting in Wait return promptly, or the next one
// return at once.
func (w *Waiter) Wake() {
	if w.waking.Swap(true) {
		return // already pending
	}
	if w.parked.Load() && !w.closed.Load() {
		w.f.SetReadDeadline(time.Unix(1, 0)) // passed: ends the wait at once
	}
}
