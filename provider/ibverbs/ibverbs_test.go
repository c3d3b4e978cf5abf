//go:build linux && cgo && ibverbs

package ibverbs_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/provider/ibverbs"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

var devFlag = flag.String("ibverbs.dev", "", "device to test (default: $GOROCE_IBV_DEVICE, else the first one libibverbs lists)")

// device opens the device under test, or skips when there is none.
func device(t testing.TB) (*ibverbs.Context, int) {
	t.Helper()
	name := *devFlag
	if name == "" {
		name = os.Getenv("GOROCE_IBV_DEVICE")
	}
	if name == "" {
		ds, err := ibverbs.List()
		if err != nil {
			t.Skipf("libibverbs lists no devices (%v): no RDMA subsystem or device here; run inside the rxe-vm guest (internal/rxeinterop)", err)
		}
		if len(ds) == 0 {
			t.Skip("libibverbs finds no RDMA device on this machine (no RDMA subsystem, no rdma_rxe link): run inside the rxe-vm guest (internal/rxeinterop)")
		}
		name = ds[0].Name()
	}
	ctx, err := ibverbs.Open(name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := ctx.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return ctx, roceV2IPv4(t, ctx)
}

// roceV2IPv4 returns the index of port 1's RoCE v2 GID with an IPv4-mapped
// address (rxe0's index 1), or of its first RoCE v2 GID.
func roceV2IPv4(t testing.TB, ctx *ibverbs.Context) int {
	t.Helper()
	pa, err := ctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	first := -1
	for i := 0; i < pa.GIDTblLen; i++ {
		e, err := ctx.QueryGIDEntry(1, i)
		if err != nil || e.Type != ibverbs.GIDTypeRoCEv2 {
			continue
		}
		if e.Addr.Is4() {
			return i
		}
		if first < 0 {
			first = i
		}
	}
	if first < 0 {
		t.Skipf("%s port 1 has no RoCE v2 GID", ctx.Device().Name())
	}
	return first
}

// TestSuite runs verbstest against the device: two contexts on it, talking
// to each other through the same GID (rdma_rxe and NICs loop back).
func TestSuite(t *testing.T) {
	a, gidx := device(t)
	b, err := ibverbs.Open(a.Device().Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	pa, err := a.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	verbstest.Run(t, verbstest.Env{A: a, B: b, GIDIndexA: gidx, GIDIndexB: gidx, MTU: min(pa.ActiveMTU, verbs.MTU1024),
		Alloc: ibverbs.Alloc, Free: ibverbs.Free,
		Fresh: func(t *testing.T) verbstest.Fresh {
			// Two more contexts on the device, for the tests that close
			// them (closing a context is ibv_close_device).
			var f verbstest.Fresh
			for _, c := range []*verbs.Context{&f.A, &f.B} {
				x, err := ibverbs.Open(a.Device().Name())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { x.Close() })
				*c = x
			}
			return f
		}})
}

func TestRegistry(t *testing.T) {
	ctx, _ := device(t)
	var r verbs.Registry
	if err := r.Register(ibverbs.Provider{}); err != nil {
		t.Fatal(err)
	}
	c, err := r.Open(ctx.Device().Name())
	if err != nil {
		t.Fatalf("Open(%s) through the registry: %v", ctx.Device().Name(), err)
	}
	defer c.Close()
	if c.Device().GUID() != ctx.Device().GUID() {
		t.Errorf("GUIDs differ: %#x %#x", c.Device().GUID(), ctx.Device().GUID())
	}
	if _, err := r.Open("nosuchdev9"); !errors.Is(err, verbs.ErrNoDevice) {
		t.Errorf("Open(nosuchdev9) = %v, want ErrNoDevice", err)
	}
	if _, err := ibverbs.Open("nosuchdev9"); !errors.Is(err, verbs.ErrNoDevice) || !errors.Is(err, syscall.ENODEV) {
		t.Errorf("ibverbs.Open(nosuchdev9) = %v, want ENODEV and ErrNoDevice", err)
	}
}

func TestQuery(t *testing.T) {
	ctx, gidx := device(t)
	da, err := ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if da.PhysPortCnt < 1 || da.MaxQP < 1 || da.MaxCQE < 1 || da.NodeGUID != ctx.Device().GUID() {
		t.Errorf("device attributes %+v (GUID %#x)", da, ctx.Device().GUID())
	}
	pa, err := ctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if pa.State != verbs.PortActive || pa.ActiveMTU.Bytes() == 0 || pa.GIDTblLen < 1 {
		t.Errorf("port 1: %+v", pa)
	}
	if _, err := ctx.QueryPort(200); err == nil {
		t.Errorf("QueryPort(200) succeeded")
	} else {
		var e *ibverbs.Error
		if !errors.As(err, &e) || e.Verb != "ibv_query_port" || e.Errno == 0 {
			t.Errorf("QueryPort(200): %v, want an *Error naming ibv_query_port with its errno", err)
		}
	}
	e, err := ctx.QueryGIDEntry(1, gidx)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ctx.QueryGID(1, gidx)
	if err != nil || g != e.GID {
		t.Fatalf("QueryGID = %v, %v; the entry says %v", g, err, e.GID)
	}
	if e.Type != ibverbs.GIDTypeRoCEv2 || !e.Addr.IsValid() || e.Addr != g.Addr() || e.IfIndex == 0 {
		t.Errorf("GID entry %+v", e)
	}
	if i, err := ctx.GIDIndexOf(1, e.Addr); err != nil || i != gidx {
		t.Errorf("GIDIndexOf(%v) = %d, %v; want %d", e.Addr, i, err, gidx)
	}
	t.Logf("%s: fw %s, vendor %#x part %d, port 1 %v MTU %v, GID[%d] %v %v on %s (ifindex %d)", ctx.Device().Name(), da.FWVer,
		da.VendorID, da.VendorPartID, pa.State, pa.ActiveMTU, gidx, e.GID, e.Type, e.Netdev, e.IfIndex)
}

// TestCQEx creates extended CQs: without timestamps it must work; with
// them, either the device has them or the error says not supported.
func TestCQEx(t *testing.T) {
	ctx, _ := device(t)
	cq, err := ctx.CreateCQEx(16, nil, ibverbs.CQExOptions{})
	if err != nil {
		if errors.Is(err, verbs.ErrNotSupported) {
			t.Skipf("extended CQs: %v", err)
		}
		t.Fatal(err)
	}
	wc := make([]ibverbs.WCEx, 4)
	if n, err := cq.PollEx(wc); n != 0 || err != nil {
		t.Errorf("PollEx of an empty CQ: %d, %v", n, err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []ibverbs.CQExOptions{{Timestamp: true}, {Wallclock: true}} {
		cq, err := ctx.CreateCQEx(16, nil, o)
		if err != nil {
			if !errors.Is(err, verbs.ErrNotSupported) {
				t.Errorf("CreateCQEx(%+v): %v, want success or ErrNotSupported", o, err)
			}
			t.Logf("CreateCQEx(%+v): %v", o, err)
			continue
		}
		cq.Destroy()
	}
	// Traffic through an extended CQ: a WRITE and a SEND with immediate.
	xcq, err := ctx.CreateCQEx(64, nil, ibverbs.CQExOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := newLoopCQ(t, ctx, 1, xcq)
	if _, err := l.qb.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: l.sge}}); err != nil {
		t.Fatal(err)
	}
	w := l.wrs[0]
	w.WRID = 7
	imm := verbs.SendWR{WRID: 8, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, SGList: l.sge, Imm: 0xc0ffee}
	if _, err := l.qa.PostSend([]verbs.SendWR{w, imm}); err != nil {
		t.Fatal(err)
	}
	var got []ibverbs.WCEx
	for deadline := time.Now().Add(10 * time.Second); len(got) < 3 && time.Now().Before(deadline); {
		n, err := xcq.PollEx(wc)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, wc[:n]...)
		if n == 0 {
			runtime.Gosched()
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d of 3 completions on the extended CQ: %+v", len(got), got)
	}
	byID := map[uint64]verbs.WC{}
	for _, g := range got {
		if g.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", g.WC)
		}
		byID[g.WRID] = g.WC
	}
	if byID[7].Opcode != verbs.WCRDMAWrite || byID[7].QPNum != l.qa.Num() || byID[8].Opcode != verbs.WCSend ||
		byID[9].Opcode != verbs.WCRecv || byID[9].ByteLen != 8 || byID[9].Imm != 0xc0ffee ||
		byID[9].Flags&verbs.WCFlagWithImm == 0 || byID[9].QPNum != l.qb.Num() {
		t.Errorf("extended CQ completions %+v", byID)
	}

	// CreateCQ makes a plain CQ, unless the device stamps completions:
	// then an extended one with wall-clock timestamps.
	da, err := ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := ctx.CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Destroy()
	_, err = plain.(*ibverbs.CQ).PollEx(wc)
	if hw := da.CompletionTimestamps == verbs.TimestampHardware; hw && err != nil {
		t.Errorf("PollEx on CreateCQ's CQ of a device with completion timestamps: %v", err)
	} else if !hw && !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("PollEx on a plain CQ: %v, want ErrInvalidAttr", err)
	}
}

// TestCompletionTimestamps: a device reports hardware completion
// timestamps or none (never software); with them every completion of a
// CreateCQ CQ carries a time on verbs.Now's clock (the device's wall clock:
// within a second of the host's), non-decreasing; without them 0.
func TestCompletionTimestamps(t *testing.T) {
	ctx, _ := device(t)
	da, err := ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	hw := da.CompletionTimestamps == verbs.TimestampHardware
	if !hw && da.CompletionTimestamps != verbs.TimestampNone {
		t.Fatalf("CompletionTimestamps %v, want hardware or none", da.CompletionTimestamps)
	}
	cq, err := ctx.CreateCQ(256, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := newLoopCQ(t, ctx, 32, cq)
	before := verbs.Now()
	if _, err := l.qa.PostSend(l.wrs); err != nil {
		t.Fatal(err)
	}
	var got []verbs.WC
	for deadline := time.Now().Add(10 * time.Second); len(got) < len(l.wrs) && time.Now().Before(deadline); {
		n := cq.Poll(l.wc)
		got = append(got, l.wc[:n]...)
		if n == 0 {
			runtime.Gosched()
		}
	}
	after := verbs.Now()
	if len(got) != len(l.wrs) {
		t.Fatalf("%d of %d completions", len(got), len(l.wrs))
	}
	last := int64(0)
	for i, w := range got {
		switch {
		case !hw && w.Timestamp != 0:
			t.Fatalf("completion %d: Timestamp %d from a device without completion timestamps", i, w.Timestamp)
		case hw && (w.Timestamp < before-int64(time.Second) || w.Timestamp > after+int64(time.Second) || w.Timestamp < last):
			t.Fatalf("completion %d: Timestamp %d, previous %d, want non-decreasing within a second of [%d, %d]", i, w.Timestamp, last, before, after)
		}
		last = w.Timestamp
	}
	t.Logf("%s: completion timestamps %v", ctx.Device().Name(), da.CompletionTimestamps)
}

// TestErrors checks that failing verbs name the verb, carry the errno and
// match the verbs sentinels.
func TestErrors(t *testing.T) {
	ctx, _ := device(t)
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	cq, err := ctx.CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState)
	var e *ibverbs.Error
	if !errors.As(err, &e) || e.Verb != "ibv_modify_qp" || !errors.Is(err, syscall.EINVAL) || !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("RESET -> RTR without attributes: %v, want ibv_modify_qp EINVAL matching ErrInvalidAttr", err)
	}
	if _, err := pd.RegMR(nil, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("RegMR(nil): %v", err)
	}
	big := make([]verbs.SGE, 1000)
	if n, err := qp.PostRecv([]verbs.RecvWR{{SGList: big}}); n != 0 || !errors.Is(err, verbs.ErrInvalidWR) {
		t.Errorf("PostRecv with 1000 SGEs: %d, %v", n, err)
	}
	// Failures return nil interfaces, not nil pointers in them.
	if cq, err := ctx.CreateCQ(-1, nil); cq != nil || err == nil {
		t.Errorf("CreateCQ(-1) = %#v, %v; want nil and an error", cq, err)
	}
	if _, err := ibverbs.Alloc(0); err == nil {
		t.Errorf("Alloc(0) succeeded")
	}
}

// TestCreateErrno makes verbs fail in the device (more entries than
// QueryDevice allows) and checks each error carries the errno the verb set
// and its sentinel: rdma_rxe refuses with EINVAL (verbs.ErrInvalidAttr), a
// NIC may say ENOMEM (verbs.ErrResourceLimit). A lost errno shows as EIO.
// Then goroutines fail in parallel with different errnos on several
// threads, and every failure must still carry its own verb's errno, which
// it does only when errno is read on the thread that ran the verb. A
// goroutine moves between threads rarely in so short a window, so this
// part guards against a mix-up rather than provokes one each run.
func TestCreateErrno(t *testing.T) {
	ctx, _ := device(t)
	da, err := ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	cq, err := ctx.CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	// check fails t unless err is an *Error of one of verbs with an errno
	// and sentinel a device may give for a request beyond its limits.
	check := func(t testing.TB, what string, err error, want ...string) {
		t.Helper()
		var e *ibverbs.Error
		if !errors.As(err, &e) || !slices.Contains(want, e.Verb) {
			t.Errorf("%s: %v, want an *ibverbs.Error of %v", what, err, want)
			return
		}
		switch {
		case e.Errno == syscall.EINVAL && errors.Is(err, verbs.ErrInvalidAttr):
		case (e.Errno == syscall.ENOMEM || e.Errno == syscall.ENOSPC) && errors.Is(err, verbs.ErrResourceLimit):
		default:
			t.Errorf("%s: %v (errno %d), want EINVAL matching ErrInvalidAttr or ENOMEM matching ErrResourceLimit", what, err, int(e.Errno))
		}
	}
	bigCQ := da.MaxCQE + 1
	if bigCQ > 1<<24 { // CreateCQ refuses that itself, before the verb
		t.Skipf("%s allows %d CQ entries: no count beyond it reaches ibv_create_cq", ctx.Device().Name(), da.MaxCQE)
	}
	createCQ := func() error {
		q, err := ctx.CreateCQ(bigCQ, nil)
		if err == nil {
			q.Destroy()
			return fmt.Errorf("CreateCQ(%d) succeeded, beyond MaxCQE %d", bigCQ, da.MaxCQE)
		}
		return err
	}
	cases := []struct {
		name  string
		verbs []string
		do    func() error
	}{
		{"CreateCQ(MaxCQE+1)", []string{"ibv_create_cq", "ibv_create_cq_ex"}, createCQ},
		{"CreateQP(MaxQPWR+1 send WRs)", []string{"ibv_create_qp"}, func() error {
			q, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
				Cap: verbs.QPCap{MaxSendWR: uint32(da.MaxQPWR + 1), MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err == nil {
				q.Destroy()
				return fmt.Errorf("CreateQP succeeded with %d send WRs, beyond MaxQPWR %d", da.MaxQPWR+1, da.MaxQPWR)
			}
			return err
		}},
		{"CreateSRQ(MaxSRQWR+1)", []string{"ibv_create_srq"}, func() error {
			if da.MaxSRQWR == 0 || da.MaxSRQWR+1 > 1<<24 {
				return nil
			}
			s, err := pd.CreateSRQ(da.MaxSRQWR+1, 1)
			if err == nil {
				s.Destroy()
				return fmt.Errorf("CreateSRQ(%d) succeeded, beyond MaxSRQWR %d", da.MaxSRQWR+1, da.MaxSRQWR)
			}
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			if err == nil {
				t.Skip("the device's limit is beyond what the provider passes to the verb")
			}
			t.Logf("%v", err)
			check(t, c.name, err, c.verbs...)
		})
	}

	// In parallel, two failures with different errnos: creates beyond the
	// limit (EINVAL or ENOMEM, read from errno) and the dealloc of a PD
	// that still holds an MR (EBUSY, which the kernel also leaves in its
	// thread's errno). Each must report its own. Bounded by count.
	busy, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr, err := busy.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	if err != nil {
		busy.Dealloc()
		t.Fatal(err)
	}
	defer func() {
		if err := mr.Dereg(); err != nil {
			t.Errorf("Dereg: %v", err)
		}
		if err := busy.Dealloc(); err != nil {
			t.Errorf("Dealloc after Dereg: %v", err)
		}
	}()
	const workers, rounds = 8, 100
	type result struct {
		create bool
		err    error
	}
	var wg sync.WaitGroup
	res := make(chan result, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if w%2 == 0 {
					res <- result{true, createCQ()}
				} else {
					res <- result{false, busy.Dealloc()}
				}
			}
		}()
	}
	wg.Wait()
	close(res)
	n := 0
	for r := range res {
		n++
		var e *ibverbs.Error
		if r.create {
			check(t, "parallel CreateCQ(MaxCQE+1)", r.err, "ibv_create_cq", "ibv_create_cq_ex")
		} else if !errors.As(r.err, &e) || e.Verb != "ibv_dealloc_pd" || e.Errno != syscall.EBUSY || !errors.Is(r.err, verbs.ErrBusy) {
			t.Errorf("parallel Dealloc of a PD holding an MR: %v, want ibv_dealloc_pd EBUSY matching ErrBusy", r.err)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	if n != workers*rounds {
		t.Fatalf("%d results, want %d", n, workers*rounds)
	}
}

// TestNoAllocs asserts that PostSend, PostRecv and Poll allocate nothing.
func TestNoAllocs(t *testing.T) {
	l := newLoop(t, 1)
	wrs := l.wrs[:1]
	rwrs := []verbs.RecvWR{{WRID: 1, SGList: l.sge[:1]}}
	wc := make([]verbs.WC, 4)
	if n := testing.AllocsPerRun(50, func() {
		if _, err := l.qa.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		l.reap(1)
	}); n != 0 {
		t.Errorf("PostSend + Poll: %v allocations", n)
	}
	if n := testing.AllocsPerRun(50, func() {
		if _, err := l.qb.PostRecv(rwrs); err != nil {
			t.Fatal(err)
		}
		l.cq.Poll(wc)
	}); n != 0 {
		t.Errorf("PostRecv: %v allocations", n)
	}
}

// loop is an RC QP aimed at a second QP of the same device, for the
// allocation test and the benchmarks.
type loop struct {
	tb     testing.TB
	qa, qb verbs.QP
	cq     verbs.CQ
	wrs    []verbs.SendWR
	sge    []verbs.SGE
	wc     []verbs.WC
}

func newLoop(t testing.TB, n int) *loop {
	ctx, _ := device(t)
	cq, err := ctx.CreateCQ(1024, nil)
	if err != nil {
		t.Fatal(err)
	}
	return newLoopCQ(t, ctx, n, cq)
}

// newLoopCQ is newLoop with both QPs' completions going to cq.
func newLoopCQ(t testing.TB, ctx *ibverbs.Context, n int, cq verbs.CQ) *loop {
	gidx := roceV2IPv4(t, ctx)
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Dealloc() })
	t.Cleanup(func() { cq.Destroy() })
	buf, err := ibverbs.Alloc(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ibverbs.Free(buf) })
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mr.Dereg() })
	gid, err := ctx.QueryGID(1, gidx)
	if err != nil {
		t.Fatal(err)
	}
	l := &loop{tb: t, cq: cq, wc: make([]verbs.WC, 64)}
	var qps [2]verbs.QP
	for i := range qps {
		qps[i], err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		q := qps[i]
		t.Cleanup(func() { q.Destroy() })
	}
	for i, q := range qps {
		peer := qps[1-i].Num()
		for _, s := range []struct {
			a verbs.QPAttr
			m verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: peer, MaxDestRdAtomic: 1, MinRNRTimer: 12,
				AHAttr: verbs.AHAttr{DGID: gid, SGIDIndex: uint8(gidx), HopLimit: 64}},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
		} {
			if err := q.Modify(&s.a, s.m); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.qa, l.qb = qps[0], qps[1]
	l.sge = []verbs.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}
	l.wrs = make([]verbs.SendWR, max(n, 1))
	for i := range l.wrs {
		l.wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: l.sge,
			RemoteAddr: mr.Addr() + 1024, RKey: mr.RKey()}
	}
	return l
}

// reap polls until n completions arrived (bounded: 10 s).
func (l *loop) reap(n int) {
	deadline := time.Now().Add(10 * time.Second)
	for got := 0; got < n; {
		k := l.cq.Poll(l.wc)
		for _, wc := range l.wc[:k] {
			if wc.Status != verbs.WCSuccess {
				l.tb.Fatalf("completion %+v", wc)
			}
		}
		got += k
		if k == 0 {
			if time.Now().After(deadline) {
				l.tb.Fatalf("%d of %d completions after 10 s", got, n)
			}
			runtime.Gosched()
		}
	}
}

// toErr moves qb to ERROR: its receives are flushed.
func (l *loop) toErr() {
	if err := l.qb.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState); err != nil {
		l.tb.Fatal(err)
	}
}

// toRTR brings qb from ERROR back through RESET and INIT to RTR.
func (l *loop) toRTR() {
	at, err := l.qb.Query()
	if err != nil {
		l.tb.Fatal(err)
	}
	gid := at.AHAttr
	for _, s := range []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: l.qa.Num(), MaxDestRdAtomic: 1, MinRNRTimer: 12, AHAttr: gid},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
	} {
		if err := l.qb.Modify(&s.a, s.m); err != nil {
			l.tb.Fatal(err)
		}
	}
}

// recycle empties qb's receive queue of its n receives: ERROR (flush),
// reap the n flushed completions, back to RTR.
func (l *loop) recycle(n int) {
	l.toErr()
	deadline := time.Now().Add(10 * time.Second)
	for got := 0; got < n; {
		k := l.cq.Poll(l.wc)
		got += k
		if k == 0 {
			if time.Now().After(deadline) {
				l.tb.Fatalf("%d of %d flushed receives", got, n)
			}
			runtime.Gosched()
		}
	}
	l.toRTR()
}

// TestProviderDevices runs everywhere: the provider lists what libibverbs
// lists, and a machine without an RDMA subsystem (ENOSYS) has no devices
// rather than an error, so a registry with this provider still works there.
func TestProviderDevices(t *testing.T) {
	ds, err := ibverbs.Provider{}.Devices()
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	l, lerr := ibverbs.List()
	if lerr != nil {
		if !errors.Is(lerr, syscall.ENOSYS) || len(ds) != 0 {
			t.Fatalf("List: %v; Devices: %d devices", lerr, len(ds))
		}
		t.Logf("no RDMA subsystem here (%v): no devices", lerr)
	} else if len(l) != len(ds) {
		t.Fatalf("List has %d devices, Devices %d", len(l), len(ds))
	}
	var r verbs.Registry
	if err := r.Register(ibverbs.Provider{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Open("nosuchdev9"); !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("Open(nosuchdev9) = %v, want ErrNoDevice", err)
	}
}
