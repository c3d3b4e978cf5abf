package probe_test

import (
	"github.com/goroce/goroce/verbs/rdmatest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// Loopback addresses of this package's soft devices (other test packages
// use other 127.0.x.y).
var (
	addrA = netip.MustParseAddr("127.0.44.1")
	addrB = netip.MustParseAddr("127.0.44.2")
	addrC = netip.MustParseAddr("127.0.44.3")
)

// softContext opens a soft device on a UDP socket bound to a (port 4791),
// closed at the end of the test.
func softContext(t testing.TB, a netip.Addr) (*soft.Device, verbs.Context) {
	t.Helper()
	return rdmatest.Context(t, "probe"+a.String(), a)
}

// collector gathers a prober's results.
type collector struct {
	mu  sync.Mutex
	rs  []probe.Result
	sig chan struct{}
}

func newCollector() *collector { return &collector{sig: make(chan struct{}, 1)} }

func (c *collector) add(r probe.Result) {
	c.mu.Lock()
	c.rs = append(c.rs, r)
	c.mu.Unlock()
	select {
	case c.sig <- struct{}{}:
	default:
	}
}

// wait waits up to d until pred holds for the results so far, and returns
// a copy of them.
func (c *collector) wait(t testing.TB, d time.Duration, pred func([]probe.Result) bool) []probe.Result {
	t.Helper()
	deadline := time.After(d)
	for {
		c.mu.Lock()
		rs := append([]probe.Result(nil), c.rs...)
		c.mu.Unlock()
		if pred(rs) {
			return rs
		}
		select {
		case <-c.sig:
		case <-deadline:
			return rs
		}
	}
}

func count(n int) func([]probe.Result) bool {
	return func(rs []probe.Result) bool { return len(rs) >= n }
}

// peerOf returns the Peer of a responder's QP i.
func peerOf(r *probe.Responder, i int) probe.Peer {
	g := r.GID()
	return probe.Peer{Name: g.Addr().String(), Addr: g.Addr(), GID: g, QPN: r.QPNs()[i], QKey: probe.QKey}
}

// rawUD is a UD queue pair the test drives by hand: a fake responder or a
// sender of forged and garbage payloads.
type rawUD struct {
	t   testing.TB
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
	buf []byte
	ahs map[verbs.GID]verbs.AH
}

const rawRecvSize = 40 + 2048

func newRawUD(t testing.TB, ctx verbs.Context) *rawUD {
	t.Helper()
	u := &rawUD{t: t, buf: make([]byte, 64*rawRecvSize+4096), ahs: map[verbs.GID]verbs.AH{}}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	u.pd, err = ctx.AllocPD()
	must(err)
	u.cq, err = ctx.CreateCQ(256, nil)
	must(err)
	u.mr, err = u.pd.RegMR(u.buf, verbs.AccessLocalWrite)
	must(err)
	u.qp, err = u.pd.CreateQP(&verbs.QPInitAttr{SendCQ: u.cq, RecvCQ: u.cq, QPType: verbs.QPTUD, SQSigAll: true,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(err)
	must(u.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: probe.QKey}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
	must(u.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState))
	must(u.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState|verbs.AttrSQPSN))
	for i := 0; i < 64; i++ {
		u.postRecv(i)
	}
	t.Cleanup(func() {
		u.qp.Destroy()
		for _, ah := range u.ahs {
			ah.Destroy()
		}
		u.cq.Destroy()
		u.mr.Dereg()
		u.pd.Dealloc()
	})
	return u
}

func (u *rawUD) postRecv(i int) {
	if _, err := u.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{{Addr: u.mr.Addr() + uint64(i*rawRecvSize), Length: rawRecvSize, LKey: u.mr.LKey()}}}}); err != nil {
		u.t.Fatal(err)
	}
}

// send sends payload to (gid, qpn) with Q_Key QKey and waits for its
// completion.
func (u *rawUD) send(payload []byte, gid verbs.GID, qpn uint32) {
	u.t.Helper()
	ah := u.ahs[gid]
	if ah == nil {
		var err error
		if ah, err = u.pd.CreateAH(&verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: gid, HopLimit: 64, PortNum: 1}); err != nil {
			u.t.Fatal(err)
		}
		u.ahs[gid] = ah
	}
	off := 64 * rawRecvSize
	n := copy(u.buf[off:], payload)
	if _, err := u.qp.PostSend([]verbs.SendWR{{WRID: 1 << 40, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: u.mr.Addr() + uint64(off), Length: uint32(n), LKey: u.mr.LKey()}},
		AH:     ah, RemoteQPN: qpn, RemoteQKey: probe.QKey}}); err != nil {
		u.t.Fatal(err)
	}
	if wc, ok := u.next(5 * time.Second); !ok || wc.WRID != 1<<40 || wc.Status != verbs.WCSuccess {
		u.t.Fatalf("send completion %+v, %v", wc, ok)
	}
}

// next polls the CQ for up to d.
func (u *rawUD) next(d time.Duration) (verbs.WC, bool) {
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(d)
	for u.cq.Poll(wc) == 0 {
		if time.Now().After(deadline) {
			return verbs.WC{}, false
		}
		time.Sleep(20 * time.Microsecond)
	}
	return wc[0], true
}

// recv waits up to d for a receive and returns its payload (a copy) and
// source QPN, the receive buffer posted again.
func (u *rawUD) recv(d time.Duration) ([]byte, uint32, bool) {
	u.t.Helper()
	wc, ok := u.next(d)
	if !ok {
		return nil, 0, false
	}
	if wc.Opcode != verbs.WCRecv || wc.Status != verbs.WCSuccess {
		u.t.Fatalf("unexpected completion %+v", wc)
	}
	i := int(wc.WRID)
	b := append([]byte(nil), u.buf[i*rawRecvSize+40:i*rawRecvSize+int(wc.ByteLen)]...)
	u.postRecv(i)
	return b, wc.SrcQP, true
}

type atomicBool = atomic.Bool

// noStamps wraps a verbs.Context as a device without completion
// timestamps (as libibverbs' providers are): its CQs' completions carry
// WC.Timestamp 0 and QueryDevice says TimestampNone.
type noStamps struct{ verbs.Context }

func (c noStamps) QueryDevice() (verbs.DeviceAttr, error) {
	a, err := c.Context.QueryDevice()
	a.CompletionTimestamps = verbs.TimestampNone
	return a, err
}

func (c noStamps) CreateCQ(n int, ch verbs.CompChannel) (verbs.CQ, error) {
	cq, err := c.Context.CreateCQ(n, ch)
	if err != nil {
		return nil, err
	}
	return noStampCQ{cq}, nil
}

func (c noStamps) AllocPD() (verbs.PD, error) {
	pd, err := c.Context.AllocPD()
	if err != nil {
		return nil, err
	}
	return noStampPD{pd}, nil
}

type noStampCQ struct{ verbs.CQ }

func (q noStampCQ) Poll(wc []verbs.WC) int {
	n := q.CQ.Poll(wc)
	for i := range wc[:n] {
		wc[i].Timestamp = 0
	}
	return n
}

type noStampPD struct{ verbs.PD }

func (p noStampPD) CreateQP(a *verbs.QPInitAttr) (verbs.QP, error) {
	b := *a
	if q, ok := b.SendCQ.(noStampCQ); ok {
		b.SendCQ = q.CQ
	}
	if q, ok := b.RecvCQ.(noStampCQ); ok {
		b.RecvCQ = q.CQ
	}
	return p.PD.CreateQP(&b)
}

// reset forgets the results so far.
func (c *collector) reset() {
	c.mu.Lock()
	c.rs = nil
	c.mu.Unlock()
}
