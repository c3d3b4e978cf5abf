package soft

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/verbs"
)

// Context is an open soft device. It implements verbs.Context.
type Context struct {
	d      *Device
	events *eventQueue
	gone   chan struct{} // closed by Close
	closed atomic.Bool
	// Guarded by d.mu: the live objects made through the context, with
	// their creation sequence numbers, destroyed by Close in reverse order.
	objs map[lifer]uint64
	seq  uint64
}

// lifer is an object a Context destroys when it closes. destroyLocked is
// called with the device mutex held; force skips the busy checks (Close
// destroys in reverse creation order, users first).
type lifer interface {
	destroyLocked(force bool) error
}

// alive returns nil while the context and its device are open, else an
// error matching verbs.ErrDestroyed.
func (c *Context) alive() error {
	if c.d.closed.Load() {
		return errClosed
	}
	if c.closed.Load() {
		return errCtxClosed
	}
	return nil
}

// track records an object made through the context. Called with d.mu held.
func (c *Context) track(o lifer) {
	if c.objs == nil {
		c.objs = map[lifer]uint64{}
	}
	c.seq++
	c.objs[o] = c.seq
}

// untrack forgets a destroyed object. Called with d.mu held.
func (c *Context) untrack(o lifer) { delete(c.objs, o) }

// Device returns the device.
func (c *Context) Device() verbs.Device { return c.d }

// QueryDevice returns the device attributes; the limits are those of
// Options.Engine (engine.Config), defaults filled in. Completions carry
// software timestamps (verbs.TimestampSoftware): verbs.Now read when the
// engine produced the completion.
func (c *Context) QueryDevice() (verbs.DeviceAttr, error) {
	if err := c.alive(); err != nil {
		return verbs.DeviceAttr{}, err
	}
	l := c.d.eng.Limits() // set at creation: no lock needed
	return verbs.DeviceAttr{FWVer: "goroce", NodeGUID: c.d.GUID(), SysImageGUID: c.d.GUID(), VendorID: 0xFFFFFF,
		HWVer: 1, MaxQP: l.MaxQP, MaxQPWR: l.MaxQPWR, MaxSGE: l.MaxSGE, MaxCQ: l.MaxCQ, MaxCQE: l.MaxCQE, MaxMR: l.MaxMR,
		MaxMRSize: 1 << 40, MaxPD: l.MaxPD, MaxQPRdAtom: 128, MaxQPInitRdAtom: 128, MaxSRQ: l.MaxSRQ, MaxSRQWR: l.MaxSRQWR,
		MaxAH: l.MaxAH, AtomicCap: 1, PhysPortCnt: 1, CompletionTimestamps: verbs.TimestampSoftware, CapFlags: softCaps}, nil
}

// QueryPort returns the attributes of port 1.
func (c *Context) QueryPort(port uint8) (verbs.PortAttr, error) {
	if err := c.alive(); err != nil {
		return verbs.PortAttr{}, err
	}
	if port != 1 {
		return verbs.PortAttr{}, fmt.Errorf("soft: port %d: the device has port 1: %w", port, verbs.ErrInvalidAttr)
	}
	return verbs.PortAttr{State: verbs.PortActive, MaxMTU: verbs.MTU4096, ActiveMTU: c.d.mtu, GIDTblLen: len(c.d.gids),
		PKeyTblLen: 1, LinkLayer: "Ethernet"}, nil
}

// QueryGID returns GID index of port 1, laid out as rdma_rxe's: index 0
// is the link-local IPv6 GID (GIDIndexLinkLocal), then the interface's
// IPv4-mapped and IPv6 GIDs (see GIDIndexLinkLocal); the device sends from
// its own address's (Device.GIDIndex: 1 on an IPv4 address).
func (c *Context) QueryGID(port uint8, index int) (verbs.GID, error) {
	if err := c.alive(); err != nil {
		return verbs.GID{}, err
	}
	return c.d.queryGID(port, index)
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (verbs.PD, error) {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if err := c.alive(); err != nil {
		return nil, err
	}
	if err := c.d.eng.Reserve(engine.ResPD); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	p := &PD{d: c.d, ctx: c, num: c.d.eng.AllocPD()}
	c.track(p)
	return p, nil
}

// CreateCompChannel creates a completion channel.
func (c *Context) CreateCompChannel() (verbs.CompChannel, error) {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if err := c.alive(); err != nil {
		return nil, err
	}
	ch := &CompChannel{ev: make(chan *CQ, 64), ctx: c, gone: make(chan struct{})}
	c.track(ch)
	return ch, nil
}

// CreateCQ creates a completion queue.
func (c *Context) CreateCQ(cqe int, ch verbs.CompChannel) (verbs.CQ, error) {
	var cc *CompChannel
	if ch != nil {
		var ok bool
		if cc, ok = ch.(*CompChannel); !ok || cc.ctx == nil || cc.ctx.d != c.d {
			return nil, fmt.Errorf("soft: completion channel of another provider or device: %w", verbs.ErrInvalidAttr)
		}
	}
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if err := c.alive(); err != nil {
		return nil, err
	}
	if cc != nil && cc.dead {
		return nil, fmt.Errorf("soft: completion channel: %w", verbs.ErrDestroyed)
	}
	if err := c.d.eng.CheckCQSize(cqe); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	if err := c.d.eng.Reserve(engine.ResCQ); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	cq := &CQ{cq: engine.NewCQ(cqe), d: c.d, ctx: c}
	c.d.trackCQ(cq)
	c.track(cq)
	if cc != nil {
		cq.ch = cc
		cc.users++
		cq.cq.Notify = func() {
			select {
			case cc.ev <- cq:
			default:
			}
		}
	}
	return cq, nil
}

// Close closes the context (ibv_close_device): it destroys every object made
// through it, newest first (QPs are flushed), and wakes the goroutines
// waiting in its channels' Wait and in GetAsyncEvent, which return an error
// matching verbs.ErrDestroyed, as every later call on the context or its
// objects does (their Destroy and Close return nil). The device stays open.
// Closing twice returns nil.
func (c *Context) Close() error {
	c.d.mu.Lock()
	if c.closed.Swap(true) {
		c.d.mu.Unlock()
		return nil
	}
	objs := make([]lifer, 0, len(c.objs))
	for o := range c.objs {
		objs = append(objs, o)
	}
	slices.SortFunc(objs, func(a, b lifer) int { return cmp.Compare(c.objs[b], c.objs[a]) })
	for _, o := range objs {
		o.destroyLocked(true)
	}
	c.objs = nil
	c.d.mu.Unlock()
	close(c.gone)
	c.d.ring()
	return nil
}

// PD is a protection domain.
type PD struct {
	d         *Device
	ctx       *Context
	num       uint32
	destroyed atomic.Bool
	users     int // QPs, MRs, SRQs and AHs of the PD; guarded by d.mu
}

// check returns nil while the PD and its context are alive. Called with
// d.mu held.
func (p *PD) check() error {
	if err := p.ctx.alive(); err != nil {
		return err
	}
	if p.destroyed.Load() {
		return fmt.Errorf("soft: PD %d: %w", p.num, verbs.ErrDestroyed)
	}
	return nil
}

// RegMR registers buf.
func (p *PD) RegMR(buf []byte, access verbs.AccessFlags) (verbs.MR, error) {
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("soft: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE: %w", verbs.ErrInvalidAttr)
	}
	if access&verbs.AccessFlushPersistent != 0 {
		return nil, fmt.Errorf("soft: FLUSH_PERSISTENT: the device has no persistent memory: %w", verbs.ErrNotSupported)
	}
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	if err := p.check(); err != nil {
		return nil, err
	}
	m, err := p.d.eng.MRs.Register(buf, access, p.num)
	if err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	mr := &MR{MR: m, pd: p}
	p.users++
	p.ctx.track(mr)
	return mr, nil
}

// CreateQP creates a queue pair in RESET.
func (p *PD) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	if attr == nil {
		return nil, fmt.Errorf("soft: nil QP attributes: %w", verbs.ErrInvalidAttr)
	}
	scq, ok1 := attr.SendCQ.(*CQ)
	rcq, ok2 := attr.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq == nil || rcq == nil || scq.d != p.d || rcq.d != p.d {
		return nil, fmt.Errorf("soft: send and receive CQs must be this device's: %w", verbs.ErrInvalidAttr)
	}
	init := &engine.QPInit{Type: attr.QPType, PD: p.num, SendCQ: scq.cq, RecvCQ: rcq.cq, Cap: attr.Cap, SigAll: attr.SQSigAll}
	var srq *SRQ
	if attr.SRQ != nil {
		var ok bool
		if srq, ok = attr.SRQ.(*SRQ); !ok || srq == nil || srq.d != p.d {
			return nil, fmt.Errorf("soft: SRQ of another provider or device: %w", verbs.ErrInvalidAttr)
		}
		init.SRQ = srq.s
	}
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	if err := p.check(); err != nil {
		return nil, err
	}
	if scq.destroyed.Load() || rcq.destroyed.Load() {
		return nil, fmt.Errorf("soft: CQ: %w", verbs.ErrDestroyed)
	}
	if srq != nil && srq.destroyed.Load() {
		return nil, fmt.Errorf("soft: SRQ: %w", verbs.ErrDestroyed)
	}
	qp, err := p.d.eng.CreateQP(init)
	if err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	q := &QP{d: p.d, ctx: p.ctx, qp: qp, pd: p, scq: scq, rcq: rcq, srq: srq}
	p.users++
	scq.users++
	rcq.users++
	if srq != nil {
		srq.users++
	}
	p.d.trackQP(q)
	p.ctx.track(q)
	return q, nil
}

// CreateSRQ creates a shared receive queue.
func (p *PD) CreateSRQ(maxWR, maxSGE int) (verbs.SRQ, error) {
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	if err := p.check(); err != nil {
		return nil, err
	}
	if err := p.d.eng.CheckSRQ(maxWR, maxSGE); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	if err := p.d.eng.Reserve(engine.ResSRQ); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	s := &SRQ{d: p.d, ctx: p.ctx, pd: p, s: p.d.eng.NewSRQ(p.num, maxWR, maxSGE)}
	p.users++
	p.ctx.track(s)
	return s, nil
}

// CreateAH creates an address handle for a GID of the device's address
// family: IPv4-mapped, or IPv6 for a device on an IPv6 address.
func (p *PD) CreateAH(attr *verbs.AHAttr) (verbs.AH, error) {
	if attr == nil {
		return nil, fmt.Errorf("soft: nil AH attributes: %w", verbs.ErrInvalidAttr)
	}
	if err := p.d.checkDGID(attr.DGID); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	if err := p.d.checkSGID(attr.SGIDIndex); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	if err := p.check(); err != nil {
		return nil, err
	}
	if err := p.d.eng.Reserve(engine.ResAH); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	a := &AH{d: p.d, pd: p, attr: *attr}
	p.users++
	p.ctx.track(a)
	return a, nil
}

// Dealloc releases the PD (ibv_dealloc_pd). While QPs, MRs, SRQs or AHs of
// the PD live it fails with an error matching verbs.ErrBusy and changes
// nothing. Deallocating twice, or after the context or device closed,
// returns nil.
func (p *PD) Dealloc() error {
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	return p.destroyLocked(false)
}

// Close is Dealloc (io.Closer).
func (p *PD) Close() error { return p.Dealloc() }

func (p *PD) destroyLocked(force bool) error {
	if p.destroyed.Load() || p.ctx.alive() != nil && !force {
		return nil
	}
	if p.users > 0 && !force {
		return fmt.Errorf("soft: PD %d has %d QPs, MRs, SRQs or AHs: %w", p.num, p.users, verbs.ErrBusy)
	}
	p.destroyed.Store(true)
	p.d.eng.Release(engine.ResPD)
	p.ctx.untrack(p)
	return nil
}

// MR is a registered memory region.
type MR struct {
	*engine.MR
	pd   *PD
	dead atomic.Bool
}

// Dereg deregisters the region (ibv_dereg_mr): its keys stop working at
// once. Deregistering twice, or after the context or device closed,
// returns nil.
func (m *MR) Dereg() error {
	if m.pd == nil { // not made by RegMR
		return m.MR.Deregister()
	}
	m.pd.d.mu.Lock()
	defer m.pd.d.mu.Unlock()
	return m.destroyLocked(false)
}

// Close is Dereg (io.Closer).
func (m *MR) Close() error { return m.Dereg() }

func (m *MR) destroyLocked(force bool) error {
	if m.dead.Load() {
		return nil
	}
	err := m.MR.Deregister()
	if errors.Is(err, verbs.ErrBusy) && !force {
		return fmt.Errorf("soft: %w", err) // windows are bound to it: it stays
	}
	m.dead.Store(true)
	m.pd.users--
	m.pd.ctx.untrack(m)
	if err != nil {
		return fmt.Errorf("soft: %w", err)
	}
	return nil
}

// CQ is a completion queue.
type CQ struct {
	cq        *engine.CQ
	ch        *CompChannel
	d         *Device
	ctx       *Context
	destroyed atomic.Bool
	users     int // QPs that use the CQ; guarded by d.mu
}

// Poll moves up to len(wc) completions into wc. It does not allocate. An
// empty poll wakes the device's driver if it sleeps: an application polling
// for a completion is about to need it. A destroyed CQ (or one of a closed
// context) polls no completions; after Device.Close a CQ still gives the
// completions the close flushed.
func (c *CQ) Poll(wc []verbs.WC) int {
	if c.destroyed.Load() {
		return 0
	}
	n := c.cq.Poll(wc)
	if n == 0 && c.d != nil && c.d.pollInline() {
		n = c.cq.Poll(wc)
	}
	return n
}

// ReqNotify arms the CQ.
func (c *CQ) ReqNotify(solicitedOnly bool) error {
	if c.destroyed.Load() {
		return fmt.Errorf("soft: CQ: %w", verbs.ErrDestroyed)
	}
	if c.ctx != nil {
		if err := c.ctx.alive(); err != nil {
			return err
		}
	}
	if c.ch == nil {
		return fmt.Errorf("soft: CQ has no completion channel: %w", verbs.ErrInvalidAttr)
	}
	c.cq.Arm(solicitedOnly)
	return nil
}

// Overrun reports whether the CQ overflowed: it is then in error (see
// Context.GetAsyncEvent) and takes no more completions.
func (c *CQ) Overrun() bool { return c.cq.Overrun() }

// Destroy destroys the CQ (ibv_destroy_cq). While a QP uses it, it fails
// with an error matching verbs.ErrBusy and changes nothing. Destroying
// twice, or after the context or device closed, returns nil.
func (c *CQ) Destroy() error {
	if c.d == nil {
		return nil
	}
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	return c.destroyLocked(false)
}

// Close is Destroy (io.Closer).
func (c *CQ) Close() error { return c.Destroy() }

func (c *CQ) destroyLocked(force bool) error {
	if c.destroyed.Load() || c.ctx.alive() != nil && !force {
		return nil
	}
	if c.users > 0 && !force {
		return fmt.Errorf("soft: CQ used by %d QPs: %w", c.users, verbs.ErrBusy)
	}
	c.destroyed.Store(true)
	if !force {
		c.wake() // a PollWait on the CQ returns its error (a close wakes it itself)
	}
	delete(c.d.async.cqs, c.cq)
	c.d.eng.Release(engine.ResCQ)
	if c.ch != nil {
		c.ch.users--
	}
	c.ctx.untrack(c)
	return nil
}

// CompChannel delivers completion events.
type CompChannel struct {
	ev    chan *CQ
	ctx   *Context
	gone  chan struct{} // closed by Destroy
	dead  bool          // guarded by ctx.d.mu
	users int           // CQs of the channel; guarded by ctx.d.mu
}

// Wait blocks until an armed CQ raises an event, or ctx ends, or the
// channel is destroyed or its context or device closed (an error matching
// verbs.ErrDestroyed).
func (c *CompChannel) Wait(ctx context.Context) (verbs.CQ, error) {
	if c.ctx == nil {
		return nil, fmt.Errorf("soft: completion channel not made by CreateCompChannel: %w", verbs.ErrInvalidAttr)
	}
	select {
	case cq := <-c.ev:
		return cq, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.gone:
		return nil, fmt.Errorf("soft: completion channel: %w", verbs.ErrDestroyed)
	case <-c.ctx.gone:
		return nil, errCtxClosed
	case <-c.ctx.d.gone:
		return nil, errClosed
	}
}

// Destroy destroys the channel (ibv_destroy_comp_channel) and wakes its
// waiters. While CQs report to it, it fails with an error matching
// verbs.ErrBusy and changes nothing. Destroying twice, or after the
// context or device closed, returns nil.
func (c *CompChannel) Destroy() error {
	if c.ctx == nil {
		return nil
	}
	c.ctx.d.mu.Lock()
	defer c.ctx.d.mu.Unlock()
	return c.destroyLocked(false)
}

// Close is Destroy (io.Closer).
func (c *CompChannel) Close() error { return c.Destroy() }

func (c *CompChannel) destroyLocked(force bool) error {
	if c.dead || c.ctx.alive() != nil && !force {
		return nil
	}
	if c.users > 0 && !force {
		return fmt.Errorf("soft: completion channel of %d CQs: %w", c.users, verbs.ErrBusy)
	}
	c.dead = true
	close(c.gone)
	c.ctx.untrack(c)
	return nil
}

// QP is a queue pair.
type QP struct {
	d    *Device
	ctx  *Context
	qp   *engine.QP
	pd   *PD
	scq  *CQ
	rcq  *CQ
	srq  *SRQ
	dead atomic.Bool
	// txErr is why the device moved the QP to ERROR when the network
	// refused one of its packets (see QP.Err).
	txErr atomic.Pointer[error]
	cork  corkHint
	mcast []netip.Addr // multicast groups attached (mcast.go); guarded by d.mu
}

// Err returns why the device moved the QP to ERROR itself, or nil: a
// packet the network refused as too long (EMSGSIZE: the route carries less
// than the QP's path MTU), named with its size and the MTUs. The QP's work
// then completed with WR_FLUSH_ERR and its context got IBV_EVENT_QP_FATAL.
func (q *QP) Err() error {
	if e := q.txErr.Load(); e != nil {
		return *e
	}
	return nil
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.qp.Num() }

// Congestion returns the QP's congestion control state (engine.CCState):
// the window it shares with the device's other QPs to the same peer, the
// packets in flight, DCQCN's alpha, the smoothed round trip.
func (q *QP) Congestion() engine.CCState {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	return q.qp.Congestion()
}

// Type returns the QP type.
func (q *QP) Type() verbs.QPType { return q.qp.Type() }

// check returns nil while the QP, its context and device live.
func (q *QP) check() error {
	if q.d.closed.Load() {
		return errClosed
	}
	if q.dead.Load() {
		return fmt.Errorf("soft: QP %#x: %w", q.qp.Num(), verbs.ErrDestroyed)
	}
	if q.ctx != nil && q.ctx.closed.Load() {
		return errCtxClosed
	}
	return nil
}

// Modify changes attributes (ibv_modify_qp). A path MTU above the port's
// active MTU is refused with an error naming both (the link could not carry
// the packets).
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if attr == nil {
		return fmt.Errorf("soft: nil QP attributes: %w", verbs.ErrInvalidAttr)
	}
	if err := q.check(); err != nil {
		return err
	}
	if mask&verbs.AttrAV != 0 {
		if err := q.d.checkSGID(attr.AHAttr.SGIDIndex); err != nil {
			return fmt.Errorf("soft: QP %#x: %w", q.qp.Num(), err)
		}
	}
	if mask&verbs.AttrPathMTU != 0 && attr.PathMTU > q.d.mtu && attr.PathMTU <= verbs.MTU4096 {
		return fmt.Errorf("soft: QP %#x: path MTU %d exceeds the port's active MTU %d (%s): %w",
			q.qp.Num(), attr.PathMTU.Bytes(), q.d.mtu.Bytes(), q.d.mtuWhy, verbs.ErrInvalidAttr)
	}
	q.d.mu.Lock()
	err := q.qp.Modify(attr, mask)
	q.d.mu.Unlock()
	if err == nil && mask&verbs.AttrState != 0 && attr.State == verbs.QPSReset {
		q.txErr.Store(nil) // a fresh start
	}
	q.d.ring()
	return err
}

// Query returns the attributes.
func (q *QP) Query() (verbs.QPAttr, error) {
	if err := q.check(); err != nil {
		return verbs.QPAttr{}, err
	}
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	return q.qp.Query(), nil
}

// PostSend posts send work requests. It does not allocate.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	if err := q.check(); err != nil {
		return 0, err
	}
	if e := q.txErr.Load(); e != nil {
		return 0, *e
	}
	ok, bad := verbs.CheckSendWRs(wrs) // remote memory without an rkey
	n, awaited, err := q.qp.PostSendAwaited(wrs[:ok])
	if n > 0 && (awaited || !q.cork.holds(q.d, q.qp)) {
		q.d.kickQP(q.qp, &q.cork, awaited)
	}
	if err == nil {
		err = bad
	}
	return n, err
}

// PostRecv posts receive work requests. It does not allocate. It rings no
// doorbell: a receive gives the driver nothing to do (a SEND that finds no
// receive is NAKed at once, RNR, and its requester sends it again on its
// own timer), and a ring for each receive woke a sleeping driver for
// nothing.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if err := q.check(); err != nil {
		return 0, err
	}
	return q.qp.PostRecv(wrs)
}

// Destroy destroys the QP (ibv_destroy_qp): its outstanding work completes
// with WR_FLUSH_ERR, and its CQs, SRQ and PD may then be destroyed.
// Destroying twice, or after the context or device closed, returns nil.
func (q *QP) Destroy() error {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	return q.destroyLocked(false)
}

// Close is Destroy (io.Closer).
func (q *QP) Close() error { return q.Destroy() }

func (q *QP) destroyLocked(force bool) error {
	if q.dead.Load() {
		return nil
	}
	q.dead.Store(true)
	q.detachAll()
	q.qp.Destroy()
	delete(q.d.async.qps, q.qp)
	if q.pd != nil {
		q.pd.users--
		q.scq.users--
		q.rcq.users--
		if q.srq != nil {
			q.srq.users--
		}
		q.ctx.untrack(q)
	}
	return nil
}

// SRQ is a shared receive queue.
type SRQ struct {
	d         *Device
	ctx       *Context
	pd        *PD
	s         *engine.SRQ
	destroyed atomic.Bool
	users     int // QPs that use the SRQ; guarded by d.mu
}

// PostRecv posts receive work requests.
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if s.d.closed.Load() {
		return 0, errClosed
	}
	if s.destroyed.Load() {
		return 0, fmt.Errorf("soft: SRQ: %w", verbs.ErrDestroyed)
	}
	return s.s.PostRecv(wrs) // no doorbell, as QP.PostRecv
}

// Destroy destroys the SRQ (ibv_destroy_srq). While a QP uses it, it fails
// with an error matching verbs.ErrBusy and changes nothing. Destroying
// twice, or after the context or device closed, returns nil.
func (s *SRQ) Destroy() error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.destroyLocked(false)
}

// Close is Destroy (io.Closer).
func (s *SRQ) Close() error { return s.Destroy() }

func (s *SRQ) destroyLocked(force bool) error {
	if s.destroyed.Load() || s.ctx.alive() != nil && !force {
		return nil
	}
	if s.users > 0 && !force {
		return fmt.Errorf("soft: SRQ used by %d QPs: %w", s.users, verbs.ErrBusy)
	}
	s.destroyed.Store(true)
	s.d.eng.Release(engine.ResSRQ)
	s.pd.users--
	s.ctx.untrack(s)
	return nil
}

// AH is an address handle.
type AH struct {
	d         *Device
	pd        *PD
	attr      verbs.AHAttr
	destroyed atomic.Bool
}

// Attr returns the destination.
func (a *AH) Attr() verbs.AHAttr { return a.attr }

// Destroy destroys the AH (ibv_destroy_ah). Destroying twice, or after the
// context or device closed, returns nil.
func (a *AH) Destroy() error {
	if a.d == nil {
		return nil
	}
	a.d.mu.Lock()
	defer a.d.mu.Unlock()
	return a.destroyLocked(false)
}

// Close is Destroy (io.Closer).
func (a *AH) Close() error { return a.Destroy() }

func (a *AH) destroyLocked(force bool) error {
	if a.destroyed.Load() || a.pd.ctx.alive() != nil && !force {
		return nil
	}
	a.destroyed.Store(true)
	a.d.eng.Release(engine.ResAH)
	a.pd.users--
	a.pd.ctx.untrack(a)
	return nil
}

var (
	_ verbs.Device      = (*Device)(nil)
	_ verbs.Context     = (*Context)(nil)
	_ verbs.PD          = (*PD)(nil)
	_ verbs.MR          = (*MR)(nil)
	_ verbs.CQ          = (*CQ)(nil)
	_ verbs.CompChannel = (*CompChannel)(nil)
	_ verbs.QP          = (*QP)(nil)
	_ verbs.SRQ         = (*SRQ)(nil)
	_ verbs.AH          = (*AH)(nil)
)
