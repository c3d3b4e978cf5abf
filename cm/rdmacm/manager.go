package rdmacm

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/cm/ib"
	"github.com/goroce/goroce/verbs"
)

// Device is what the connection manager needs of a device: its address,
// QP 1 (the GSI) and a place to live as long as the device. The soft
// provider's *soft.Device is one. (On the ibverbs provider the kernel's
// rdma_cm owns QP 1: connecting there would go through librdmacm, which
// this package does not do.)
type Device interface {
	verbs.Device
	Addr() netip.Addr
	SetGSIHandler(func(mad []byte, from netip.Addr))
	SendMAD(to netip.Addr, mad []byte) error
	Attach(key any, mk func() any) any
}

// Errors of connections.
var (
	// ErrRefused matches a connection the peer rejected (any REJ: no
	// listener, the application refused, stale); a *RejectError tells
	// the reason and carries the private data.
	ErrRefused = errors.New("rdmacm: connection refused")
	// ErrUnreachable matches a connection whose REQ was never answered.
	ErrUnreachable = errors.New("rdmacm: peer unreachable")
	// ErrTimedOut matches a connection attempt that ran out of time: an
	// unanswered REQ or REP, or a REJ with reason 4 (timeout).
	ErrTimedOut = errors.New("rdmacm: timed out")
	// ErrClosed matches operations on a closed listener, connection or
	// manager.
	ErrClosed = errors.New("rdmacm: closed")
	// ErrDisconnected matches a connection the peer disconnected.
	ErrDisconnected = errors.New("rdmacm: disconnected by peer")
)

// RejectError is a REJ the peer sent.
type RejectError struct {
	Reason      uint16
	PrivateData []byte // the REJ's private data (148 bytes, as sent)
}

var rejectNames = map[uint16]string{ib.RejNoQP: "no QP", ib.RejNoResources: "no resources", ib.RejTimeout: "timeout",
	ib.RejUnsupported: "unsupported request", ib.RejInvalidCommID: "invalid comm ID",
	ib.RejInvalidServiceID: "no listener (invalid service ID)", ib.RejInvalidTransportType: "invalid transport type",
	ib.RejStaleConn: "stale connection", ib.RejInvalidGID: "invalid GID", ib.RejInvalidMTU: "invalid MTU",
	ib.RejInsufficientRespRes: "insufficient responder resources", ib.RejConsumer: "rejected by the application",
	ib.RejInvalidRNRRetry: "invalid RNR retry", ib.RejDuplicateLocalCommID: "duplicate local comm ID",
	ib.RejInvalidClassVersion: "invalid class version"}

func (e *RejectError) Error() string {
	if s, ok := rejectNames[e.Reason]; ok {
		return fmt.Sprintf("rdmacm: connection refused: REJ reason %d (%s)", e.Reason, s)
	}
	return fmt.Sprintf("rdmacm: connection refused: REJ reason %d", e.Reason)
}

// Is makes a RejectError match ErrRefused, and ErrTimedOut for reason 4.
func (e *RejectError) Is(target error) bool {
	return target == ErrRefused || (target == ErrTimedOut && e.Reason == ib.RejTimeout)
}

// ManagerStats counts a manager's work.
type ManagerStats struct {
	Machine Stats
	// Overruns counts MADs dropped because the manager fell behind.
	Overruns uint64
	// Conns is how many connections the manager tracks now (time-wait
	// included).
	Conns int
}

type madIn struct {
	mad  [ib.MADSize]byte
	from netip.Addr
}

// Manager is the connection manager of one device: it owns the device's
// QP 1 and runs the state machine on its own goroutine. Listen and Dial
// attach one with default settings on first use; Attach configures it.
type Manager struct {
	dev   Device
	start time.Time

	mu        sync.Mutex
	m         *Machine
	conns     map[uint32]*Conn
	pending   map[uint32]*Request
	listeners map[uint32]*Listener
	probes    map[uint32]*pathProbe // dials whose REQs leave by a probe of their own
	closed    bool
	overruns  atomic.Uint64

	in    chan madIn
	wake  chan struct{}
	done  chan struct{}
	ended chan struct{}
}

type managerKey struct{}

// Attach returns the device's connection manager, creating it with cfg
// (Local and GUID come from the device; PathMTU defaults to the port's
// active MTU) on first use. A manager that exists already is returned as
// it is.
func Attach(dev Device, cfg MachineConfig) *Manager {
	return dev.Attach(managerKey{}, func() any { return newManager(dev, cfg) }).(*Manager)
}

// DefaultQuickRetry is a Manager's MachineConfig.QuickRetry when none is
// given: a REQ is resent after 50 ms, then every 100 ms, so that a peer
// that opens its device or listener a moment after the dial is found
// within about twice that moment.
const DefaultQuickRetry = int64(50 * time.Millisecond)

func newManager(dev Device, cfg MachineConfig) *Manager {
	if cfg.QuickRetry == 0 {
		cfg.QuickRetry = DefaultQuickRetry
	}
	cfg.Local = dev.Addr().Unmap()
	cfg.GUID = dev.GUID()
	if cfg.PathMTU == 0 {
		if ctx, err := dev.Open(); err == nil {
			if pa, err := ctx.QueryPort(1); err == nil {
				cfg.PathMTU = uint8(pa.ActiveMTU)
			}
			ctx.Close()
		}
	}
	mg := &Manager{dev: dev, start: time.Now(), m: NewMachine(cfg), conns: map[uint32]*Conn{},
		pending: map[uint32]*Request{}, listeners: map[uint32]*Listener{}, probes: map[uint32]*pathProbe{},
		in: make(chan madIn, 1024), wake: make(chan struct{}, 1), done: make(chan struct{}), ended: make(chan struct{})}
	dev.SetGSIHandler(mg.receive)
	go mg.run()
	return mg
}

// receive runs on the device's driver: copy and hand on, never block.
func (mg *Manager) receive(mad []byte, from netip.Addr) {
	var in madIn
	copy(in.mad[:], mad)
	in.from = from
	select {
	case mg.in <- in:
	default:
		mg.overruns.Add(1) // never mu: the driver holds the device while it calls
	}
}

func (mg *Manager) now() int64 { return int64(time.Since(mg.start)) }

// Stats returns the manager's counters.
func (mg *Manager) Stats() ManagerStats {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	return ManagerStats{Machine: mg.m.Stats(), Overruns: mg.overruns.Load(), Conns: mg.m.Conns()}
}

// Close stops the manager: listeners close, waiting calls fail with
// ErrClosed and QP 1 is let go. The device closes it when it closes.
func (mg *Manager) Close() error {
	mg.mu.Lock()
	if mg.closed {
		mg.mu.Unlock()
		return nil
	}
	mg.closed = true
	for _, l := range mg.listeners {
		l.closeLocked()
	}
	for _, c := range mg.conns {
		c.finish(ErrClosed)
	}
	mg.mu.Unlock()
	close(mg.done)
	<-mg.ended
	mg.dev.SetGSIHandler(nil)
	return nil
}

func (mg *Manager) run() {
	defer close(mg.ended)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		mg.mu.Lock()
		d := mg.m.NextDeadline()
		mg.mu.Unlock()
		wait := time.Hour
		if d != 0 {
			wait = max(time.Duration(d-mg.now()), 0)
		}
		timer.Reset(wait)
		select {
		case <-mg.done:
			return
		case in := <-mg.in:
			mg.mu.Lock()
			mg.m.HandleMAD(mg.now(), in.mad[:], in.from)
			for n := len(mg.in); n > 0; n-- { // what else has come, in the same round
				in = <-mg.in
				mg.m.HandleMAD(mg.now(), in.mad[:], in.from)
			}
			mg.dispatchLocked()
			mg.mu.Unlock()
		case <-mg.wake:
		case <-timer.C:
			mg.mu.Lock()
			mg.m.Tick(mg.now())
			mg.dispatchLocked()
			mg.mu.Unlock()
		}
	}
}

// poke makes the manager goroutine recompute its deadline.
func (mg *Manager) poke() {
	select {
	case mg.wake <- struct{}{}:
	default:
	}
}

// dispatchLocked acts on the machine's events. Called with mu held.
func (mg *Manager) dispatchLocked() {
	for ev, ok := mg.m.Next(); ok; ev, ok = mg.m.Next() {
		switch ev.Kind {
		case EvSend:
			if p := mg.probes[ev.ID]; p != nil && isREQ(ev.MAD[:]) {
				p.send(ev.MAD[:]) // what becomes of it comes back to the dial
				continue
			}
			_ = mg.dev.SendMAD(ev.To, ev.MAD[:]) // a lost MAD is resent or answered again
		case EvRequest:
			l := mg.listeners[ev.Listener]
			if l == nil {
				_ = mg.m.Reject(mg.now(), ev.ID, ib.RejConsumer, nil)
				continue
			}
			r := &Request{mg: mg, id: ev.ID, req: ev.REQ, hdr: ev.Header, from: ev.From,
				PrivateData: ev.PrivateData, events: make(chan Event, 4)}
			select {
			case l.backlog <- r:
				mg.pending[ev.ID] = r
			default: // backlog full
				_ = mg.m.Reject(mg.now(), ev.ID, ib.RejConsumer, nil)
			}
		default:
			if c := mg.conns[ev.ID]; c != nil {
				c.event(ev)
			} else if r := mg.pending[ev.ID]; r != nil {
				if ev.Kind == EvTimeout || ev.Kind == EvRejected {
					delete(mg.pending, ev.ID)
				}
				select {
				case r.events <- ev:
				default:
				}
			}
		}
	}
}

// call runs f on the machine under the lock and acts on what it did.
func (mg *Manager) call(f func(now int64) error) error {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	if mg.closed {
		return ErrClosed
	}
	err := f(mg.now())
	mg.dispatchLocked()
	mg.poke()
	return err
}

func isREQ(mad []byte) bool {
	h, err := ib.ParseMADHeader(mad)
	return err == nil && h.AttrID == ib.AttrREQ
}
