// Package rdmatest gives tests of RDMA programs what they need in one
// line: two soft devices that reach each other, in memory (packetio/pipe)
// or over UDP on loopback, and on them a pair of RC or UD queue pairs,
// connected, with completion queues, channels and registered memory, all
// destroyed with t.Cleanup at the end of the test.
//
//	p := rdmatest.RC(t, nil)
//	p.B.PostRecv(t, 0, 64)
//	p.A.Post(t, verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: p.A.SGE(0, 64)})
//	wc := p.B.WaitRecv(t, 1)
//
// Everything on a Side is plain verbs (Ctx, PD, CQs, QP, MR, Endpoint): a
// test uses the helpers or not.
package rdmatest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/paths"
	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// Paths a Pair's devices talk over.
const (
	Pipe = "pipe" // in memory: packetio/pipe (the default)
	UDP  = "udp"  // UDP sockets on two loopback addresses, port 4791
)

// QKey is the Q_Key of the UD pairs.
const QKey = 0x11111111

// Options tune a Pair. The zero value (or nil) gives the defaults.
type Options struct {
	// Path is Pipe (default), UDP, or another packet path of package
	// packetio/paths ("uring", "afxdp", "auto") on the two addresses; a
	// path that cannot open there skips the test, saying why.
	Path string
	// AddrA and AddrB are the devices' IPv4 addresses (default: 10.0.0.1
	// and 10.0.0.2 on the pipe; elsewhere a pair of 127.x.y.1 and
	// 127.x.y.2 no other test holds).
	AddrA, AddrB netip.Addr
	// Device is both devices' soft.Options (Busy, Spin, ActiveMTU,
	// NoInline, Engine's limits and timers...); rdmatest sets Name and
	// Conn.
	Device soft.Options
	// MemSize is the size of each side's registered buffer (default 64
	// KiB); Access its access flags (default local write, remote write,
	// read and atomic).
	MemSize int
	Access  verbs.AccessFlags
	// CQSize is the entries of each CQ (default 256); Cap the QPs'
	// capacities (default 64 WRs and 2 SGEs each way).
	CQSize int
	Cap    verbs.QPCap
	// Connect tunes the RC connection (nil: verbs.Connect's defaults).
	Connect *verbs.ConnectOptions
	// Wait bounds WaitSend and WaitRecv (default 10 s).
	Wait time.Duration
}

func (o *Options) defaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Path == "" {
		c.Path = Pipe
	}
	if c.MemSize <= 0 {
		c.MemSize = 64 << 10
	}
	if c.Access == 0 {
		c.Access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	if c.CQSize <= 0 {
		c.CQSize = 256
	}
	if c.Cap == (verbs.QPCap{}) {
		c.Cap = verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}
	}
	if c.Wait <= 0 {
		c.Wait = 10 * time.Second
	}
	return c
}

// Pair is two sides whose QPs are connected to each other.
type Pair struct {
	A, B *Side
}

// Side is one device's objects.
type Side struct {
	Device *soft.Device
	Ctx    verbs.Context
	PD     verbs.PD
	// SendCQ and RecvCQ report to SendCh and RecvCh.
	SendCh, RecvCh verbs.CompChannel
	SendCQ, RecvCQ verbs.CQ
	MR             verbs.MR
	Buf            []byte // MR's memory
	QP             verbs.QP
	// Endpoint is the QP's, exposing MR.
	Endpoint verbs.Endpoint
	// AH (UD pairs) is the address handle of the other side; RemoteQPN its
	// QP.
	AH        verbs.AH
	RemoteQPN uint32

	wait time.Duration
}

// Devices returns two soft devices that reach each other over opts.Path,
// closed at the end of the test.
func Devices(t testing.TB, opts *Options) (a, b *soft.Device) {
	t.Helper()
	o := opts.defaults()
	ca, cb := conns(t, &o)
	da, db := o.Device, o.Device
	da.Name, da.Conn = "rdmatest0", ca
	db.Name, db.Conn = "rdmatest1", cb
	var err error
	if a, err = soft.New(da); err != nil {
		ca.Close()
		cb.Close()
		t.Fatalf("rdmatest: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	if b, err = soft.New(db); err != nil {
		cb.Close()
		t.Fatalf("rdmatest: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}

// conns opens the two devices' packet paths.
func conns(t testing.TB, o *Options) (packetio.Conn, packetio.Conn) {
	t.Helper()
	switch {
	case o.Path == Pipe:
		a, b := o.AddrA, o.AddrB
		if !a.IsValid() || !b.IsValid() {
			a, b = netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
		}
		return pipe.New(a, b, pipe.Options{})
	case !slices.Contains(paths.Names, o.Path):
		t.Fatalf("rdmatest: path %q: want %q or one of %v", o.Path, Pipe, paths.Names)
	case !o.AddrA.IsValid() || !o.AddrB.IsValid():
		return loopback(t, o.Path)
	}
	ca, err := openPath(o.AddrA, o.Path)
	if err != nil {
		t.Skipf("rdmatest: path %s on %v: %v", o.Path, o.AddrA, err)
	}
	cb, err := openPath(o.AddrB, o.Path)
	if err != nil {
		ca.Close()
		t.Skipf("rdmatest: path %s on %v: %v", o.Path, o.AddrB, err)
	}
	return ca, cb
}

// openPath opens a packet path on addr: UDP as udp.Listen's defaults
// (no offloads), the others as package paths opens them.
func openPath(addr netip.Addr, path string) (packetio.Conn, error) {
	if path == UDP {
		return udp.Listen(addr, udp.Options{})
	}
	c, _, err := paths.Open(addr, path, paths.Options{})
	return c, err
}

// loopback opens the path on two addresses of 127.0.0.0/8 that no other
// test holds (port 4791 is the same for all).
func loopback(t testing.TB, path string) (packetio.Conn, packetio.Conn) {
	t.Helper()
	var last error
	for range 20 {
		x, y := byte(rand.IntN(200)+40), byte(rand.IntN(250)+1)
		ca, err := openPath(netip.AddrFrom4([4]byte{127, x, y, 1}), path)
		if err != nil {
			last = err
			continue
		}
		cb, err := openPath(netip.AddrFrom4([4]byte{127, x, y, 2}), path)
		if err != nil {
			ca.Close()
			last = err
			continue
		}
		return ca, cb
	}
	if errors.Is(last, syscall.EADDRINUSE) {
		t.Fatalf("rdmatest: no free loopback address pair: %v", last)
	}
	t.Skipf("rdmatest: %s on loopback: %v", path, last)
	return nil, nil
}

// RC returns two devices with an RC QP each, connected to each other and
// at RTS.
func RC(t testing.TB, opts *Options) *Pair {
	t.Helper()
	o := opts.defaults()
	p := newPair(t, &o, verbs.QPTRC)
	if err := verbs.Connect(p.A.QP, p.A.Endpoint, p.B.Endpoint, o.Connect); err != nil {
		t.Fatalf("rdmatest: %v", err)
	}
	if err := verbs.Connect(p.B.QP, p.B.Endpoint, p.A.Endpoint, o.Connect); err != nil {
		t.Fatalf("rdmatest: %v", err)
	}
	return p
}

// UD returns two devices with a UD QP each (Q_Key QKey) at RTS, and on each
// side an address handle of the other (Side.AH, Side.RemoteQPN).
func UD(t testing.TB, opts *Options) *Pair {
	t.Helper()
	o := opts.defaults()
	p := newPair(t, &o, verbs.QPTUD)
	for _, s := range []struct{ me, peer *Side }{{p.A, p.B}, {p.B, p.A}} {
		if err := verbs.ConnectUD(s.me.QP, 1, QKey, s.me.Endpoint.PSN); err != nil {
			t.Fatalf("rdmatest: %v", err)
		}
		ah, err := s.me.PD.CreateAH(&verbs.AHAttr{DGID: s.peer.Endpoint.GID, SGIDIndex: verbs.DefaultGIDIndex, HopLimit: 64, PortNum: 1})
		if err != nil {
			t.Fatalf("rdmatest: CreateAH: %v", err)
		}
		t.Cleanup(func() { ah.Destroy() })
		s.me.AH, s.me.RemoteQPN = ah, s.peer.QP.Num()
	}
	return p
}

func newPair(t testing.TB, o *Options, typ verbs.QPType) *Pair {
	t.Helper()
	da, db := Devices(t, o)
	return &Pair{A: newSide(t, o, da, typ), B: newSide(t, o, db, typ)}
}

func newSide(t testing.TB, o *Options, d *soft.Device, typ verbs.QPType) *Side {
	t.Helper()
	s := &Side{Device: d, wait: o.Wait}
	fail := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("rdmatest: %s: %v", what, err)
		}
	}
	var err error
	s.Ctx, err = d.Open()
	fail("Open", err)
	t.Cleanup(func() { s.Ctx.Close() }) // destroys whatever is left
	s.PD, err = s.Ctx.AllocPD()
	fail("AllocPD", err)
	s.SendCh, err = s.Ctx.CreateCompChannel()
	fail("CreateCompChannel", err)
	s.RecvCh, err = s.Ctx.CreateCompChannel()
	fail("CreateCompChannel", err)
	s.SendCQ, err = s.Ctx.CreateCQ(o.CQSize, s.SendCh)
	fail("CreateCQ", err)
	s.RecvCQ, err = s.Ctx.CreateCQ(o.CQSize, s.RecvCh)
	fail("CreateCQ", err)
	s.Buf = make([]byte, o.MemSize)
	s.MR, err = s.PD.RegMR(s.Buf, o.Access)
	fail("RegMR", err)
	s.QP, err = s.PD.CreateQP(&verbs.QPInitAttr{SendCQ: s.SendCQ, RecvCQ: s.RecvCQ, QPType: typ, Cap: o.Cap})
	fail("CreateQP", err)
	ep, err := verbs.NewEndpoint(s.Ctx, s.QP, 1, 0)
	fail("NewEndpoint", err)
	s.Endpoint = ep.WithMR(s.MR)
	return s
}

// SGE returns the scatter/gather list of n bytes at off in the side's MR.
func (s *Side) SGE(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: s.MR.Addr() + uint64(off), Length: uint32(n), LKey: s.MR.LKey()}}
}

// Post posts wrs on the side's QP, failing the test unless all are posted.
// UD requests without an AH go to the other side (AH, RemoteQPN, QKey).
func (s *Side) Post(t testing.TB, wrs ...verbs.SendWR) {
	t.Helper()
	for i := range wrs {
		if s.AH != nil && wrs[i].AH == nil {
			wrs[i].AH, wrs[i].RemoteQPN, wrs[i].RemoteQKey = s.AH, s.RemoteQPN, QKey
		}
	}
	if n, err := s.QP.PostSend(wrs); n != len(wrs) || err != nil {
		t.Fatalf("rdmatest: PostSend: %d of %d posted: %v", n, len(wrs), err)
	}
}

// PostRecv posts one receive of n bytes at off in the side's MR, with
// WRID off.
func (s *Side) PostRecv(t testing.TB, off, n int) {
	t.Helper()
	if _, err := s.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(off), SGList: s.SGE(off, n)}}); err != nil {
		t.Fatalf("rdmatest: PostRecv: %v", err)
	}
}

// WaitSend waits for n completions on the send CQ (Options.Wait at most)
// and returns them; WaitRecv on the receive CQ. Neither checks statuses.
func (s *Side) WaitSend(t testing.TB, n int) []verbs.WC {
	t.Helper()
	return s.wait1(t, s.SendCh, s.SendCQ, n)
}

// WaitRecv waits for n completions on the receive CQ.
func (s *Side) WaitRecv(t testing.TB, n int) []verbs.WC {
	t.Helper()
	return s.wait1(t, s.RecvCh, s.RecvCQ, n)
}

func (s *Side) wait1(t testing.TB, ch verbs.CompChannel, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.wait)
	defer cancel()
	out := make([]verbs.WC, n)
	for got := 0; got < n; {
		k, err := verbs.PollWait(ctx, ch, cq, out[got:])
		if err != nil {
			t.Fatalf("rdmatest: %d of %d completions: %v", got, n, fmt.Errorf("%w (%+v)", err, out[:got]))
		}
		got += k
	}
	// The device's writes to the MR happen before the caller's reads (for
	// the race detector; real RDMA needs nothing).
	s.QP.Query()
	return out
}

// Sync makes the side's MR consistent between the test's goroutine and
// the side's device, for the race detector, before the other side reads or
// writes it remotely (RDMA READ, WRITE, atomics): a control call takes the
// device's lock, which its driver holds while it serves the peer. Real
// RDMA needs nothing of the sort.
func (s *Side) Sync() { s.QP.Query() }

// Context opens one soft device on a UDP socket bound to addr (port 4791)
// and its context, both closed when the test ends; the test skips when the
// socket cannot be opened (the address or port is in use).
func Context(t testing.TB, name string, addr netip.Addr) (*soft.Device, verbs.Context) {
	t.Helper()
	c, err := udp.Listen(addr, udp.Options{})
	if err != nil {
		t.Skipf("UDP socket on %v: %v", addr, err)
	}
	d, err := soft.New(soft.Options{Name: name, Conn: c})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	ctx, err := d.Open()
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close(); d.Close() })
	return d, ctx
}
