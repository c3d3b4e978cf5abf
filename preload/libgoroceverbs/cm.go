//go:build linux && cgo && ibverbs

package main

/*
#include "shim.h"
#include "cmshim.h"
*/
import "C"

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/goroce/goroce/cm/rdmacm"
)

// gechan is an rdma_cm event channel: its events wait in a queue whose
// eventfd is the channel's fd.
type gechan struct {
	c  *C.struct_rdma_event_channel
	ev *eventQueue[*C.struct_rdma_cm_event]
}

// gcmid is an rdma_cm_id.
type gcmid struct {
	c      *C.struct_rdma_cm_id
	ch     *gechan
	d      *gdev
	local  netip.AddrPort
	remote netip.AddrPort
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	qp       *gqp
	listener *rdmacm.Listener
	req      *rdmacm.Request
	conn     *rdmacm.Conn
	tos, ack uint8
	gone     sync.Once // DISCONNECTED is sent once

	// A listening id's listener stays open while requests it gave lie
	// unanswered (closing it would refuse them), as destroying a listening
	// rdma_cm_id leaves the ids of its connection requests alone.
	parent  *gcmid // of a connection request's id
	pending int
	closing bool
	settle  sync.Once // a request's id: answered, or destroyed
}

// A new rdma_listen on an address in use tries again for listenWait when a
// listening id on its port was destroyed lately (recentClose): a program
// that destroys its listening id as soon as it has called rdma_accept, and
// listens again at once (perftest -R's server does), would otherwise find
// the address in use while the accept's REP and RTU are on their way (the
// listener stays open for its pending requests) or the listener's close is
// still on its way, where Linux's frees it at once.
const listenWait = 2 * time.Second

// recentClose holds when a listening id of this process on a port was last
// destroyed (uint16 -> time.Time): a new rdma_listen on that port that finds
// it in use tries again for listenWait, as the listener's close (its
// manager's Unlisten) may still be on its way when no request kept it open,
// or the address forms differ (0.0.0.0 and the device's).
var recentClose sync.Map

// listenAgain reports whether a rdma_listen on a that found the address in
// use should try again: a listener on its port was destroyed within
// listenWait. It waits 10 ms first.
func listenAgain(a netip.AddrPort, since time.Time) bool {
	v, ok := recentClose.Load(a.Port())
	if !ok || time.Since(v.(time.Time)) > listenWait || time.Since(since) > listenWait {
		return false
	}
	time.Sleep(10 * time.Millisecond)
	return true
}

// settled says that the request of child was answered or dropped.
func (id *gcmid) settled() {
	p := id.parent
	if p == nil {
		return
	}
	id.settle.Do(func() {
		p.mu.Lock()
		p.pending--
		l := p.listener
		last := p.closing && p.pending == 0
		p.mu.Unlock()
		if last {
			p.cancel()
			if l != nil {
				l.Close()
			}
		}
	})
}

//export gr_create_event_channel
func gr_create_event_channel(out **C.struct_rdma_event_channel) C.int {
	ev, err := newEventQueue[*C.struct_rdma_cm_event]()
	if err != nil {
		return fail(err)
	}
	ch := (*C.struct_rdma_event_channel)(C.calloc(1, C.sizeof_struct_rdma_event_channel))
	ch.fd = C.int(ev.fd)
	put(unsafe.Pointer(ch), &gechan{c: ch, ev: ev})
	*out = ch
	return 0
}

//export gr_destroy_event_channel
func gr_destroy_event_channel(ch *C.struct_rdma_event_channel) {
	o := get[gechan](unsafe.Pointer(ch))
	if o == nil {
		return
	}
	del(unsafe.Pointer(ch))
	o.ev.close()
	for e, ok := o.ev.pop(); ok; e, ok = o.ev.pop() {
		C.gr_cm_event_free(e)
	}
	retire(unsafe.Pointer(ch))
}

//export gr_event_channel_ok
func gr_event_channel_ok(ch *C.struct_rdma_event_channel) C.int {
	if get[gechan](unsafe.Pointer(ch)) == nil {
		return 0
	}
	return 1
}

// gr_cm_event takes the event whose count cm.c read from the channel's fd;
// events of destroyed ids are dropped.
//
//export gr_cm_event
func gr_cm_event(ch *C.struct_rdma_event_channel, out **C.struct_rdma_cm_event) C.int {
	o := get[gechan](unsafe.Pointer(ch))
	if o == nil {
		return einval
	}
	e, ok := o.ev.pop()
	if !ok {
		return C.int(syscall.EAGAIN)
	}
	*out = e
	return 0
}

// event queues an event of id (and of listen for a connection request).
func (id *gcmid) event(listen *gcmid, typ C.int, status int, pdata []byte, rr, depth int) {
	var p unsafe.Pointer
	if len(pdata) > 0 {
		p = C.CBytes(pdata)
		defer C.free(p)
	}
	var l *C.struct_rdma_cm_id
	if listen != nil {
		l = listen.c
	}
	e := C.gr_cm_event_new(id.c, l, typ, C.int(status), p, C.int(len(pdata)), C.int(rr), C.int(depth))
	if e != nil {
		id.ch.ev.push(e)
	}
}

//export gr_create_id
func gr_create_id(ch *C.struct_rdma_event_channel, out **C.struct_rdma_cm_id, uctx unsafe.Pointer, ps C.enum_rdma_port_space) C.int {
	o := get[gechan](unsafe.Pointer(ch))
	if o == nil {
		return einval // a NULL channel (synchronous ids) is not served
	}
	if ps != C.RDMA_PS_TCP && ps != C.RDMA_PS_IB {
		return C.int(syscall.EPROTONOSUPPORT)
	}
	id := newID(o, uctx, ps)
	*out = id.c
	return 0
}

func newID(ch *gechan, uctx unsafe.Pointer, ps C.enum_rdma_port_space) *gcmid {
	c := (*C.struct_rdma_cm_id)(C.calloc(1, C.sizeof_struct_rdma_cm_id))
	c.channel = ch.c
	c.context = uctx
	c.ps = ps
	c.port_num = 1
	c.qp_type = C.IBV_QPT_RC
	id := &gcmid{c: c, ch: ch}
	id.ctx, id.cancel = context.WithCancel(context.Background())
	put(unsafe.Pointer(c), id)
	return id
}

//export gr_destroy_id
func gr_destroy_id(c *C.struct_rdma_cm_id) C.int {
	id := get[gcmid](unsafe.Pointer(c))
	if id == nil {
		return einval
	}
	del(unsafe.Pointer(c))
	id.mu.Lock()
	l, conn := id.listener, id.conn
	id.closing = true
	keep := id.pending > 0
	if l != nil {
		recentClose.Store(l.Addr().Port(), time.Now())
	}
	id.mu.Unlock()
	if !keep {
		id.cancel()
	}
	if l != nil && !keep {
		l.Close()
	}
	id.settled()
	if conn != nil {
		go conn.Close()
	}
	retire(unsafe.Pointer(c))
	return 0
}

func addrOf(a C.struct_gr_inaddr) (netip.AddrPort, bool) {
	if a.ok == 0 {
		return netip.AddrPort{}, false
	}
	b := C.GoBytes(unsafe.Pointer(&a.ip[0]), 16)
	ip, _ := netip.AddrFromSlice(b[:4])
	if a.is6 != 0 {
		ip, _ = netip.AddrFromSlice(b)
		ip = ip.Unmap()
	}
	return netip.AddrPortFrom(ip, uint16(a.port)), true
}

func inaddr(ap netip.AddrPort) C.struct_gr_inaddr {
	var a C.struct_gr_inaddr
	ip := ap.Addr()
	if ip.Is4() {
		b := ip.As4()
		for i := range b {
			a.ip[i] = C.uint8_t(b[i])
		}
	} else {
		b := ip.As16()
		for i := range b {
			a.ip[i] = C.uint8_t(b[i])
		}
		a.is6 = 1
	}
	a.port = C.uint16_t(ap.Port())
	a.ok = 1
	return a
}

// attach puts id on the device of address ip (the first device for an
// unspecified address) and its shared context.
func (id *gcmid) attach(ip netip.Addr) syscall.Errno {
	ds, err := configured()
	if err != nil || len(ds) == 0 {
		return syscall.ENODEV
	}
	d := ds[0]
	if ip.IsValid() && !ip.IsUnspecified() {
		d = nil
		for _, x := range ds {
			if a, err := netip.ParseAddr(x.opts.Addr); err == nil && a == ip.Unmap() {
				d = x
			}
		}
		if d == nil {
			return syscall.EADDRNOTAVAIL
		}
	}
	c, e := d.cmContext()
	if e != 0 {
		return e
	}
	id.d = d
	id.c.verbs = c
	return 0
}

// cmContext is the context rdma_cm ids of the device share, opened once.
func (d *gdev) cmContext() (*C.struct_ibv_context, syscall.Errno) {
	d.cmOnce.Do(func() {
		var c *C.struct_ibv_context
		if e := gr_open_device(d.c, &c); e != 0 {
			d.cmErr = syscall.Errno(e)
			return
		}
		d.cm = c
	})
	return d.cm, d.cmErr
}

//export gr_bind_addr
func gr_bind_addr(c *C.struct_rdma_cm_id, a C.struct_gr_inaddr) C.int {
	id := get[gcmid](unsafe.Pointer(c))
	ap, ok := addrOf(a)
	if id == nil || !ok {
		return einval
	}
	if e := id.attach(ap.Addr()); e != 0 {
		return C.int(e)
	}
	id.local = ap
	C.gr_set_addr(c, 0, a)
	return 0
}

//export gr_resolve_addr
func gr_resolve_addr(c *C.struct_rdma_cm_id, src, dst C.struct_gr_inaddr) C.int {
	id := get[gcmid](unsafe.Pointer(c))
	to, ok := addrOf(dst)
	if id == nil || !ok {
		return einval
	}
	from, _ := addrOf(src)
	if id.d == nil || from.IsValid() {
		if e := id.attach(from.Addr()); e != 0 {
			return C.int(e)
		}
	}
	if !id.local.IsValid() {
		a, _ := netip.ParseAddr(id.d.opts.Addr)
		id.local = netip.AddrPortFrom(a, 0)
	}
	id.remote = to
	C.gr_set_addr(c, 0, inaddr(id.local))
	C.gr_set_addr(c, 1, dst)
	id.event(nil, C.RDMA_CM_EVENT_ADDR_RESOLVED, 0, nil, 0, 0)
	return 0
}

//export gr_resolve_route
func gr_resolve_route(c *C.struct_rdma_cm_id) C.int {
	id := get[gcmid](unsafe.Pointer(c))
	if id == nil || !id.remote.IsValid() {
		return einval
	}
	id.event(nil, C.RDMA_CM_EVENT_ROUTE_RESOLVED, 0, nil, 0, 0)
	return 0
}

//export gr_listen
func gr_listen(c *C.struct_rdma_cm_id) C.int {
	id := get[gcmid](unsafe.Pointer(c))
	if id == nil || id.d == nil {
		return einval
	}
	start := time.Now()
	l, err := rdmacm.Listen(id.ctx, id.d.dev, id.local.String())
	for errors.Is(err, rdmacm.ErrAddrInUse) && listenAgain(id.local, start) {
		l, err = rdmacm.Listen(id.ctx, id.d.dev, id.local.String())
	}
	if err != nil {
		warn("rdma_listen on %v: %v", id.local, err)
		return C.int(syscall.EADDRINUSE)
	}
	id.mu.Lock()
	id.listener = l
	id.mu.Unlock()
	go id.accepts(l)
	debug("rdma_listen: listening on %v", l.Addr())
	return 0
}

// accepts turns each connection request into a new id and a
// CONNECT_REQUEST event, until the listening id is destroyed.
func (id *gcmid) accepts(l *rdmacm.Listener) {
	for {
		r, err := l.Accept(id.ctx)
		if err != nil {
			return
		}
		id.mu.Lock()
		if id.closing {
			// Destroyed, kept open for requests being answered: refused
			// as by no listener (REJ 8), which a dialer waiting for a
			// listener sends again, to the next one on the address.
			id.mu.Unlock()
			r.Refuse()
			continue
		}
		id.pending++
		id.mu.Unlock()
		child := newID(id.ch, id.c.context, id.c.ps)
		child.parent = id
		child.d, child.c.verbs = id.d, id.c.verbs
		child.local, child.remote, child.req = r.Local(), r.Peer(), r
		C.gr_set_addr(child.c, 0, inaddr(r.Local()))
		C.gr_set_addr(child.c, 1, inaddr(r.Peer()))
		child.event(id, C.RDMA_CM_EVENT_CONNECT_REQUEST, 0, r.PrivateData, r.ResponderResources(), r.InitiatorDepth())
	}
}

//export gr_cm_create_qp
func gr_cm_create_qp(c *C.struct_rdma_cm_id, pd *C.struct_ibv_pd, attr *C.struct_ibv_qp_init_attr) C.int {
	id := get[gcmid](unsafe.Pointer(c))
	if id == nil || id.c.verbs == nil || attr == nil || c.qp != nil {
		return einval
	}
	if pd == nil {
		if c.pd == nil {
			if e := gr_alloc_pd(c.verbs, &c.pd); e != 0 {
				return e
			}
		}
		pd = c.pd
	}
	if pd.context != c.verbs {
		return einval
	}
	var q *C.struct_ibv_qp
	if e := gr_create_qp(pd, attr, &q); e != 0 {
		return e
	}
	o := get[gqp](unsafe.Pointer(q))
	if err := rdmacm.InitQP(o.v); err != nil {
		gr_destroy_qp(q)
		return fail(err)
	}
	q.state = C.IBV_QPS_INIT
	c.qp, c.send_cq, c.recv_cq, c.srq = q, attr.send_cq, attr.recv_cq, attr.srq
	id.mu.Lock()
	id.qp = o
	id.mu.Unlock()
	return 0
}

//export gr_cm_destroy_qp
func gr_cm_destroy_qp(c *C.struct_rdma_cm_id) {
	id := get[gcmid](unsafe.Pointer(c))
	if id == nil || c.qp == nil {
		return
	}
	gr_destroy_qp(c.qp)
	c.qp = nil
	id.mu.Lock()
	id.qp = nil
	id.mu.Unlock()
}

//export gr_set_option
func gr_set_option(c *C.struct_rdma_cm_id, opt C.int, val C.int) C.int {
	id := get[gcmid](unsafe.Pointer(c))
	if id == nil {
		return einval
	}
	switch opt {
	case C.RDMA_OPTION_ID_TOS:
		id.tos = uint8(val)
	case C.RDMA_OPTION_ID_ACK_TIMEOUT:
		id.ack = uint8(val)
	}
	return 0
}

func gobytes(p unsafe.Pointer, n C.int) []byte {
	if p == nil || n <= 0 {
		return nil
	}
	return C.GoBytes(p, n)
}

//export gr_connect
func gr_connect(c *C.struct_rdma_cm_id, pdata unsafe.Pointer, plen, rr, depth, retry, rnr C.int) C.int {
	id := get[gcmid](unsafe.Pointer(c))
	if id == nil || !id.remote.IsValid() || id.qp == nil {
		return einval // a connect without a QP on the id is not served
	}
	opts := rdmacm.DialOptions{
		ResponderResources: orNone(int(rr)), InitiatorDepth: orNone(int(depth)),
		RetryCount: int(retry), RNRRetryCount: int(rnr), PrivateData: gobytes(pdata, plen),
		TrafficClass: id.tos, ACKTimeout: id.ack, RetryRefused: retryRefused(),
	}
	qp := id.qp
	go func() {
		conn, err := rdmacm.Dial(id.ctx, id.d.dev, id.remote.String(), qp.v, opts)
		if err != nil {
			id.failed(err)
			return
		}
		id.established(conn, int(rr), int(depth))
	}()
	return 0
}

// retryRefused is how long rdma_connect keeps dialing a peer that refuses
// for want of a listener (REJ 8) before it says REJECTED: GOROCE_CM_RETRY
// (a duration; 0 dials once, as Linux's rdma_cm), default 1s. Programs that
// connect twice in a row (perftest -R: a connection for the exchange, then
// the test's) otherwise race their server's second rdma_listen.
func retryRefused() time.Duration {
	if v := os.Getenv("GOROCE_CM_RETRY"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return time.Second
}

// orNone maps rdma_conn_param's 0 (none) to DialOptions' "ask 0".
func orNone(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func (id *gcmid) failed(err error) {
	if id.ctx.Err() != nil {
		return
	}
	debug("rdma_connect to %v: %v", id.remote, err)
	var rej *rdmacm.RejectError
	var path *rdmacm.PathError
	switch {
	case errors.As(err, &rej):
		id.event(nil, C.RDMA_CM_EVENT_REJECTED, int(rej.Reason), rej.PrivateData, 0, 0)
	case errors.As(err, &path):
		id.event(nil, C.RDMA_CM_EVENT_UNREACHABLE, -int(syscall.EHOSTUNREACH), nil, 0, 0)
	case errors.Is(err, context.DeadlineExceeded):
		id.event(nil, C.RDMA_CM_EVENT_UNREACHABLE, -int(syscall.ETIMEDOUT), nil, 0, 0)
	default:
		id.event(nil, C.RDMA_CM_EVENT_CONNECT_ERROR, -int(errno(err)), nil, 0, 0)
	}
}

// established records the connection, says ESTABLISHED and, when it ends,
// DISCONNECTED.
func (id *gcmid) established(conn *rdmacm.Conn, rr, depth int) {
	id.mu.Lock()
	id.conn = conn
	if id.qp != nil {
		id.qp.c.state = C.IBV_QPS_RTS
	}
	id.mu.Unlock()
	id.event(nil, C.RDMA_CM_EVENT_ESTABLISHED, 0, conn.PeerPrivateData(), rr, depth)
	go func() {
		select {
		case <-conn.Done():
			id.disconnected()
		case <-id.ctx.Done():
		}
	}()
}

func (id *gcmid) disconnected() {
	id.gone.Do(func() {
		if id.ctx.Err() == nil {
			id.event(nil, C.RDMA_CM_EVENT_DISCONNECTED, 0, nil, 0, 0)
		}
	})
}

//export gr_accept
func gr_accept(c *C.struct_rdma_cm_id, pdata unsafe.Pointer, plen, rr, depth, rnr C.int) C.int {
	id := get[gcmid](unsafe.Pointer(c))
	if id == nil || id.req == nil || id.qp == nil {
		return einval
	}
	opts := rdmacm.AcceptOptions{
		ResponderResources: orNone(int(rr)), InitiatorDepth: orNone(int(depth)), RNRRetryCount: int(rnr),
		PrivateData: gobytes(pdata, plen), ACKTimeout: id.ack,
	}
	req, qp := id.req, id.qp
	go func() {
		conn, err := req.Accept(id.ctx, qp.v, opts)
		id.settled()
		if err != nil {
			debug("rdma_accept from %v: %v", id.remote, err)
			if id.ctx.Err() == nil {
				id.event(nil, C.RDMA_CM_EVENT_CONNECT_ERROR, -int(errno(err)), nil, 0, 0)
			}
			return
		}
		id.established(conn, int(rr), int(depth))
	}()
	return 0
}

//export gr_reject
func gr_reject(c *C.struct_rdma_cm_id, pdata unsafe.Pointer, plen C.int) C.int {
	id := get[gcmid](unsafe.Pointer(c))
	if id == nil || id.req == nil {
		return einval
	}
	err := id.req.Reject(gobytes(pdata, plen))
	id.settled()
	return fail(err)
}

//export gr_disconnect
func gr_disconnect(c *C.struct_rdma_cm_id) C.int {
	id := get[gcmid](unsafe.Pointer(c))
	if id == nil {
		return einval
	}
	id.mu.Lock()
	conn := id.conn
	if id.qp != nil {
		id.qp.c.state = C.IBV_QPS_ERR
	}
	id.mu.Unlock()
	if conn == nil {
		return einval
	}
	go func() {
		conn.Close()
		id.disconnected()
	}()
	return 0
}
