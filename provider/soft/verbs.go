package soft

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/verbs"
)

// Context is an open soft device. It implements verbs.Context.
type Context struct {
	d      *Device
	events *eventQueue
}

// Device returns the device.
func (c *Context) Device() verbs.Device { return c.d }

// QueryDevice returns the device attributes; the limits are those of
// Options.Engine (engine.Config), defaults filled in. Completions carry
// software timestamps (verbs.TimestampSoftware): verbs.Now read when the
// engine produced the completion.
func (c *Context) QueryDevice() (verbs.DeviceAttr, error) {
	l := c.d.eng.Limits() // set at creation: no lock needed
	return verbs.DeviceAttr{FWVer: "goroce", NodeGUID: c.d.GUID(), SysImageGUID: c.d.GUID(), VendorID: 0xFFFFFF,
		HWVer: 1, MaxQP: l.MaxQP, MaxQPWR: l.MaxQPWR, MaxSGE: l.MaxSGE, MaxCQ: l.MaxCQ, MaxCQE: l.MaxCQE, MaxMR: l.MaxMR,
		MaxMRSize: 1 << 40, MaxPD: l.MaxPD, MaxQPRdAtom: 128, MaxQPInitRdAtom: 128, MaxSRQ: l.MaxSRQ, MaxSRQWR: l.MaxSRQWR,
		MaxAH: l.MaxAH, AtomicCap: 1, PhysPortCnt: 1, CompletionTimestamps: verbs.TimestampSoftware}, nil
}

// QueryPort returns the attributes of port 1.
func (c *Context) QueryPort(port uint8) (verbs.PortAttr, error) {
	if port != 1 {
		return verbs.PortAttr{}, fmt.Errorf("soft: port %d: the device has port 1: %w", port, verbs.ErrInvalidAttr)
	}
	return verbs.PortAttr{State: verbs.PortActive, MaxMTU: verbs.MTU4096, ActiveMTU: c.d.mtu, GIDTblLen: 1,
		PKeyTblLen: 1, LinkLayer: "Ethernet"}, nil
}

// QueryGID returns GID index of port 1: index 0 is the IPv4-mapped GID.
func (c *Context) QueryGID(port uint8, index int) (verbs.GID, error) {
	if port != 1 || index != 0 {
		return verbs.GID{}, fmt.Errorf("soft: GID %d/%d: the device has GID 0 on port 1: %w", port, index, verbs.ErrInvalidAttr)
	}
	return c.d.GID(), nil
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (verbs.PD, error) {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if err := c.d.eng.Reserve(engine.ResPD); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	return &PD{d: c.d, ctx: c, num: c.d.eng.AllocPD()}, nil
}

// CreateCompChannel creates a completion channel.
func (c *Context) CreateCompChannel() (verbs.CompChannel, error) {
	return &CompChannel{ev: make(chan *CQ, 64)}, nil
}

// CreateCQ creates a completion queue.
func (c *Context) CreateCQ(cqe int, ch verbs.CompChannel) (verbs.CQ, error) {
	var cc *CompChannel
	if ch != nil {
		var ok bool
		if cc, ok = ch.(*CompChannel); !ok {
			return nil, fmt.Errorf("soft: completion channel of another provider: %w", verbs.ErrInvalidAttr)
		}
	}
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if err := c.d.eng.CheckCQSize(cqe); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	if err := c.d.eng.Reserve(engine.ResCQ); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	cq := &CQ{cq: engine.NewCQ(cqe), d: c.d, ctx: c}
	c.d.trackCQ(cq)
	if cc != nil {
		cq.ch = cc
		cq.cq.Notify = func() {
			select {
			case cc.ev <- cq:
			default:
			}
		}
	}
	return cq, nil
}

// Close closes the context (the device stays open).
func (c *Context) Close() error { return nil }

// PD is a protection domain.
type PD struct {
	d         *Device
	ctx       *Context
	num       uint32
	destroyed atomic.Bool
}

// RegMR registers buf.
func (p *PD) RegMR(buf []byte, access verbs.AccessFlags) (verbs.MR, error) {
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("soft: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE: %w", verbs.ErrInvalidAttr)
	}
	m, err := p.d.eng.MRs.Register(buf, access, p.num)
	if err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	return &MR{MR: m}, nil
}

// CreateQP creates a queue pair in RESET.
func (p *PD) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	scq, ok1 := attr.SendCQ.(*CQ)
	rcq, ok2 := attr.RecvCQ.(*CQ)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("soft: send and receive CQs must be this provider's: %w", verbs.ErrInvalidAttr)
	}
	init := &engine.QPInit{Type: attr.QPType, PD: p.num, SendCQ: scq.cq, RecvCQ: rcq.cq, Cap: attr.Cap, SigAll: attr.SQSigAll}
	if attr.SRQ != nil {
		s, ok := attr.SRQ.(*SRQ)
		if !ok {
			return nil, fmt.Errorf("soft: SRQ of another provider: %w", verbs.ErrInvalidAttr)
		}
		init.SRQ = s.s
	}
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	qp, err := p.d.eng.CreateQP(init)
	if err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	q := &QP{d: p.d, ctx: p.ctx, qp: qp}
	p.d.trackQP(q)
	return q, nil
}

// CreateSRQ creates a shared receive queue.
func (p *PD) CreateSRQ(maxWR, maxSGE int) (verbs.SRQ, error) {
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	if err := p.d.eng.CheckSRQ(maxWR, maxSGE); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	if err := p.d.eng.Reserve(engine.ResSRQ); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	return &SRQ{d: p.d, s: p.d.eng.NewSRQ(p.num, maxWR, maxSGE)}, nil
}

// CreateAH creates an address handle for an IPv4-mapped GID.
func (p *PD) CreateAH(attr *verbs.AHAttr) (verbs.AH, error) {
	if !attr.DGID.Addr().Is4() {
		return nil, fmt.Errorf("soft: GID %v is not IPv4-mapped: %w", attr.DGID, verbs.ErrInvalidAttr)
	}
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	if err := p.d.eng.Reserve(engine.ResAH); err != nil {
		return nil, fmt.Errorf("soft: %w", err)
	}
	return &AH{d: p.d, attr: *attr}, nil
}

// Dealloc releases the PD.
func (p *PD) Dealloc() error {
	if !p.destroyed.Swap(true) {
		p.d.release(engine.ResPD)
	}
	return nil
}

// MR is a registered memory region.
type MR struct{ *engine.MR }

// Dereg deregisters the region: its keys stop working at once.
func (m *MR) Dereg() error { return m.MR.Deregister() }

// CQ is a completion queue.
type CQ struct {
	cq        *engine.CQ
	ch        *CompChannel
	d         *Device
	ctx       *Context
	destroyed atomic.Bool
}

// Poll moves up to len(wc) completions into wc. It does not allocate. An
// empty poll wakes the device's driver if it sleeps: an application polling
// for a completion is about to need it.
func (c *CQ) Poll(wc []verbs.WC) int {
	n := c.cq.Poll(wc)
	if n == 0 && c.d != nil && c.d.pollInline() {
		n = c.cq.Poll(wc)
	}
	return n
}

// ReqNotify arms the CQ.
func (c *CQ) ReqNotify(solicitedOnly bool) error {
	if c.ch == nil {
		return fmt.Errorf("soft: CQ has no completion channel: %w", verbs.ErrInvalidAttr)
	}
	c.cq.Arm(solicitedOnly)
	return nil
}

// Overrun reports whether the CQ overflowed: it is then in error (see
// Context.GetAsyncEvent) and takes no more completions.
func (c *CQ) Overrun() bool { return c.cq.Overrun() }

// Destroy releases the CQ.
func (c *CQ) Destroy() error {
	if c.d == nil || c.destroyed.Swap(true) {
		return nil
	}
	c.d.mu.Lock()
	delete(c.d.async.cqs, c.cq)
	c.d.eng.Release(engine.ResCQ)
	c.d.mu.Unlock()
	return nil
}

// CompChannel delivers completion events.
type CompChannel struct {
	ev   chan *CQ
	once sync.Once
}

// Wait blocks until an armed CQ raises an event, or ctx ends.
func (c *CompChannel) Wait(ctx context.Context) (verbs.CQ, error) {
	select {
	case cq := <-c.ev:
		return cq, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Destroy releases the channel.
func (c *CompChannel) Destroy() error { return nil }

// QP is a queue pair.
type QP struct {
	d   *Device
	ctx *Context
	qp  *engine.QP
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.qp.Num() }

// Type returns the QP type.
func (q *QP) Type() verbs.QPType { return q.qp.Type() }

// Modify changes attributes (ibv_modify_qp).
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	q.d.mu.Lock()
	err := q.qp.Modify(attr, mask)
	q.d.mu.Unlock()
	q.d.ring()
	return err
}

// Query returns the attributes.
func (q *QP) Query() (verbs.QPAttr, error) {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	return q.qp.Query(), nil
}

// PostSend posts send work requests. It does not allocate.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	if q.d.closed.Load() {
		return 0, errClosed
	}
	n, err := q.qp.PostSend(wrs)
	if n > 0 {
		q.d.kick()
	}
	return n, err
}

// PostRecv posts receive work requests. It does not allocate.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if q.d.closed.Load() {
		return 0, errClosed
	}
	n, err := q.qp.PostRecv(wrs)
	if n > 0 {
		q.d.ring()
	}
	return n, err
}

// Destroy flushes and removes the QP.
func (q *QP) Destroy() error {
	q.d.mu.Lock()
	q.qp.Destroy()
	delete(q.d.async.qps, q.qp)
	q.d.mu.Unlock()
	return nil
}

// SRQ is a shared receive queue.
type SRQ struct {
	d         *Device
	s         *engine.SRQ
	destroyed atomic.Bool
}

// PostRecv posts receive work requests.
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) (int, error) {
	n, err := s.s.PostRecv(wrs)
	if n > 0 {
		s.d.ring()
	}
	return n, err
}

// Destroy releases the SRQ.
func (s *SRQ) Destroy() error {
	if !s.destroyed.Swap(true) {
		s.d.release(engine.ResSRQ)
	}
	return nil
}

// AH is an address handle.
type AH struct {
	d         *Device
	attr      verbs.AHAttr
	destroyed atomic.Bool
}

// Attr returns the destination.
func (a *AH) Attr() verbs.AHAttr { return a.attr }

// Destroy releases the AH.
func (a *AH) Destroy() error {
	if a.d != nil && !a.destroyed.Swap(true) {
		a.d.release(engine.ResAH)
	}
	return nil
}

// release gives back an object counted against the device's limits.
func (d *Device) release(r engine.Resource) {
	d.mu.Lock()
	d.eng.Release(r)
	d.mu.Unlock()
}

var (
	_ verbs.Device  = (*Device)(nil)
	_ verbs.Context = (*Context)(nil)
	_ verbs.PD      = (*PD)(nil)
	_ verbs.MR      = (*MR)(nil)
	_ verbs.CQ      = (*CQ)(nil)
	_ verbs.QP      = (*QP)(nil)
	_ verbs.SRQ     = (*SRQ)(nil)
	_ verbs.AH      = (*AH)(nil)
)
