package probe

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Errors of the prober and the responder.
var (
	// ErrClosed: the prober or responder is closed.
	ErrClosed = errors.New("probe: closed")
	// ErrTooManyInFlight: Probe found ProberOptions.MaxInFlight probes
	// still waiting for their ACKs.
	ErrTooManyInFlight = errors.New("probe: too many probes in flight")
	// ErrBusy: every send slot of the prober's queue pair is taken (the
	// device has not completed the previous sends yet).
	ErrBusy = errors.New("probe: send queue full")
	// ErrBadPeer: the peer has no GID or no QPN.
	ErrBadPeer = errors.New("probe: peer without GID or QPN")
)

const (
	port        = 1       // the device port probes use
	hopLimit    = 64      // of every probe and ACK
	wrRecv      = 1 << 63 // WRID bit of receives
	spinIdle    = 20 * time.Microsecond
	defaultAHs  = 1024 // address handles a prober or responder keeps
	maxSendWR   = 1024
	qpShift     = 32
	slotMask    = 1<<32 - 1
	maxRecvSize = grhLen + 4096
)

// endpoint holds the verbs objects of a prober or a responder: a PD, one
// CQ with its completion channel shared by every UD QP, and per QP one
// memory region with its receive and send slots.
type endpoint struct {
	vctx     verbs.Context
	pd       verbs.PD
	ch       verbs.CompChannel
	cq       verbs.CQ
	gid      verbs.GID
	gidIndex int
	hw       bool // completions are stamped by the device
	qps      []*udQP
	recvSize int // bytes per receive slot: the GRH and a path MTU
	ahs      *ahCache
}

// udQP is one UD queue pair in RTS with its buffers: depth receive slots
// of recvSize bytes, then sendDepth send slots of PayloadLen bytes.
type udQP struct {
	qp        verbs.QP
	mr        verbs.MR
	buf       []byte
	depth     int
	sendDepth int
	sendOff   int
	recvWR    [1]verbs.RecvWR
	recvSGE   [1]verbs.SGE
	sendWR    [1]verbs.SendWR
	sendSGE   [1]verbs.SGE
}

// newEndpoint creates nqp UD QPs on vctx with depth receives and
// sendDepth sends each, all in RTS with Q_Key QKey, every receive posted.
func newEndpoint(vctx verbs.Context, nqp, depth, sendDepth, gidIndex int) (e *endpoint, err error) {
	e = &endpoint{vctx: vctx}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	da, err := vctx.QueryDevice()
	if err != nil {
		return nil, fmt.Errorf("probe: query device: %w", err)
	}
	e.hw = da.CompletionTimestamps == verbs.TimestampHardware
	pa, err := vctx.QueryPort(port)
	if err != nil {
		return nil, fmt.Errorf("probe: query port: %w", err)
	}
	e.recvSize = grhLen + max(pa.ActiveMTU.Bytes(), 256)
	e.recvSize = min(e.recvSize, maxRecvSize)
	if e.gidIndex, e.gid, err = pickGID(vctx, pa, gidIndex); err != nil {
		return nil, err
	}
	if da.MaxQPWR > 0 {
		depth, sendDepth = min(depth, da.MaxQPWR), min(sendDepth, da.MaxQPWR)
	}
	// The one CQ takes every queue's completions: keep it within the
	// device's limit (rdma_rxe: 32767 entries).
	for da.MaxCQE > 0 && nqp*(depth+sendDepth) > da.MaxCQE && depth+sendDepth > 2 {
		depth, sendDepth = max(depth/2, 1), max(sendDepth/2, 1)
	}
	if e.ch, err = vctx.CreateCompChannel(); err != nil {
		return nil, fmt.Errorf("probe: create completion channel: %w", err)
	}
	if e.pd, err = vctx.AllocPD(); err != nil {
		return nil, fmt.Errorf("probe: allocate PD: %w", err)
	}
	if e.cq, err = vctx.CreateCQ(nqp*(depth+sendDepth), e.ch); err != nil {
		return nil, fmt.Errorf("probe: create CQ: %w", err)
	}
	e.ahs = newAHCache(e.pd, uint8(e.gidIndex), defaultAHs)
	for i := 0; i < nqp; i++ {
		q, err := e.newQP(depth, sendDepth)
		if err != nil {
			return nil, err
		}
		e.qps = append(e.qps, q)
		for s := 0; s < depth; s++ {
			if err := e.postRecv(i, s); err != nil {
				return nil, fmt.Errorf("probe: post receive: %w", err)
			}
		}
	}
	return e, nil
}

func (e *endpoint) newQP(depth, sendDepth int) (q *udQP, err error) {
	q = &udQP{depth: depth, sendDepth: sendDepth, sendOff: depth * e.recvSize}
	q.buf = make([]byte, q.sendOff+sendDepth*PayloadLen)
	if q.mr, err = e.pd.RegMR(q.buf, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("probe: register memory: %w", err)
	}
	q.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: verbs.QPTUD, SQSigAll: true,
		Cap: verbs.QPCap{MaxSendWR: uint32(sendDepth), MaxRecvWR: uint32(depth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		q.mr.Dereg()
		return nil, fmt.Errorf("probe: create UD QP: %w", err)
	}
	e.qps = append(e.qps, q) // for close, should a step below fail; newEndpoint appends again
	defer func() { e.qps = e.qps[:len(e.qps)-1] }()
	if err := q.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PKeyIndex: 0, PortNum: port, QKey: QKey},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey); err != nil {
		return nil, fmt.Errorf("probe: UD QP to INIT: %w", err)
	}
	if err := q.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState); err != nil {
		return nil, fmt.Errorf("probe: UD QP to RTR: %w", err)
	}
	if err := q.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
		return nil, fmt.Errorf("probe: UD QP to RTS: %w", err)
	}
	q.recvWR[0].SGList = q.recvSGE[:]
	q.sendWR[0] = verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: q.sendSGE[:], RemoteQKey: QKey}
	return q, nil
}

// postRecv posts receive slot s of QP qi.
func (e *endpoint) postRecv(qi, s int) error {
	q := e.qps[qi]
	q.recvSGE[0] = verbs.SGE{Addr: q.mr.Addr() + uint64(s*e.recvSize), Length: uint32(e.recvSize), LKey: q.mr.LKey()}
	q.recvWR[0].WRID = wrRecv | uint64(qi)<<qpShift | uint64(s)
	_, err := q.qp.PostRecv(q.recvWR[:])
	return err
}

// recvSlot returns receive slot s of QP qi.
func (e *endpoint) recvSlot(qi, s int) []byte {
	q := e.qps[qi]
	return q.buf[s*e.recvSize : (s+1)*e.recvSize]
}

// sendSlot returns send slot s of QP qi.
func (e *endpoint) sendSlot(qi, s int) []byte {
	q := e.qps[qi]
	o := q.sendOff + s*PayloadLen
	return q.buf[o : o+PayloadLen]
}

// postSend sends send slot s of QP qi to (ah, qpn, qkey).
func (e *endpoint) postSend(qi, s int, ah verbs.AH, qpn, qkey uint32) error {
	q := e.qps[qi]
	q.sendSGE[0] = verbs.SGE{Addr: q.mr.Addr() + uint64(q.sendOff+s*PayloadLen), Length: PayloadLen, LKey: q.mr.LKey()}
	w := &q.sendWR[0]
	w.WRID, w.AH, w.RemoteQPN, w.RemoteQKey = uint64(qi)<<qpShift|uint64(s), ah, qpn, qkey
	_, err := q.qp.PostSend(q.sendWR[:])
	w.AH = nil
	return err
}

// wait arms the CQ and sleeps on the completion channel until a completion
// arrives, deadline passes (zero: none) or ctx ends. arm must have been
// called, and the CQ polled empty after it (a completion that came before
// the arming raises no event).
func (e *endpoint) wait(ctx context.Context, deadline time.Time) {
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	e.ch.Wait(ctx)
}

// arm asks for an event at the next completion; false when the CQ cannot
// be armed (it is in error), after a pause so that callers do not spin.
func (e *endpoint) arm() bool {
	if err := e.cq.ReqNotify(false); err != nil {
		time.Sleep(time.Millisecond)
		return false
	}
	return true
}

// close releases every object (those that exist).
func (e *endpoint) close() error {
	var errs []error
	for _, q := range e.qps {
		if q.qp != nil {
			errs = append(errs, q.qp.Destroy())
		}
		if q.mr != nil {
			errs = append(errs, q.mr.Dereg())
		}
	}
	e.qps = nil
	if e.ahs != nil {
		errs = append(errs, e.ahs.destroy())
	}
	if e.cq != nil {
		errs = append(errs, e.cq.Destroy())
	}
	if e.pd != nil {
		errs = append(errs, e.pd.Dealloc())
	}
	if e.ch != nil {
		errs = append(errs, e.ch.Destroy())
	}
	return errors.Join(errs...)
}

// idler decides between spinning and sleeping when the CQ is empty.
type idler struct{ since time.Time }

// spin reports whether to poll again at once (after yielding) rather than
// sleep: for spinIdle after the last completion.
func (d *idler) spin() bool {
	now := time.Now()
	if d.since.IsZero() {
		d.since = now
	}
	if now.Sub(d.since) < spinIdle {
		runtime.Gosched()
		return true
	}
	return false
}

func (d *idler) busy() { d.since = time.Time{} }

// pickGID returns the GID index to send from: index when > 0, else the
// first IPv4-mapped GID of the port (index 1 on a soft device and on
// rdma_rxe, whose index 0 is the link-local IPv6 GID), else index 0.
func pickGID(vctx verbs.Context, pa verbs.PortAttr, index int) (int, verbs.GID, error) {
	if index > 0 {
		g, err := vctx.QueryGID(port, index)
		if err != nil {
			return 0, g, fmt.Errorf("probe: GID index %d: %w", index, err)
		}
		return index, g, nil
	}
	for i := 0; i < max(pa.GIDTblLen, 1); i++ {
		g, err := vctx.QueryGID(port, i)
		if err != nil {
			continue
		}
		if a := g.Addr(); a.Is4() && !a.IsUnspecified() {
			return i, g, nil
		}
	}
	g, err := vctx.QueryGID(port, 0)
	if err != nil {
		return 0, g, fmt.Errorf("probe: GID index 0: %w", err)
	}
	return 0, g, nil
}

// sourceGID returns the sender's GID from a UD receive's 40-byte GRH area:
// an IPv6 header (RoCEv2 over IPv6: its source address), or, as rdma_rxe
// and goroce's soft device write it for IPv4, an IPv4 header in the last 20
// bytes (its source address, IPv4-mapped).
func sourceGID(grh []byte) (verbs.GID, bool) {
	var g verbs.GID
	if len(grh) < grhLen {
		return g, false
	}
	if grh[20]>>4 == 4 && grh[20]&0xF == 5 {
		g[10], g[11] = 0xFF, 0xFF
		copy(g[12:], grh[32:36])
		return g, true
	}
	if grh[0]>>4 == 6 {
		copy(g[:], grh[8:24])
		return g, true
	}
	return g, false
}

// sourceTOS returns the traffic class (IPv4 TOS byte, IPv6 traffic class)
// of a UD receive's GRH area, as sourceGID reads it; 0 when unknown (a
// device that does not report it writes 0).
func sourceTOS(grh []byte) uint8 {
	if len(grh) < grhLen {
		return 0
	}
	if grh[20]>>4 == 4 && grh[20]&0xF == 5 {
		return grh[21]
	}
	if grh[0]>>4 == 6 {
		return grh[0]<<4 | grh[1]>>4
	}
	return 0
}

// ahKey names a cached address handle.
type ahKey struct {
	gid   verbs.GID
	label uint32
	tc    uint8 // the traffic class (TOS byte)
}

// ahEntry is a cached address handle, referenced by refs posted sends.
type ahEntry struct {
	key     ahKey
	ah      verbs.AH
	refs    int
	elem    *list.Element // nil when not in the cache (evicted or never cached)
	evicted bool
}

// ahCache keeps up to max address handles, least recently used evicted
// first; a handle some posted send still uses is destroyed only after its
// last send completed. Not safe for concurrent use.
type ahCache struct {
	pd   verbs.PD
	sgid uint8
	max  int
	m    map[ahKey]*ahEntry
	gone map[*ahEntry]struct{} // evicted, still referenced
	lru  list.List             // of *ahEntry, most recent first
}

func newAHCache(pd verbs.PD, sgid uint8, max int) *ahCache {
	return &ahCache{pd: pd, sgid: sgid, max: max, m: make(map[ahKey]*ahEntry, max), gone: map[*ahEntry]struct{}{}}
}

// get returns the handle of key with one more reference, creating it when
// missing.
func (c *ahCache) get(key ahKey) (*ahEntry, error) {
	if e := c.m[key]; e != nil {
		e.refs++
		c.lru.MoveToFront(e.elem)
		return e, nil
	}
	if len(c.m) >= c.max {
		for el := c.lru.Back(); el != nil; el = el.Prev() {
			old := el.Value.(*ahEntry)
			c.lru.Remove(el)
			delete(c.m, old.key)
			old.elem = nil
			if old.refs == 0 {
				old.ah.Destroy()
			} else {
				old.evicted = true
				c.gone[old] = struct{}{}
			}
			break
		}
	}
	ah, err := c.pd.CreateAH(&verbs.AHAttr{DGID: key.gid, SGIDIndex: c.sgid, FlowLabel: key.label, TrafficClass: key.tc, HopLimit: hopLimit, PortNum: port})
	if err != nil {
		return nil, err
	}
	e := &ahEntry{key: key, ah: ah, refs: 1}
	e.elem = c.lru.PushFront(e)
	c.m[key] = e
	return e, nil
}

// put drops a reference taken by get.
func (c *ahCache) put(e *ahEntry) {
	e.refs--
	if e.refs == 0 && e.evicted {
		delete(c.gone, e)
		e.ah.Destroy()
	}
}

// len returns how many handles are cached.
func (c *ahCache) len() int { return len(c.m) }

// destroy destroys every handle, cached or evicted but still referenced;
// call it after the QPs are gone.
func (c *ahCache) destroy() error {
	var errs []error
	for _, e := range c.m {
		errs = append(errs, e.ah.Destroy())
	}
	for e := range c.gone {
		errs = append(errs, e.ah.Destroy())
	}
	c.m, c.gone = nil, nil
	c.lru.Init()
	return errors.Join(errs...)
}
