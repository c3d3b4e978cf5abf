//go:build linux

package soft

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
)

// vanishPrefix is the subnet of this file's namespace pairs (other tests
// use 10.77.x.0/24, NewPair's default).
var vanishPrefix = netip.MustParsePrefix("10.79.4.0/30")

// nsDevices creates a namespace pair on prefix and a soft device on a UDP
// socket (port 4791) inside each. Cleanups close the devices before the
// namespaces go.
func nsDevices(t *testing.T, prefix netip.Prefix) (*netns.Pair, *Device, *Device) {
	t.Helper()
	pair := netns.NewPair(t, netns.Options{Prefix: prefix})
	var devs [2]*Device
	for i, x := range []struct {
		ns   *netns.NS
		addr netip.Addr
	}{{pair.A, pair.AddrA}, {pair.B, pair.AddrB}} {
		var c *udp.Conn
		err := x.ns.Do(func() (err error) {
			c, err = udp.Listen(x.addr, udp.Options{})
			return err
		})
		if err != nil {
			t.Fatalf("udp.Listen(%v) in %s: %v", x.addr, x.ns.Name, err)
		}
		d, err := New(Options{Name: fmt.Sprintf("ns%c", 'a'+i), Conn: c})
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	return pair, devs[0], devs[1]
}

// vanishRCToRTS moves an RC QP to RTS aimed at peer with the given local
// ACK timeout (4.096 µs x 2^timeout) and retry count.
func vanishRCToRTS(t testing.TB, qp verbs.QP, peerQPN uint32, peer verbs.GID, psn uint32, timeout, retry uint8) {
	t.Helper()
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: peerQPN, RQPSN: psn,
		MaxDestRdAtomic: 16, MinRNRTimer: 1, AHAttr: verbs.AHAttr{DGID: peer, PortNum: 1}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: psn, Timeout: timeout, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
}

// TestPeerVanishes: two devices in two network namespaces; the survivor A
// posts receives and a mix of SENDs, RDMA WRITEs, RDMA READs (256 KiB each)
// and atomics, more SENDs than B has receives for, and B vanishes right
// after, with at least half of them outstanding: either B's device closes (its process died: its socket is
// gone, the kernel answers port unreachable) or the veth link is deleted
// (its host is gone: A's packets go nowhere). A's QP must reach ERROR with
// RETRY_EXC_ERR once its local ACK timer expired retry_cnt + 1 times
// without progress: within (retry_cnt + 1) x 4.096 µs x 2^timeout of the
// vanishing, asserted with a generous margin for a loaded machine (it is a
// correctness bound, not a speed measurement). Every send WR completes
// exactly once, in post order: successes first (what B acknowledged before
// it went), then one RETRY_EXC_ERR, then WR_FLUSH_ERR; every posted receive
// is flushed in order.
func TestPeerVanishes(t *testing.T) {
	netns.Require(t)
	for _, c := range []struct {
		name    string
		vanish  func(t *testing.T, pair *netns.Pair, b *Device)
		timeout uint8 // 4.096 µs x 2^timeout
		retry   uint8
	}{
		{"device_closed", func(t *testing.T, _ *netns.Pair, b *Device) { b.Close() }, 12, 3},
		{"link_deleted", func(t *testing.T, pair *netns.Pair, _ *Device) {
			if out, err := pair.B.Exec("ip", "link", "del", netns.LinkName); err != nil {
				t.Fatalf("deleting the veth link: %v: %s", err, out)
			}
		}, 11, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			vanish(t, c.timeout, c.retry, c.vanish)
		})
	}
}

func vanish(t *testing.T, timeout, retry uint8, gone func(*testing.T, *netns.Pair, *Device)) {
	prefix := vanishPrefix
	if timeout%2 == 1 { // the second case: its own subnet
		prefix = netip.MustParsePrefix("10.79.5.0/30")
	}
	pair, da, db := nsDevices(t, prefix)
	goroutines := runtime.NumGoroutine()
	const nwr, size, nrecv = 96, 256 << 10, 8
	ra, rb := e2eNewRes(t, da, 2*nwr*size/4+1<<20), e2eNewRes(t, db, nwr*size/4+1<<20)
	scqA, rcqA := ra.cq(t, 256), ra.cq(t, 64)
	cqB := rb.cq(t, 256)
	qa := ra.qp(t, verbs.QPTRC, scqA, rcqA, nil, 128)
	qb := rb.qp(t, verbs.QPTRC, cqB, cqB, nil, 128)
	vanishRCToRTS(t, qa, qb.Num(), db.GID(), 0x100, timeout, retry)
	vanishRCToRTS(t, qb, qa.Num(), da.GID(), 0x100, timeout, retry)

	// The connection works: one of each operation completes.
	e2eFill(ra.buf, 1)
	_, err := qb.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: rb.sge(0, size)}})
	e2eMust(t, err)
	warm := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, SGList: ra.sge(0, 4096)},
		{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: ra.sge(0, 4096), RemoteAddr: rb.mr.Addr(), RKey: rb.mr.RKey()},
		{WRID: 3, Opcode: verbs.WRRDMARead, SGList: ra.sge(size, 4096), RemoteAddr: rb.mr.Addr(), RKey: rb.mr.RKey()},
		{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, SGList: ra.sge(2*size, 8), RemoteAddr: rb.mr.Addr() + 8192, RKey: rb.mr.RKey(), CompareAdd: 1},
	}
	for i := range warm {
		warm[i].Flags = verbs.SendSignaled
	}
	_, err = qa.PostSend(warm)
	e2eMust(t, err)
	for _, w := range e2ePoll(t, "warm-up", scqA, len(warm)) {
		if w.Status != verbs.WCSuccess {
			t.Fatalf("warm-up completion %+v", w)
		}
	}
	e2ePoll(t, "warm-up receive", cqB, 1)

	// Receives on A (B would SEND to it), then the mix, then B vanishes.
	for i := range nrecv {
		_, err := qa.PostRecv([]verbs.RecvWR{{WRID: 1000 + uint64(i), SGList: ra.sge(i*4096, 4096)}})
		e2eMust(t, err)
	}
	// B has receives for half of the SENDs: the SEND after them meets RNR
	// NAKs (retried forever: rnr_retry 7) until B vanishes, so at least
	// half of the WRs are still outstanding then, however fast the rest go.
	var recvs []verbs.RecvWR
	for i := range nwr / 8 {
		recvs = append(recvs, verbs.RecvWR{WRID: uint64(i), SGList: rb.sge(i*(size/4), size/4)})
	}
	_, err = qb.PostRecv(recvs)
	e2eMust(t, err)
	wrs := make([]verbs.SendWR, nwr)
	for i := range wrs {
		w := &wrs[i]
		w.WRID, w.Flags = uint64(100+i), verbs.SendSignaled
		remote := rb.mr.Addr() + uint64(i%(nwr/4))*(size/4)
		switch i % 4 {
		case 0:
			w.Opcode, w.SGList = verbs.WRSend, ra.sge(0, size/4)
		case 1:
			w.Opcode, w.SGList, w.RemoteAddr, w.RKey = verbs.WRRDMAWrite, ra.sge(0, size), remote, rb.mr.RKey()
		case 2:
			w.Opcode, w.SGList, w.RemoteAddr, w.RKey = verbs.WRRDMARead, ra.sge(size+(i%8)*size, size), remote, rb.mr.RKey()
		case 3:
			w.Opcode, w.SGList, w.RemoteAddr, w.RKey = verbs.WRAtomicCmpAndSwp, ra.sge(2*size+8*(i%64), 8), rb.mr.Addr()+8192+8, rb.mr.RKey()
			w.CompareAdd, w.Swap = 0, uint64(i)
			if i%8 == 7 {
				w.Opcode, w.CompareAdd = verbs.WRAtomicFetchAndAdd, 1
			}
		}
	}
	before := da.Stats()
	if n, err := qa.PostSend(wrs); err != nil {
		t.Fatalf("posted %d: %v", n, err)
	}
	gone(t, pair, db)
	vanished := time.Now()

	// Completions of A: successes, one RETRY_EXC_ERR, flushes; in order.
	tNs := time.Duration(4096) << timeout
	expect := time.Duration(retry+1) * tNs
	bound := 4*expect + 2*time.Second
	var got []verbs.WC
	var excAt time.Duration
	buf := make([]verbs.WC, 32)
	for len(got) < nwr && time.Since(vanished) < bound+10*time.Second {
		k := scqA.Poll(buf)
		for _, w := range buf[:k] {
			if w.Status == verbs.WCRetryExcErr && excAt == 0 {
				excAt = time.Since(vanished)
			}
		}
		got = append(got, buf[:k]...)
		if k == 0 {
			runtime.Gosched()
		}
	}
	if len(got) != nwr {
		t.Fatalf("%d of %d send completions after %v: %+v", len(got), nwr, time.Since(vanished), da.Stats())
	}
	succ := 0
	for succ < nwr && got[succ].Status == verbs.WCSuccess {
		succ++
	}
	for i, w := range got {
		want := verbs.WCWRFlushErr
		switch {
		case i < succ:
			want = verbs.WCSuccess
		case i == succ:
			want = verbs.WCRetryExcErr
		}
		if w.WRID != wrs[i].WRID || w.Status != want || w.Opcode != wcOpcodeOf(wrs[i].Opcode) || w.QPNum != qa.Num() {
			t.Fatalf("send completion %d: %+v, want WRID %d %v %v (%d succeeded before)", i, w, wrs[i].WRID, want, wcOpcodeOf(wrs[i].Opcode), succ)
		}
	}
	if succ > nwr/2 {
		t.Errorf("%d of %d WRs succeeded, but B could take only the first %d SENDs", succ, nwr, nwr/8)
	}
	if excAt > bound {
		t.Errorf("RETRY_EXC_ERR %v after the peer vanished; (retry_cnt %d + 1) x timeout %v = %v; bound %v", excAt, retry, tNs, expect, bound)
	}
	// Receives: flushed in order.
	rg := e2ePoll(t, "A receives", rcqA, nrecv)
	for i, w := range rg {
		if w.WRID != 1000+uint64(i) || w.Status != verbs.WCWRFlushErr || w.Opcode != verbs.WCRecv {
			t.Errorf("receive completion %d: %+v, want WRID %d WR_FLUSH_ERR RECV", i, w, 1000+i)
		}
	}
	time.Sleep(20 * time.Millisecond)
	e2eNoMore(t, "A send CQ", scqA)
	e2eNoMore(t, "A receive CQ", rcqA)
	attr, err := qa.Query()
	e2eMust(t, err)
	if attr.State != verbs.QPSErr {
		t.Errorf("QP state %v, want ERR", attr.State)
	}
	st := da.Stats()
	timeouts := st.Timeouts - before.Timeouts
	if timeouts < uint64(retry)+1 || timeouts > uint64(retry)+2 {
		t.Errorf("%d local ACK timeouts, want retry_cnt + 1 = %d", timeouts, retry+1)
	}
	if st.Retransmits == before.Retransmits {
		t.Error("no retransmission")
	}
	t.Logf("%d of %d WRs succeeded before the peer vanished; RETRY_EXC_ERR after %v ((retry_cnt %d + 1) x %v = %v; bound %v); %d timeouts, %d packets retransmitted",
		succ, nwr, excAt.Round(time.Microsecond), retry, tNs, expect, bound, timeouts, st.Retransmits-before.Retransmits)
	da.Close()
	db.Close()
	time.Sleep(10 * time.Millisecond)
	if g := runtime.NumGoroutine(); g > goroutines {
		t.Errorf("%d goroutines after, %d before", g, goroutines)
	}
}

// wcOpcodeOf is the completion opcode of a send WR opcode.
func wcOpcodeOf(o verbs.WROpcode) verbs.WCOpcode {
	switch o {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		return verbs.WCRDMAWrite
	case verbs.WRRDMARead:
		return verbs.WCRDMARead
	case verbs.WRAtomicCmpAndSwp:
		return verbs.WCCompSwap
	case verbs.WRAtomicFetchAndAdd:
		return verbs.WCFetchAdd
	}
	return verbs.WCSend
}
