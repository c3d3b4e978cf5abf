package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/goroce/goroce/cm/ib"
	"github.com/goroce/goroce/verbs"
)

// Port spaces of rdma_cm: TCP (RC connections), the one rping and perftest use.
const PortSpaceTCP = ib.PortSpaceTCP

// DialOptions configure Dial. Zero fields take the defaults.
type DialOptions struct {
	// ResponderResources is how many READs and atomics this side answers
	// at once, InitiatorDepth how many it issues (rdma_conn_param's; both
	// default 1, as rping asks; negative asks 0).
	ResponderResources, InitiatorDepth int
	// RetryCount and RNRRetryCount are the QPs' transport and RNR retry
	// counts (default 7 each; 7 RNR retries is "forever").
	RetryCount, RNRRetryCount int
	// PrivateData goes to the listener with the request (at most 56 bytes).
	PrivateData []byte
	// TrafficClass is the IP ToS of the connection.
	TrafficClass uint8
	// RetryRefused, when above 0, is how long Dial keeps asking (its REQ
	// again, RefusedResend after each refusal) while the peer refuses for
	// want of a listener (REJ 8), for a client that may start before its
	// server listens. 0: a refusal ends the dial, unless the peer was
	// unreachable a moment before (see RefusedGrace).
	RetryRefused time.Duration
	// ACKTimeout, when not 0, is this side's QP's local ACK timeout code
	// (4.096 µs x 2^ACKTimeout), as rdma_set_option's
	// RDMA_OPTION_ID_ACK_TIMEOUT sets it; default: the one the REQ
	// carries (19 as Linux's, about 2 s).
	ACKTimeout uint8
}

// AcceptOptions configure Request.Accept. Zero fields take the defaults.
type AcceptOptions struct {
	// ResponderResources and InitiatorDepth as in DialOptions (default 1);
	// the REP carries them limited by what the request asked.
	ResponderResources, InitiatorDepth int
	// RNRRetryCount of the peer's QP (default 7).
	RNRRetryCount int
	// PrivateData goes to the dialer with the REP (at most 196 bytes).
	PrivateData []byte
	// ACKTimeout as in DialOptions.
	ACKTimeout uint8
}

func depth(v int) uint8 {
	switch {
	case v == 0:
		return 1
	case v < 0:
		return 0
	}
	return uint8(min(v, 255))
}

func retries(v int) uint8 {
	if v <= 0 || v > 7 {
		return 7
	}
	return uint8(v)
}

// CloseSends is how many DREQs Conn.Close waits out for the peer's DREP:
// the first and two resends (with Linux's timers about 19 s in all, when
// the peer is gone; a DREP usually comes within a round trip).
const CloseSends = 3

// ParseAddr parses "host:port" (an IPv4 address, or a name resolved to
// one; an empty host means any address).
func ParseAddr(address string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("rdmacm: address %q: %w", address, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("rdmacm: port %q: %w", port, err)
	}
	if host == "" {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(p)), nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		addrs, lerr := net.DefaultResolver.LookupNetIP(context.Background(), "ip4", host)
		if lerr != nil || len(addrs) == 0 {
			return netip.AddrPort{}, fmt.Errorf("rdmacm: host %q: %w", host, lerr)
		}
		a = addrs[0]
	}
	a = a.Unmap()
	if a.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("rdmacm: %v: an IPv6 address with a zone (link-local) is not supported: give a routable one", a)
	}
	return netip.AddrPortFrom(a, uint16(p)), nil
}

// Listener waits for connection requests on a port.
type Listener struct {
	dev     verbs.Device
	be      CMListener // a Backend's; mg and the rest unused
	mg      *Manager
	id      uint32
	addr    netip.AddrPort
	backlog chan *Request
	closed  chan struct{}
	once    sync.Once
}

// Listen listens for rdma_cm connections (port space TCP) on the device at
// address "ip:port" (":port" or "0.0.0.0:port" for any address). The
// device is a soft device (a Device: goroce's connection manager on its
// QP 1) or a Backend (the ibverbs provider's, through librdmacm).
func Listen(ctx context.Context, dev verbs.Device, address string) (*Listener, error) {
	switch d := dev.(type) {
	case Device:
		return Attach(d, MachineConfig{}).Listen(ctx, address)
	case Backend:
		return backendListen(ctx, d, address)
	}
	return nil, errNoCM(dev)
}

// Listen is the package's Listen on this manager's device.
func (mg *Manager) Listen(ctx context.Context, address string) (*Listener, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ap, err := ParseAddr(address)
	if err != nil {
		return nil, err
	}
	var match netip.Addr
	if !ap.Addr().IsUnspecified() {
		if ap.Addr() != mg.dev.Addr().Unmap() {
			return nil, fmt.Errorf("rdmacm: listen on %v: not the device's address %v", ap.Addr(), mg.dev.Addr())
		}
		match = ap.Addr()
	}
	l := &Listener{dev: mg.dev, mg: mg, addr: ap, backlog: make(chan *Request, 128), closed: make(chan struct{})}
	err = mg.call(func(int64) error {
		id, err := mg.m.Listen(ib.ServiceID(PortSpaceTCP, ap.Port()), match)
		l.id = id
		if err == nil {
			mg.listeners[id] = l
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rdmacm: listen on %v: %w", ap, err)
	}
	return l, nil
}

// Addr returns the address the listener listens on.
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Accept waits for the next connection request.
func (l *Listener) Accept(ctx context.Context) (*Request, error) {
	if l.be != nil {
		br, err := l.be.Accept(ctx)
		if err != nil {
			return nil, err
		}
		return &Request{be: br, PrivateData: br.PrivateData()}, nil
	}
	select {
	case r := <-l.backlog:
		return r, nil
	case <-l.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening; requests not yet accepted are rejected.
func (l *Listener) Close() error {
	if l.be != nil {
		return l.be.Close()
	}
	return l.mg.call(func(now int64) error {
		l.closeLocked()
		return nil
	})
}

func (l *Listener) closeLocked() {
	l.once.Do(func() {
		close(l.closed)
		delete(l.mg.listeners, l.id)
		_ = l.mg.m.Unlisten(l.mg.now(), l.id)
		for {
			select {
			case r := <-l.backlog:
				delete(l.mg.pending, r.id)
			default:
				return
			}
		}
	})
}

// Request is a connection request a listener received.
type Request struct {
	be     CMRequest // a Backend's; the rest unused but PrivateData
	mg     *Manager
	id     uint32
	req    ib.REQ
	hdr    ib.CMAHeader
	from   netip.Addr
	events chan Event
	once   sync.Once
	// PrivateData is the dialer's: as many bytes as it gave when it is
	// goroce (which says how many, ib.REQ.PrivateLen), else 56 (rdma_cm
	// does not say how many the application sent).
	PrivateData []byte
}

// Peer returns the dialer's address and rdma_cm port.
func (r *Request) Peer() netip.AddrPort {
	if r.be != nil {
		return r.be.Peer()
	}
	return netip.AddrPortFrom(r.hdr.Src, r.hdr.SrcPort)
}

// Local returns the address and port the request was for.
func (r *Request) Local() netip.AddrPort {
	if r.be != nil {
		return r.be.Local()
	}
	return netip.AddrPortFrom(r.hdr.Dst, uint16(r.req.ServiceID))
}

// ResponderResources and InitiatorDepth return the READ/atomic depths the
// dialer asked for.
func (r *Request) ResponderResources() int {
	if r.be != nil {
		return r.be.ResponderResources()
	}
	return int(r.req.ResponderResources)
}

// InitiatorDepth: see ResponderResources.
func (r *Request) InitiatorDepth() int {
	if r.be != nil {
		return r.be.InitiatorDepth()
	}
	return int(r.req.InitiatorDepth)
}

// REQ returns the request as it came (the zero REQ on a Backend, whose
// kernel keeps it).
func (r *Request) REQ() ib.REQ { return r.req }

// Reject refuses the request (REJ reason 28) with private data (at most
// 148 bytes).
func (r *Request) Reject(privateData []byte) error {
	if r.be != nil {
		return r.be.Reject(privateData)
	}
	return r.mg.call(func(now int64) error {
		delete(r.mg.pending, r.id)
		return r.mg.m.Reject(now, r.id, ib.RejConsumer, privateData)
	})
}

// Refuse refuses the request as a CM with no listener for it does (REJ
// reason 8, invalid service ID), so that a dialer that waits for a listener
// to come (ConnectParams.RefusedUntil) sends it again: for a listener
// about to close, whose successor may take it. On a Backend it is Reject.
func (r *Request) Refuse() error {
	if r.be != nil {
		return r.be.Reject(nil)
	}
	return r.mg.call(func(now int64) error {
		delete(r.mg.pending, r.id)
		return r.mg.m.Reject(now, r.id, ib.RejInvalidServiceID, nil)
	})
}

// Accept accepts the request with an RC QP (in RESET, or in INIT with
// receives posted: see InitQP), which it brings to RTS before the REP
// leaves. It returns when the dialer's RTU came (or its DREQ: then the
// connection returned is already over, Done closed, Err ErrDisconnected,
// and what the dialer sent meanwhile is in the QP's completions).
func (r *Request) Accept(ctx context.Context, qp verbs.QP, opts AcceptOptions) (*Conn, error) {
	if r.be != nil {
		return r.acceptBackend(ctx, qp, opts)
	}
	if qp == nil || qp.Type() != verbs.QPTRC {
		return nil, errors.New("rdmacm: Accept needs an RC QP")
	}
	mg := r.mg
	rr, id := AnswerDepths(&r.req, depth(opts.ResponderResources), depth(opts.InitiatorDepth))
	var rep ib.REP
	mg.mu.Lock()
	psn := mg.m.RandomPSN()
	mtu := mg.m.Config().PathMTU
	mg.mu.Unlock()
	rep = ib.REP{LocalQPN: qp.Num(), StartingPSN: psn, ResponderResources: rr, InitiatorDepth: id,
		RNRRetryCount: retries(opts.RNRRetryCount)}
	req := r.req
	if req.PathMTU > mtu && mtu != 0 {
		req.PathMTU = mtu
	}
	c := newConn(mg, r.id, qp, r.Local(), r.Peer(), r.PrivateData)
	p := PassivePlan(&req, &rep, r.from)
	if opts.ACKTimeout != 0 {
		p[2].Attr.Timeout = min(opts.ACKTimeout, 31)
	}
	if err := p.Apply(qp); err != nil {
		_ = r.Reject(nil)
		return nil, err
	}
	err := mg.call(func(now int64) error {
		delete(mg.pending, r.id)
		if err := mg.m.Accept(now, r.id, AcceptParams{QPN: qp.Num(), PSN: psn, ResponderResources: rr,
			InitiatorDepth: id, RNRRetryCount: rep.RNRRetryCount, PrivateData: opts.PrivateData}); err != nil {
			return err
		}
		mg.conns[r.id] = c
		// Events that came for the request meanwhile.
		for {
			select {
			case ev := <-r.events:
				c.event(ev)
			default:
				return nil
			}
		}
	})
	if err != nil {
		toError(qp)
		if errors.Is(err, ErrNoConn) {
			err = fmt.Errorf("rdmacm: request gone (timed out or withdrawn): %w", ErrTimedOut)
		}
		return nil, err
	}
	if err := c.waitEstablished(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Conn is an established rdma_cm connection of a QP.
type Conn struct {
	mg            *Manager
	id            uint32
	qp            verbs.QP
	local, remote netip.AddrPort
	peerPrivate   []byte
	ackTimeout    uint8  // DialOptions.ACKTimeout
	own           *owned // what DialConn or AcceptConn built, destroyed by Close
	be            CMConn // a Backend's connection (mg and id unused)

	events chan Event
	done   chan struct{}
	mu     sync.Mutex
	err    error
	ended  bool
}

func newConn(mg *Manager, id uint32, qp verbs.QP, local, remote netip.AddrPort, priv []byte) *Conn {
	return &Conn{mg: mg, id: id, qp: qp, local: local, remote: remote, peerPrivate: priv,
		events: make(chan Event, 8), done: make(chan struct{})}
}

// event takes a machine event for the connection. Called with mg.mu held.
func (c *Conn) event(ev Event) {
	switch ev.Kind {
	case EvDisconnected:
		c.finish(ErrDisconnected)
		delete(c.mg.conns, c.id)
		go toError(c.qp) // off the manager's lock
	case EvClosed:
		c.finish(ErrClosed)
		delete(c.mg.conns, c.id)
	case EvTimeout, EvRejected:
		delete(c.mg.conns, c.id)
	}
	select {
	case c.events <- ev:
	default:
	}
}

func (c *Conn) finish(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		c.ended, c.err = true, err
		close(c.done)
	}
}

func toError(qp verbs.QP) { _ = qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState) }

// waitEstablished waits for EvEstablished.
func (c *Conn) waitEstablished(ctx context.Context) error {
	for {
		select {
		case ev := <-c.events:
			switch ev.Kind {
			case EvEstablished:
				return nil
			case EvRejected:
				toError(c.qp)
				return &RejectError{Reason: ev.Reason, PrivateData: ev.PrivateData}
			case EvTimeout:
				toError(c.qp)
				return fmt.Errorf("rdmacm: no RTU from %v: %w", c.remote, ErrTimedOut)
			case EvDisconnected:
				// The peer had the REP (it sent a DREQ), our RTU wait
				// missed only its RTU: the connection was up, and is over.
				return nil
			}
		case <-c.done:
			if errors.Is(c.Err(), ErrDisconnected) {
				return nil
			}
			return c.Err()
		case <-ctx.Done():
			c.abandon()
			return ctx.Err()
		}
	}
}

// abandon gives up on a connection being set up.
func (c *Conn) abandon() {
	_ = c.mg.call(func(now int64) error {
		delete(c.mg.conns, c.id)
		return c.mg.m.Disconnect(now, c.id)
	})
	toError(c.qp)
	c.finish(ErrClosed)
}

// Dial connects an RC QP (in RESET, or in INIT with receives posted: see
// InitQP) to an rdma_cm listener at "ip:port" over the device: REQ, REP,
// the QP to RTR and RTS, RTU. The device is a soft device (a Device) or a
// Backend (the ibverbs provider's, through librdmacm).
func Dial(ctx context.Context, dev verbs.Device, address string, qp verbs.QP, opts DialOptions) (*Conn, error) {
	switch d := dev.(type) {
	case Device:
		return Attach(d, MachineConfig{}).Dial(ctx, address, qp, opts)
	case Backend:
		return backendDial(ctx, d, address, qp, opts)
	}
	return nil, errNoCM(dev)
}

// Dial is the package's Dial on this manager's device.
func (mg *Manager) Dial(ctx context.Context, address string, qp verbs.QP, opts DialOptions) (*Conn, error) {
	if qp == nil || qp.Type() != verbs.QPTRC {
		return nil, errors.New("rdmacm: Dial needs an RC QP")
	}
	ap, err := ParseAddr(address)
	if err != nil {
		return nil, err
	}
	if ap.Addr().IsUnspecified() {
		return nil, fmt.Errorf("rdmacm: dial %q: no host", address)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if a, err := qp.Query(); err != nil {
		return nil, err
	} else if a.State != verbs.QPSReset && a.State != verbs.QPSInit {
		return nil, fmt.Errorf("rdmacm: dial: QP %#x is in %v: %w", qp.Num(), a.State, ErrQPState)
	}
	sport := uint16(32768 + rand.IntN(61000-32768))
	d := &dialing{mg: mg, ap: ap, qp: qp, opts: opts, start: time.Now(),
		local: netip.AddrPortFrom(mg.dev.Addr().Unmap(), sport)}
	d.probe = openProbe(d.local.Addr(), ap.Addr())
	defer d.close()
	if err := d.request(); err != nil {
		return nil, fmt.Errorf("rdmacm: dial %v: %w", ap, err)
	}
	return d.wait(ctx)
}

// UnreachableGrace is how long Dial keeps resending its REQ (on the
// QuickRetry schedule) while ICMP errors say the peer cannot be reached,
// in case its device is just opening: the first error after it ends the
// dial (about 650 ms with the default schedule). A send the local routing
// table refuses (ENETUNREACH, EHOSTUNREACH) ends it at once.
const UnreachableGrace = 600 * time.Millisecond

// RefusedGrace is how long after its start a dial whose peer was
// unreachable a moment ago (an ICMP error came back) takes a refusal for
// want of a listener (REJ 8) as "not yet": the peer's device has just
// opened and its listener is likely a moment away, so the REQ is sent
// again (MachineConfig's RefusedResend later, as the same connection). A
// peer refusing from the first REQ on fails the dial at once, unless
// DialOptions.RetryRefused says to ask again for longer.
const RefusedGrace = time.Second

// dialing is one Dial: its connection, and what the probe of its REQs said.
type dialing struct {
	mg      *Manager
	ap      netip.AddrPort
	local   netip.AddrPort
	qp      verbs.QP
	opts    DialOptions
	start   time.Time
	probe   *pathProbe
	c       *Conn
	pathErr *PathError // the last the probe reported
}

// request starts a connection on the machine: its REQ goes out.
func (d *dialing) request() error {
	mg, opts := d.mg, d.opts
	return mg.call(func(now int64) error {
		id, err := mg.m.Connect(now, ConnectParams{Peer: d.ap.Addr(), ServiceID: ib.ServiceID(PortSpaceTCP, d.ap.Port()),
			QPN: d.qp.Num(), PSN: mg.m.RandomPSN(), ResponderResources: depth(opts.ResponderResources),
			InitiatorDepth: depth(opts.InitiatorDepth), RetryCount: retries(opts.RetryCount),
			RNRRetryCount: retries(opts.RNRRetryCount), SrcPort: d.local.Port(), PrivateData: opts.PrivateData,
			TrafficClass: opts.TrafficClass, RefusedUntil: now + int64(opts.RetryRefused)})
		if err != nil {
			return err
		}
		d.c = newConn(mg, id, d.qp, d.local, d.ap, nil)
		d.c.ackTimeout = min(opts.ACKTimeout, 31)
		mg.conns[id] = d.c
		if d.probe != nil {
			mg.probes[id] = d.probe
		}
		return nil
	})
}

// wait waits for the answer to the REQ.
func (d *dialing) wait(ctx context.Context) (*Conn, error) {
	c, ap := d.c, d.ap
	var probeErrs <-chan error
	if d.probe != nil {
		probeErrs = d.probe.errs
	}
	for {
		select {
		case err := <-probeErrs:
			pe, _ := err.(*PathError)
			if pe == nil || pe.filtered() && d.probe.filtering() {
				// A firewall's refusal of one REQ among others it
				// passes is a lost packet, which the REQ's resends
				// cover (TestRpingRxe's CM loss drops a third of the
				// MADs on the output hook, each such send EPERM).
				continue
			}
			if d.pathErr == nil { // the peer may be opening: a refusal is "not yet" for a while
				until := d.mg.now() + int64(RefusedGrace-time.Since(d.start))
				_ = d.mg.call(func(int64) error { d.mg.m.RetryRefused(c.id, until); return nil })
			}
			d.pathErr = pe
			if pe.immediate() || time.Since(d.start) >= UnreachableGrace {
				c.abandon()
				return nil, fmt.Errorf("rdmacm: dial %v: %w", ap, pe)
			}
		case ev := <-c.events:
			switch ev.Kind {
			case EvReply:
				if err := c.ready(ev.REP); err != nil {
					return nil, err
				}
				return c, nil
			case EvRejected:
				return nil, fmt.Errorf("rdmacm: dial %v: %w", ap, &RejectError{Reason: ev.Reason, PrivateData: ev.PrivateData})
			case EvTimeout:
				if d.pathErr != nil {
					return nil, fmt.Errorf("rdmacm: dial %v: no answer to the REQ: %w (%w)", ap, d.pathErr, ErrTimedOut)
				}
				return nil, fmt.Errorf("rdmacm: dial %v: no answer to the REQ: %w (%w)", ap, ErrUnreachable, ErrTimedOut)
			}
		case <-c.done:
			return nil, c.Err()
		case <-ctx.Done():
			c.abandon()
			return nil, ctx.Err()
		}
	}
}

// close lets the dial's probe go.
func (d *dialing) close() {
	if d.probe == nil {
		return
	}
	if d.c != nil {
		d.mg.mu.Lock()
		delete(d.mg.probes, d.c.id)
		d.mg.mu.Unlock()
	}
	d.probe.close()
}

// ready brings the active QP up after the REP and sends the RTU.
func (c *Conn) ready(rep ib.REP) error {
	mg := c.mg
	mg.mu.Lock()
	cn := mg.m.conns[c.id]
	var req ib.REQ
	if cn != nil {
		req = cn.req
	}
	mg.mu.Unlock()
	if cn == nil {
		return fmt.Errorf("rdmacm: dial %v: %w", c.remote, ErrClosed)
	}
	c.peerPrivate = append([]byte(nil), ib.Private(rep.PrivateData[:], rep.PrivateLen)...)
	p := ActivePlan(&req, &rep, c.remote.Addr())
	if c.ackTimeout != 0 {
		p[2].Attr.Timeout = c.ackTimeout
	}
	if err := p.Apply(c.qp); err != nil {
		_ = mg.call(func(now int64) error {
			delete(mg.conns, c.id)
			return mg.m.Reject(now, c.id, ib.RejNoResources, nil)
		})
		return fmt.Errorf("rdmacm: dial %v: %w", c.remote, err)
	}
	return mg.call(func(now int64) error {
		if err := mg.m.Ready(now, c.id); err != nil {
			delete(mg.conns, c.id)
			return fmt.Errorf("rdmacm: dial %v: %w", c.remote, ErrClosed)
		}
		return nil
	})
}

// QP returns the connection's QP.
func (c *Conn) QP() verbs.QP { return c.qp }

// LocalAddr returns this side's address and rdma_cm port.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// RemoteAddr returns the peer's address and rdma_cm port.
func (c *Conn) RemoteAddr() netip.AddrPort { return c.remote }

// PeerPrivateData returns the private data the peer sent with its REP
// (Dial) or REQ (Accept): exactly as many bytes as it gave when the peer is
// goroce, else all the message carries (196 bytes of a REP, 56 of a REQ).
func (c *Conn) PeerPrivateData() []byte {
	if c.own != nil {
		return c.own.peerPriv // after the peer's offer
	}
	return c.peerPrivate
}

// Done is closed when the connection ends: closed here or disconnected by
// the peer (whose QP then is in ERROR).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (ErrDisconnected, ErrClosed), nil
// while it is up.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close disconnects: the QP goes to ERROR (its outstanding work flushes)
// and a DREQ goes out; Close waits for the DREP while CloseSends DREQs go
// unanswered (or until ctx ends, with CloseContext). Closing a connection
// the peer disconnected returns at once. The QP of Dial and Request.Accept
// stays the caller's to destroy; what DialConn and AcceptConn built is
// destroyed then (QP, MR, CQ, channel, PD, context, in that order).
func (c *Conn) Close() error { return c.CloseContext(context.Background()) }

// CloseContext is Close with a context bounding the wait: with a
// deadline, Close waits for the DREP until then (the DREQ is resent all
// the while, up to its retries) rather than for CloseSends DREQs.
func (c *Conn) CloseContext(ctx context.Context) error {
	defer c.release()
	if c.be != nil {
		c.finish(ErrClosed)
		toError(c.qp) // its outstanding work flushes, as rdma_disconnect does a QP of its own
		return c.be.Close(ctx)
	}
	select {
	case <-c.done:
		return nil
	default:
	}
	toError(c.qp)
	if err := c.mg.call(func(now int64) error { return c.mg.m.Disconnect(now, c.id) }); err != nil {
		c.finish(ErrClosed)
		return nil // already gone (time-wait, manager closed)
	}
	var bound <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		cfg := c.mg.m.Config() // fixed at creation: read without the lock
		interval := ib.TimeoutNanos(cfg.ResponseTimeout) + 2*ib.TimeoutNanos(cfg.PacketLifeTime)
		t := time.NewTimer(time.Duration(CloseSends * interval))
		defer t.Stop()
		bound = t.C
	}
	select {
	case <-c.done:
	case <-bound:
	case <-ctx.Done():
	}
	c.finish(ErrClosed)
	return nil
}

// release destroys what DialConn or AcceptConn built, once.
func (c *Conn) release() {
	c.mu.Lock()
	own := c.own
	if own != nil && own.closed {
		own = nil
	}
	if own != nil {
		own.closed = true
	}
	c.mu.Unlock()
	if own != nil {
		_ = own.close()
	}
}
