//go:build linux

package rdmacm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/cm/ib"
	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/internal/leakcheck"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// newDev opens a soft device on a UDP socket at addr.
func newDev(t testing.TB, addr string) *soft.Device {
	t.Helper()
	c, err := udp.Listen(netip.MustParseAddr(addr), udp.Options{})
	if err != nil {
		t.Skipf("UDP socket on %v: %v", addr, err)
	}
	d, err := soft.New(soft.Options{Name: "soft-" + addr, Conn: c})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// side is one end's verbs objects: a CQ, 4 KiB of registered memory and
// an RC QP with a receive posted.
type side struct {
	ctx verbs.Context
	pd  verbs.PD
	cq  verbs.CQ
	mr  verbs.MR
	qp  verbs.QP
}

func newSide(t testing.TB, d *soft.Device) *side {
	t.Helper()
	s := &side{}
	var err error
	must := func(e error) {
		t.Helper()
		if e != nil {
			t.Fatal(e)
		}
	}
	s.ctx, err = d.Open()
	must(err)
	s.pd, err = s.ctx.AllocPD()
	must(err)
	s.cq, err = s.ctx.CreateCQ(64, nil)
	must(err)
	s.mr, err = s.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	must(err)
	s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(err)
	t.Cleanup(s.close)
	return s
}

func (s *side) close() {
	s.qp.Destroy()
	s.mr.Dereg()
	s.cq.Destroy()
	s.pd.Dealloc()
	s.ctx.Close()
}

func (s *side) postRecv(t testing.TB) {
	t.Helper()
	if err := rdmacm.InitQP(s.qp); err != nil {
		t.Fatal(err)
	}
	if _, err := s.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGList: []verbs.SGE{{Addr: s.mr.Addr() + 2048, Length: 64, LKey: s.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
}

func (s *side) poll(t testing.TB) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if s.cq.Poll(wc) == 1 {
			return wc[0]
		}
		runtime.Gosched()
	}
	t.Fatal("no completion")
	return verbs.WC{}
}

// TestDialListen: a whole connection between two soft devices over UDP:
// the request as the listener sees it, private data both ways, an RDMA
// WRITE and a SEND over the connected QPs, and a disconnect the other side
// sees.
func TestDialListen(t *testing.T) {
	devA, devB := newDev(t, "127.0.10.1"), newDev(t, "127.0.10.2")
	a, b := newSide(t, devA), newSide(t, devB)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := rdmacm.Listen(ctx, devB, ":7174")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := rdmacm.Listen(ctx, devB, "127.0.10.2:7174"); !errors.Is(err, rdmacm.ErrAddrInUse) {
		t.Fatalf("second listener: %v", err)
	}
	type result struct {
		c   *rdmacm.Conn
		err error
	}
	dialed := make(chan result, 1)
	a.postRecv(t)
	go func() {
		var priv [12]byte
		binary.BigEndian.PutUint64(priv[:], a.mr.Addr())
		binary.BigEndian.PutUint32(priv[8:], a.mr.RKey())
		c, err := rdmacm.Dial(ctx, devA, "127.0.10.2:7174", a.qp, rdmacm.DialOptions{PrivateData: priv[:], InitiatorDepth: 2, ResponderResources: 3})
		dialed <- result{c, err}
	}()
	req, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if req.Peer().Addr() != netip.MustParseAddr("127.0.10.1") || req.Peer().Port() < 32768 ||
		req.Local() != netip.MustParseAddrPort("127.0.10.2:7174") || req.ResponderResources() != 3 || req.InitiatorDepth() != 2 {
		t.Fatalf("request from %v to %v, depths %d %d", req.Peer(), req.Local(), req.ResponderResources(), req.InitiatorDepth())
	}
	va, rkey := binary.BigEndian.Uint64(req.PrivateData), binary.BigEndian.Uint32(req.PrivateData[8:])
	b.postRecv(t)
	cb, err := req.Accept(ctx, b.qp, rdmacm.AcceptOptions{PrivateData: []byte("welcome"),
		ResponderResources: 4, InitiatorDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	r := <-dialed
	if r.err != nil {
		t.Fatal(r.err)
	}
	ca := r.c
	if string(ca.PeerPrivateData()) != "welcome" || ca.RemoteAddr() != netip.MustParseAddrPort("127.0.10.2:7174") {
		t.Fatalf("dialer sees %q from %v", ca.PeerPrivateData()[:7], ca.RemoteAddr())
	}
	qa, _ := a.qp.Query()
	qb, _ := b.qp.Query()
	if qa.State != verbs.QPSRTS || qb.State != verbs.QPSRTS || qa.DestQPN != b.qp.Num() || qb.DestQPN != a.qp.Num() ||
		qa.SQPSN != qb.RQPSN || qb.SQPSN != qa.RQPSN || qa.MaxRdAtomic != 2 || qb.MaxDestRdAtomic != 2 ||
		qb.MaxRdAtomic != 3 || qa.MaxDestRdAtomic != 3 {
		t.Fatalf("QPs\nA %+v\nB %+v", qa, qb)
	}

	// B writes into A's memory at what A's private data said, then SENDs.
	copy(b.mr.Buf(), "written by B over rdma_cm")
	if _, err := b.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: b.mr.Addr(), Length: 25, LKey: b.mr.LKey()}}, RemoteAddr: va, RKey: rkey},
		{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{{Addr: b.mr.Addr(), Length: 5, LKey: b.mr.LKey()}}},
	}); err != nil {
		t.Fatal(err)
	}
	if wc := b.poll(t); wc.Status != verbs.WCSuccess || wc.WRID != 2 {
		t.Fatalf("B's completion %+v", wc)
	}
	if wc := a.poll(t); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.ByteLen != 5 {
		t.Fatalf("A's completion %+v", wc)
	}
	if got := string(a.mr.Buf()[:25]); got != "written by B over rdma_cm" {
		t.Fatalf("A's memory: %q", got)
	}

	// A closes; B sees it.
	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ca.Done():
	default:
		t.Fatal("closed connection not done")
	}
	select {
	case <-cb.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("B did not see the disconnect")
	}
	if !errors.Is(cb.Err(), rdmacm.ErrDisconnected) || !errors.Is(ca.Err(), rdmacm.ErrClosed) {
		t.Fatalf("errors %v / %v", ca.Err(), cb.Err())
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if q, _ := b.qp.Query(); q.State == verbs.QPSErr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B's QP not in ERROR after the disconnect")
		}
		time.Sleep(time.Millisecond)
	}
	if err := cb.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRefused: a dial to a port nobody listens on fails with REJ 8 at
// once; a listener that refuses sends its private data back.
func TestRefused(t *testing.T) {
	devA, devB := newDev(t, "127.0.10.3"), newDev(t, "127.0.10.4")
	a, b := newSide(t, devA), newSide(t, devB)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rdmacm.Attach(devB, rdmacm.MachineConfig{}) // B has a CM that listens on nothing
	start := time.Now()
	_, err := rdmacm.Dial(ctx, devA, "127.0.10.4:9999", a.qp, rdmacm.DialOptions{})
	var rej *rdmacm.RejectError
	if !errors.Is(err, rdmacm.ErrRefused) || !errors.As(err, &rej) || rej.Reason != ib.RejInvalidServiceID {
		t.Fatalf("dial to nobody: %v", err)
	}
	t.Logf("refused in %v: %v", time.Since(start), err)
	if q, _ := a.qp.Query(); q.State != verbs.QPSReset && q.State != verbs.QPSErr {
		t.Errorf("refused dial left the QP in %v", q.State)
	}
	a.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState)

	l, err := rdmacm.Listen(ctx, devB, "127.0.10.4:7175")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if req, err := l.Accept(ctx); err == nil {
			req.Reject([]byte("not today"))
		}
	}()
	_, err = rdmacm.Dial(ctx, devA, "127.0.10.4:7175", a.qp, rdmacm.DialOptions{})
	a.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState)
	if !errors.As(err, &rej) || rej.Reason != ib.RejConsumer || string(rej.PrivateData[:9]) != "not today" {
		t.Fatalf("rejected dial: %v", err)
	}
	_ = b
	// A listener nobody dials: Accept ends with its context, Close ends
	// a waiting Accept.
	idle, err := rdmacm.Listen(ctx, devB, ":7176")
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, err := idle.Accept(actx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle Accept: %v", err)
	}
	acancel()
	go func() { time.Sleep(20 * time.Millisecond); idle.Close() }()
	if _, err := idle.Accept(ctx); !errors.Is(err, rdmacm.ErrClosed) {
		t.Fatalf("Accept on a closed listener: %v", err)
	}
	// Listening on an address that is not the device's.
	if _, err := rdmacm.Listen(ctx, devB, "127.0.10.99:1"); err == nil {
		t.Fatal("listen on a foreign address")
	}
}

// TestVanished: a peer that answers nothing (a UDP socket that swallows the
// REQ): the dial ends with the context, or after the configured retries
// with ErrUnreachable; a listener whose dialer vanishes after the REQ
// times out the request; nothing is left behind.
func TestVanished(t *testing.T) {
	devA := newDev(t, "127.0.10.5")
	a := newSide(t, devA)
	sink, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.10.6:4791")))
	if err != nil {
		t.Skip(err)
	}
	defer sink.Close()
	mg := rdmacm.Attach(devA, rdmacm.MachineConfig{ResponseTimeout: 16, PacketLifeTime: 6, MaxRetries: 2, QuickRetry: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err = rdmacm.Dial(ctx, devA, "127.0.10.6:7174", a.qp, rdmacm.DialOptions{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial with a deadline: %v", err)
	}
	start := time.Now()
	a.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState)
	_, err = rdmacm.Dial(context.Background(), devA, "127.0.10.6:7174", a.qp, rdmacm.DialOptions{})
	if !errors.Is(err, rdmacm.ErrUnreachable) || !errors.Is(err, rdmacm.ErrTimedOut) {
		t.Fatalf("dial to a silent peer: %v", err)
	}
	t.Logf("unreachable after %v (3 REQs, %v apart)", time.Since(start), time.Duration(ib.TimeoutNanos(16)+2*ib.TimeoutNanos(6)))
	buf := make([]byte, 2048)
	reqs := 0
	for {
		sink.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, _, err := sink.ReadFromUDP(buf)
		if err != nil {
			break
		}
		var p wire.Packet
		if wire.Parse(buf[:n], &p) == nil && p.BTH().DestQP() == 1 {
			if h, _, err := ib.CheckCM(p.Payload()); err == nil && h.AttrID == ib.AttrREQ {
				reqs++
			}
		}
	}
	if reqs != 1+3 { // the first dial's one, the second's three
		t.Errorf("the sink got %d REQs", reqs)
	}
	if s := mg.Stats(); s.Conns != 0 {
		t.Errorf("%d connections left", s.Conns)
	}

	// A dialer that vanishes after its REQ: the listener's request times
	// out (MRA timeout), Accept after that fails.
	devB := newDev(t, "127.0.10.7")
	b := newSide(t, devB)
	rdmacm.Attach(devB, rdmacm.MachineConfig{MRATimeout: 14}) // 67 ms
	l, err := rdmacm.Listen(context.Background(), devB, ":7174")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState)
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	go rdmacm.Dial(ctx, devA, "127.0.10.7:7174", a.qp, rdmacm.DialOptions{})
	req, err := l.Accept(context.Background())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := req.Accept(context.Background(), b.qp, rdmacm.AcceptOptions{}); !errors.Is(err, rdmacm.ErrTimedOut) {
		t.Fatalf("accept of a request that timed out: %v", err)
	}
}

// TestManyConnections opens and closes connections in a loop and checks
// that goroutines and the CM's state do not grow; it reports the time per
// connect.
func TestManyConnections(t *testing.T) {
	manyConnections(t, newDev(t, "127.0.10.8"), newDev(t, "127.0.10.9"), "127.0.10.9")
}

// TestManyConnectionsNetns is TestManyConnections between two network
// namespaces joined by veth.
func TestManyConnectionsNetns(t *testing.T) {
	netns.Require(t)
	p := netns.NewPair(t, netns.Options{})
	devIn := func(ns *netns.NS, a netip.Addr) *soft.Device {
		var c *udp.Conn
		if err := ns.Do(func() (err error) { c, err = udp.Listen(a, udp.Options{}); return }); err != nil {
			t.Fatal(err)
		}
		d, err := soft.New(soft.Options{Conn: c})
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	manyConnections(t, devIn(p.A, p.AddrA), devIn(p.B, p.AddrB), p.AddrB.String())
}

func manyConnections(t *testing.T, devA, devB *soft.Device, addrB string) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	cfg := rdmacm.MachineConfig{TimeWait: int64(50 * time.Millisecond)}
	mgA, mgB := rdmacm.Attach(devA, cfg), rdmacm.Attach(devB, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	l, err := rdmacm.Listen(ctx, devB, ":7174")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	serverErr := make(chan error, 1)
	go func() {
		for {
			req, err := l.Accept(ctx)
			if err != nil {
				serverErr <- nil
				return
			}
			s := newSideNoCleanup(devB)
			c, err := req.Accept(ctx, s.qp, rdmacm.AcceptOptions{})
			if err != nil {
				s.close()
				serverErr <- err
				return
			}
			<-c.Done()
			c.Close()
			s.close()
		}
	}()
	var goroutines int
	var heap0 uint64
	var connect time.Duration
	for i := range n {
		s := newSideNoCleanup(devA)
		t0 := time.Now()
		c, err := rdmacm.Dial(ctx, devA, addrB+":7174", s.qp, rdmacm.DialOptions{})
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		connect += time.Since(t0)
		c.Close()
		s.close()
		if i == 9 {
			goroutines = runtime.NumGoroutine()
			heap0 = heapAlloc()
		}
	}
	heap1 := heapAlloc()
	t.Logf("heap in use %d KiB after 10 connections, %d KiB after %d", heap0>>10, heap1>>10, n)
	if heap1 > heap0+16<<20 {
		t.Errorf("heap grew from %d to %d bytes", heap0, heap1)
	}
	t.Logf("%d connections, %v per connect (REQ to RTU), goroutines %d after 10, %d after %d", n, connect/time.Duration(n),
		goroutines, runtime.NumGoroutine(), n)
	if g := runtime.NumGoroutine(); g > goroutines+5 {
		t.Errorf("goroutines grew from %d to %d", goroutines, g)
	}
	time.Sleep(200 * time.Millisecond) // time-wait ends
	for deadline := time.Now().Add(5 * time.Second); mgA.Stats().Conns+mgB.Stats().Conns != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("connections left: %d %d", mgA.Stats().Conns, mgB.Stats().Conns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.Close()
	select {
	case err := <-serverErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server loop did not end")
	}
	if s := mgA.Stats(); s.Machine.Resent != 0 || s.Overruns != 0 {
		t.Logf("A: %+v", s)
	}
}

func newSideNoCleanup(d *soft.Device) *side {
	s := &side{}
	s.ctx, _ = d.Open()
	s.pd, _ = s.ctx.AllocPD()
	s.cq, _ = s.ctx.CreateCQ(16, nil)
	s.mr, _ = s.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	s.qp, _ = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	return s
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
