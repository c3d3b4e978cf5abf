//go:build linux && cgo && ibverbs

package ibverbs

/*
#cgo LDFLAGS: -lrdmacm
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

struct gcm_ev {
	int event, status;
	struct rdma_cm_id *id;
	unsigned char pd[256];
	int pdlen, rr, depth;
};

// gcm_get takes the next event of a (non-blocking) channel, copies what
// goroce needs and acknowledges it: 0, or an errno (EAGAIN: none yet).
static int gcm_get(struct rdma_event_channel *ch, struct gcm_ev *out) {
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		return errno;
	out->event = e->event;
	out->status = e->status;
	out->id = e->id;
	out->pdlen = 0;
	if (e->param.conn.private_data && e->param.conn.private_data_len) {
		out->pdlen = e->param.conn.private_data_len > 256 ? 256 : e->param.conn.private_data_len;
		memcpy(out->pd, e->param.conn.private_data, out->pdlen);
	}
	out->rr = e->param.conn.responder_resources;
	out->depth = e->param.conn.initiator_depth;
	rdma_ack_cm_event(e);
	return 0;
}

static void gcm_sin(struct sockaddr_in *s, uint32_t addr, uint16_t port) {
	memset(s, 0, sizeof *s);
	s->sin_family = AF_INET;
	s->sin_addr.s_addr = addr;
	s->sin_port = htons(port);
}

static int gcm_create(struct rdma_event_channel *ch, struct rdma_cm_id **id) {
	return rdma_create_id(ch, id, NULL, RDMA_PS_TCP) ? errno : 0;
}

static int gcm_resolve_addr(struct rdma_cm_id *id, uint32_t addr, uint16_t port, int ms) {
	struct sockaddr_in dst;
	gcm_sin(&dst, addr, port);
	return rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, ms) ? errno : 0;
}

static int gcm_resolve_route(struct rdma_cm_id *id, int ms) {
	return rdma_resolve_route(id, ms) ? errno : 0;
}

static int gcm_bind_listen(struct rdma_cm_id *id, uint32_t addr, uint16_t port, int backlog) {
	struct sockaddr_in a;
	gcm_sin(&a, addr, port);
	if (rdma_bind_addr(id, (struct sockaddr *)&a))
		return errno;
	return rdma_listen(id, backlog) ? errno : 0;
}

// gcm_addrs reads an id's addresses (IPv4, network order) and ports.
static void gcm_addrs(struct rdma_cm_id *id, uint32_t *src, uint16_t *sport, uint32_t *dst, uint16_t *dport) {
	struct sockaddr_in *s = (struct sockaddr_in *)rdma_get_local_addr(id);
	struct sockaddr_in *d = (struct sockaddr_in *)rdma_get_peer_addr(id);
	*src = s->sin_family == AF_INET ? s->sin_addr.s_addr : 0;
	*dst = d->sin_family == AF_INET ? d->sin_addr.s_addr : 0;
	*sport = ntohs(rdma_get_src_port(id));
	*dport = ntohs(rdma_get_dst_port(id));
}

static const char *gcm_devname(struct rdma_cm_id *id) {
	return id->verbs ? ibv_get_device_name(id->verbs->device) : "";
}

// gcm_modify brings qp to state with the attributes the kernel's rdma_cm
// computes for the id (rdma_init_qp_attr), as librdmacm does for a QP of
// its own.
static int gcm_modify(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state state) {
	struct ibv_qp_attr a;
	int mask;
	memset(&a, 0, sizeof a);
	a.qp_state = state;
	if (rdma_init_qp_attr(id, &a, &mask))
		return errno;
	return ibv_modify_qp(qp, &a, mask);
}

static void gcm_param(struct rdma_conn_param *p, uint32_t qpn, const void *pd, int pdlen, int rr, int depth, int retry, int rnr) {
	memset(p, 0, sizeof *p);
	p->qp_num = qpn;
	p->private_data = pd;
	p->private_data_len = pdlen;
	p->responder_resources = rr;
	p->initiator_depth = depth;
	p->retry_count = retry;
	p->rnr_retry_count = rnr;
}

static int gcm_connect(struct rdma_cm_id *id, uint32_t qpn, const void *pd, int pdlen, int rr, int depth, int retry, int rnr) {
	struct rdma_conn_param p;
	gcm_param(&p, qpn, pd, pdlen, rr, depth, retry, rnr);
	return rdma_connect(id, &p) ? errno : 0;
}

static int gcm_accept(struct rdma_cm_id *id, uint32_t qpn, const void *pd, int pdlen, int rr, int depth, int rnr) {
	struct rdma_conn_param p;
	gcm_param(&p, qpn, pd, pdlen, rr, depth, 0, rnr);
	return rdma_accept(id, &p) ? errno : 0;
}

static int gcm_reject(struct rdma_cm_id *id, const void *pd, int pdlen) { return rdma_reject(id, pd, pdlen) ? errno : 0; }
static int gcm_establish(struct rdma_cm_id *id) { return rdma_establish(id) ? errno : 0; }
static int gcm_disconnect(struct rdma_cm_id *id) { return rdma_disconnect(id) ? errno : 0; }
static int gcm_migrate(struct rdma_cm_id *id, struct rdma_event_channel *ch) { return rdma_migrate_id(id, ch) ? errno : 0; }
*/
import "C"

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// cmEvent is a copy of an rdma_cm event.
type cmEvent struct {
	kind   C.enum_rdma_cm_event_type
	status int
	id     *C.struct_rdma_cm_id
	pd     []byte
	rr     int
	depth  int
}

func (e cmEvent) String() string { return C.GoString(C.rdma_event_str(e.kind)) }

// cmChannel is an rdma_cm event channel, waited on through the Go
// runtime's poller.
type cmChannel struct {
	ch *C.struct_rdma_event_channel
	f  *os.File
}

func newCMChannel() (*cmChannel, error) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return nil, fmt.Errorf("ibverbs: rdma_create_event_channel: %w (is the rdma_cm module loaded?)", err)
	}
	f, err := pollable(int(ch.fd), "rdma_cm channel")
	if err != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, err
	}
	return &cmChannel{ch: ch, f: f}, nil
}

// get waits for the next event until ctx ends or the channel closes.
func (c *cmChannel) get(ctx context.Context) (cmEvent, error) {
	var ev C.struct_gcm_ev
	err := waitReadable(ctx, c.f, func() (bool, error) {
		switch rc := C.gcm_get(c.ch, &ev); rc {
		case 0:
			return true, nil
		case C.EAGAIN:
			return false, nil
		default:
			return false, fmt.Errorf("ibverbs: rdma_get_cm_event: %w", syscall.Errno(rc))
		}
	})
	if err != nil {
		return cmEvent{}, err
	}
	return cmEvent{kind: C.enum_rdma_cm_event_type(ev.event), status: int(ev.status), id: ev.id, rr: int(ev.rr), depth: int(ev.depth),
		pd: C.GoBytes(unsafe.Pointer(&ev.pd[0]), ev.pdlen)}, nil
}

// close stops waiters (their get fails) and frees the channel, whose ids
// must be gone.
func (c *cmChannel) close() {
	c.f.Close()
	C.rdma_destroy_event_channel(c.ch)
}

func cmErr(call string, rc C.int) error {
	return fmt.Errorf("ibverbs: %s: %w", call, syscall.Errno(rc))
}

func in4(a netip.Addr) C.uint32_t {
	b := a.Unmap().As4()
	return C.uint32_t(binary.NativeEndian.Uint32(b[:])) // already in network order in memory
}

func addrOf(v C.uint32_t, port C.uint16_t) netip.AddrPort {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], uint32(v))
	return netip.AddrPortFrom(netip.AddrFrom4(b), uint16(port))
}

func idAddrs(id *C.struct_rdma_cm_id) (local, remote netip.AddrPort) {
	var s, d C.uint32_t
	var sp, dp C.uint16_t
	C.gcm_addrs(id, &s, &sp, &d, &dp)
	return addrOf(s, sp), addrOf(d, dp)
}

// cmQP returns the provider's QP and checks that the id's device is the
// QP's.
func (d *Device) cmQP(id *C.struct_rdma_cm_id, qp verbs.QP) (*QP, error) {
	q, ok := qp.(*QP)
	if !ok {
		return nil, fmt.Errorf("ibverbs: rdma_cm: the QP is not this provider's: %w", verbs.ErrInvalidAttr)
	}
	if name := C.GoString(C.gcm_devname(id)); name != d.name {
		return nil, fmt.Errorf("ibverbs: rdma_cm: the address is on device %q, not %s: %w", name, d.name, verbs.ErrInvalidAttr)
	}
	return q, nil
}

// cmModify brings q through the states to want (INIT, RTR, RTS) with the
// kernel's attributes; a QP already in INIT (receives posted) skips it.
func cmModify(id *C.struct_rdma_cm_id, q *QP, states ...C.enum_ibv_qp_state) error {
	q.ctl.Lock()
	defer q.ctl.Unlock()
	if q.qp == nil {
		return fmt.Errorf("ibverbs: rdma_cm: %w", verbs.ErrDestroyed)
	}
	for _, st := range states {
		if st == C.IBV_QPS_INIT && q.qp.state == C.IBV_QPS_INIT {
			continue
		}
		if rc := C.gcm_modify(id, q.qp, st); rc != 0 {
			return cmErr(fmt.Sprintf("QP %#x to state %d (rdma_init_qp_attr, ibv_modify_qp)", q.num, st), rc)
		}
	}
	return nil
}

func cBytes(b []byte) (unsafe.Pointer, C.int, func()) {
	if len(b) == 0 {
		return nil, 0, func() {}
	}
	p := C.CBytes(b)
	return p, C.int(len(b)), func() { C.free(p) }
}

// cmConn is an established connection of an id with a channel of its own.
type cmConn struct {
	ch            *cmChannel
	id            *C.struct_rdma_cm_id
	local, remote netip.AddrPort
	peerPD        []byte
	done          chan struct{}
	loopDone      chan struct{}
	once          sync.Once
}

func newCMConn(ch *cmChannel, id *C.struct_rdma_cm_id, peerPD []byte) *cmConn {
	c := &cmConn{ch: ch, id: id, peerPD: peerPD, done: make(chan struct{}), loopDone: make(chan struct{})}
	c.local, c.remote = idAddrs(id)
	go c.loop()
	return c
}

// loop waits for the disconnect (the peer's DREQ, or the DREP of ours).
func (c *cmConn) loop() {
	defer close(c.loopDone)
	for {
		ev, err := c.ch.get(context.Background())
		if err != nil || ev.kind == C.RDMA_CM_EVENT_DISCONNECTED || ev.kind == C.RDMA_CM_EVENT_DEVICE_REMOVAL {
			c.once.Do(func() { close(c.done) })
			return
		}
	}
}

func (c *cmConn) Local() netip.AddrPort   { return c.local }
func (c *cmConn) Remote() netip.AddrPort  { return c.remote }
func (c *cmConn) PeerPrivateData() []byte { return c.peerPD }
func (c *cmConn) Done() <-chan struct{}   { return c.done }

// Close disconnects (DREQ), waits within ctx (3 s without a deadline) for
// the DISCONNECTED event, and frees the id and its channel.
func (c *cmConn) Close(ctx context.Context) error {
	C.gcm_disconnect(c.id)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 3e9)
		defer cancel()
	}
	select {
	case <-c.done:
	case <-ctx.Done():
	}
	c.ch.f.Close() // ends the loop if the event never came
	<-c.loopDone
	C.rdma_destroy_id(c.id)
	C.rdma_destroy_event_channel(c.ch.ch)
	return nil
}

// cmTimeoutMS bounds address and route resolution, as rping's 2 s.
const cmTimeoutMS = 2000

// cmWait waits for an event of the id, failing on another kind.
func cmWait(ctx context.Context, ch *cmChannel, want C.enum_rdma_cm_event_type, what string, to netip.AddrPort) (cmEvent, error) {
	ev, err := ch.get(ctx)
	if err != nil {
		return ev, err
	}
	if ev.kind == want {
		return ev, nil
	}
	switch ev.kind {
	case C.RDMA_CM_EVENT_REJECTED:
		return ev, fmt.Errorf("rdmacm: dial %v: %w", to, &rdmacm.RejectError{Reason: uint16(ev.status), PrivateData: ev.pd})
	case C.RDMA_CM_EVENT_ADDR_ERROR, C.RDMA_CM_EVENT_ROUTE_ERROR, C.RDMA_CM_EVENT_UNREACHABLE:
		err := syscall.Errno(-ev.status)
		if ev.status >= 0 {
			err = syscall.EHOSTUNREACH
		}
		return ev, fmt.Errorf("rdmacm: dial %v: %s: %w: %w", to, ev, rdmacm.ErrUnreachable, err)
	}
	return ev, fmt.Errorf("rdmacm: %s %v: %s (status %d), not %s", what, to, ev, ev.status, C.GoString(C.rdma_event_str(want)))
}

// CMDial connects qp to the rdma_cm listener at the address through
// librdmacm: the kernel's rdma_cm resolves the address and route (the
// device they lead to must be this one), sends the REQ, and computes the
// QP's attributes, with which the QP goes to RTR and RTS before
// rdma_establish sends the RTU. It implements rdmacm.Backend.
func (d *Device) CMDial(ctx context.Context, to netip.AddrPort, qp verbs.QP, p rdmacm.CMParams) (rdmacm.CMConn, error) {
	ch, err := newCMChannel()
	if err != nil {
		return nil, err
	}
	var id *C.struct_rdma_cm_id
	if rc := C.gcm_create(ch.ch, &id); rc != 0 {
		ch.close()
		return nil, cmErr("rdma_create_id", rc)
	}
	c, err := d.dial(ctx, ch, id, to, qp, p)
	if err != nil {
		ch.f.Close()
		C.rdma_destroy_id(id)
		C.rdma_destroy_event_channel(ch.ch)
		return nil, err
	}
	return c, nil
}

func (d *Device) dial(ctx context.Context, ch *cmChannel, id *C.struct_rdma_cm_id, to netip.AddrPort, qp verbs.QP, p rdmacm.CMParams) (*cmConn, error) {
	if rc := C.gcm_resolve_addr(id, in4(to.Addr()), C.uint16_t(to.Port()), cmTimeoutMS); rc != 0 {
		return nil, fmt.Errorf("rdmacm: dial %v: %w", to, cmErr("rdma_resolve_addr", rc))
	}
	if _, err := cmWait(ctx, ch, C.RDMA_CM_EVENT_ADDR_RESOLVED, "resolve", to); err != nil {
		return nil, err
	}
	q, err := d.cmQP(id, qp)
	if err != nil {
		return nil, err
	}
	if rc := C.gcm_resolve_route(id, cmTimeoutMS); rc != 0 {
		return nil, fmt.Errorf("rdmacm: dial %v: %w", to, cmErr("rdma_resolve_route", rc))
	}
	if _, err := cmWait(ctx, ch, C.RDMA_CM_EVENT_ROUTE_RESOLVED, "route", to); err != nil {
		return nil, err
	}
	if err := cmModify(id, q, C.IBV_QPS_INIT); err != nil {
		return nil, err
	}
	pd, n, free := cBytes(p.PrivateData)
	rc := C.gcm_connect(id, C.uint32_t(q.num), pd, n, C.int(p.ResponderResources), C.int(p.InitiatorDepth),
		C.int(p.RetryCount), C.int(p.RNRRetryCount))
	free()
	if rc != 0 {
		return nil, fmt.Errorf("rdmacm: dial %v: %w", to, cmErr("rdma_connect", rc))
	}
	ev, err := cmWait(ctx, ch, C.RDMA_CM_EVENT_CONNECT_RESPONSE, "connect", to)
	if err != nil {
		return nil, err
	}
	if err := cmModify(id, q, C.IBV_QPS_RTR, C.IBV_QPS_RTS); err != nil {
		C.gcm_reject(id, nil, 0)
		return nil, err
	}
	if rc := C.gcm_establish(id); rc != 0 {
		return nil, fmt.Errorf("rdmacm: dial %v: %w", to, cmErr("rdma_establish", rc))
	}
	return newCMConn(ch, id, ev.pd), nil
}

// cmListener is a listening id; its loop hands requests to Accept, each
// request's id moved to a channel of its own.
type cmListener struct {
	d        *Device
	ch       *cmChannel
	id       *C.struct_rdma_cm_id
	reqs     chan *cmRequest
	loopDone chan struct{}
	once     sync.Once
}

// CMListen listens for rdma_cm connections at the address through
// librdmacm (rdma_bind_addr, rdma_listen). It implements rdmacm.Backend.
func (d *Device) CMListen(ctx context.Context, at netip.AddrPort) (rdmacm.CMListener, error) {
	ch, err := newCMChannel()
	if err != nil {
		return nil, err
	}
	var id *C.struct_rdma_cm_id
	if rc := C.gcm_create(ch.ch, &id); rc != 0 {
		ch.close()
		return nil, cmErr("rdma_create_id", rc)
	}
	if rc := C.gcm_bind_listen(id, in4(at.Addr()), C.uint16_t(at.Port()), 128); rc != 0 {
		ch.f.Close()
		C.rdma_destroy_id(id)
		C.rdma_destroy_event_channel(ch.ch)
		return nil, fmt.Errorf("rdmacm: listen on %v: %w", at, cmErr("rdma_bind_addr, rdma_listen", rc))
	}
	l := &cmListener{d: d, ch: ch, id: id, reqs: make(chan *cmRequest, 128), loopDone: make(chan struct{})}
	go l.loop()
	return l, nil
}

func (l *cmListener) loop() {
	defer close(l.loopDone)
	defer close(l.reqs)
	for {
		ev, err := l.ch.get(context.Background())
		if err != nil {
			return
		}
		if ev.kind != C.RDMA_CM_EVENT_CONNECT_REQUEST {
			continue
		}
		r := &cmRequest{d: l.d, id: ev.id, pd: ev.pd, rr: ev.rr, depth: ev.depth}
		if err := r.own(); err != nil {
			C.gcm_reject(ev.id, nil, 0)
			C.rdma_destroy_id(ev.id)
			continue
		}
		select {
		case l.reqs <- r:
		default: // backlog full
			r.Reject(nil)
		}
	}
}

func (l *cmListener) Accept(ctx context.Context) (rdmacm.CMRequest, error) {
	select {
	case r, ok := <-l.reqs:
		if !ok {
			return nil, rdmacm.ErrClosed
		}
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening; requests not yet accepted are rejected.
func (l *cmListener) Close() error {
	l.once.Do(func() {
		l.ch.f.Close()
		<-l.loopDone
		for r := range l.reqs {
			r.Reject(nil)
		}
		C.rdma_destroy_id(l.id)
		C.rdma_destroy_event_channel(l.ch.ch)
	})
	return nil
}

// cmRequest is a CONNECT_REQUEST's id, on a channel of its own.
type cmRequest struct {
	d         *Device
	id        *C.struct_rdma_cm_id
	ch        *cmChannel
	pd        []byte
	rr, depth int
}

// own moves the request's id to a channel of its own.
func (r *cmRequest) own() error {
	ch, err := newCMChannel()
	if err != nil {
		return err
	}
	if rc := C.gcm_migrate(r.id, ch.ch); rc != 0 {
		ch.close()
		return cmErr("rdma_migrate_id", rc)
	}
	r.ch = ch
	return nil
}

func (r *cmRequest) Peer() netip.AddrPort    { _, p := idAddrs(r.id); return p }
func (r *cmRequest) Local() netip.AddrPort   { l, _ := idAddrs(r.id); return l }
func (r *cmRequest) PrivateData() []byte     { return r.pd }
func (r *cmRequest) ResponderResources() int { return r.rr }
func (r *cmRequest) InitiatorDepth() int     { return r.depth }

func (r *cmRequest) free() {
	r.ch.f.Close()
	C.rdma_destroy_id(r.id)
	C.rdma_destroy_event_channel(r.ch.ch)
}

// Reject refuses the request (REJ reason 28) and frees its id.
func (r *cmRequest) Reject(privateData []byte) error {
	pd, n, free := cBytes(privateData)
	rc := C.gcm_reject(r.id, pd, n)
	free()
	r.free()
	if rc != 0 {
		return cmErr("rdma_reject", rc)
	}
	return nil
}

// Accept brings qp to RTS with the kernel's attributes and accepts (REP);
// it returns on ESTABLISHED (the RTU).
func (r *cmRequest) Accept(ctx context.Context, qp verbs.QP, p rdmacm.CMParams) (rdmacm.CMConn, error) {
	q, err := r.d.cmQP(r.id, qp)
	if err == nil {
		err = cmModify(r.id, q, C.IBV_QPS_INIT, C.IBV_QPS_RTR, C.IBV_QPS_RTS)
	}
	if err != nil {
		r.Reject(nil)
		return nil, err
	}
	rr, depth := min(int(p.ResponderResources), r.depth), min(int(p.InitiatorDepth), r.rr)
	pd, n, free := cBytes(p.PrivateData)
	rc := C.gcm_accept(r.id, C.uint32_t(q.num), pd, n, C.int(rr), C.int(depth), C.int(p.RNRRetryCount))
	free()
	if rc != 0 {
		r.free()
		return nil, cmErr("rdma_accept", rc)
	}
	for {
		ev, err := r.ch.get(ctx)
		if err != nil {
			r.free()
			return nil, err
		}
		switch ev.kind {
		case C.RDMA_CM_EVENT_ESTABLISHED:
			return newCMConn(r.ch, r.id, r.pd), nil
		case C.RDMA_CM_EVENT_REJECTED, C.RDMA_CM_EVENT_CONNECT_ERROR, C.RDMA_CM_EVENT_UNREACHABLE, C.RDMA_CM_EVENT_DISCONNECTED:
			r.free()
			return nil, fmt.Errorf("rdmacm: accept from %v: %s: %w", r.Peer(), ev, rdmacm.ErrTimedOut)
		}
	}
}

var _ rdmacm.Backend = (*Device)(nil)
