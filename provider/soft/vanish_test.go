//go:build linux

package soft

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
)

// vanishRCToRTS moves an RC QP to RTS aimed at peer with the given local
// ACK timeout (4.096 µs x 2^timeout) and retry count.
func vanishRCToRTS(t testing.TB, qp verbs.QP, peerQPN uint32, peer verbs.GID, psn uint32, timeout, retry uint8) {
	t.Helper()
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: peerQPN, RQPSN: psn,
		MaxDestRdAtomic: 16, MinRNRTimer: 1, AHAttr: verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: peer, PortNum: 1}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: psn, Timeout: timeout, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
}

// TestPeerVanishes: two devices in two network namespaces; the survivor A
// posts receives and a mix of SENDs, RDMA WRITEs, RDMA READs (256 KiB each)
// and atomics, more SENDs than B has receives for, and B vanishes right
// after, with at least half of them outstanding. Three ways: B's device
// closes (its socket is gone, the kernel answers port unreachable); the
// veth link is deleted (A's packets go nowhere); B runs in a process of its
// own, which is killed (SIGKILL). A's QP must reach ERROR with RETRY_EXC_ERR
// once its local ACK timer expired retry_cnt + 1 times without progress:
// within (retry_cnt + 1) x 4.096 µs x 2^timeout of the vanishing, asserted
// with a generous margin for a loaded machine (a correctness bound, not a
// speed measurement). Every send WR completes exactly once, in post order:
// successes first (what B acknowledged before it went), then one
// RETRY_EXC_ERR, then WR_FLUSH_ERR; every posted receive is flushed in
// order.
func TestPeerVanishes(t *testing.T) {
	netns.Require(t)
	for _, c := range []struct {
		name    string
		peer    func(t *testing.T, pair *netns.Pair, aQPN uint32, timeout, retry uint8) *vanishPeer
		prefix  string
		timeout uint8 // 4.096 µs x 2^timeout
		retry   uint8
	}{
		{"device_closed", inProcessPeer(func(t *testing.T, _ *netns.Pair, b *Device) { b.Close() }), "10.79.4.0/30", 12, 3},
		{"link_deleted", inProcessPeer(func(t *testing.T, pair *netns.Pair, _ *Device) {
			if out, err := pair.B.Exec("ip", "link", "del", netns.LinkName); err != nil {
				t.Fatalf("deleting the veth link: %v: %s", err, out)
			}
		}), "10.79.5.0/30", 11, 5},
		{"process_killed", processPeer, "10.79.7.0/30", 12, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			vanish(t, netip.MustParsePrefix(c.prefix), c.timeout, c.retry, c.peer)
		})
	}
}

// vanishSize is the size of the bigger WRs, vanishRecvs how many receives of
// vanishSize/4 the peer posts after the warm-up one (of vanishSize).
const (
	vanishWRs   = 96
	vanishSize  = 256 << 10
	vanishRecvs = vanishWRs / 8
)

// vanishPeer is device B's side of TestPeerVanishes: its QP (connected to
// A's, with a warm-up receive and vanishRecvs more posted) and its memory,
// every right granted, at least vanishWRs*vanishSize/4 + 1 MiB.
type vanishPeer struct {
	qpn  uint32
	gid  verbs.GID
	addr uint64
	rkey uint32
	// gone makes B vanish and returns when it did (what took time, such as
	// an ip command, not counted); wait, when set, waits for B's warm-up
	// receive; stop ends what is left of B (its device, its process).
	gone func() time.Time
	wait func()
	stop func()
}

// inProcessPeer returns B as a device of this process, made to vanish by
// gone.
func inProcessPeer(gone func(*testing.T, *netns.Pair, *Device)) func(*testing.T, *netns.Pair, uint32, uint8, uint8) *vanishPeer {
	return func(t *testing.T, pair *netns.Pair, aQPN uint32, timeout, retry uint8) *vanishPeer {
		db := nsDevice(t, pair.B, pair.AddrB, "nsb")
		rb := e2eNewRes(t, db, vanishWRs*vanishSize/4+1<<20)
		cqB := rb.cq(t, 256)
		qb := rb.qp(t, verbs.QPTRC, cqB, cqB, nil, 128)
		vanishRCToRTS(t, qb, aQPN, verbs.GIDFromAddr(pair.AddrA), 0x100, timeout, retry)
		vanishPostRecvs(t, qb, rb.mr)
		return &vanishPeer{qpn: qb.Num(), gid: db.GID(), addr: rb.mr.Addr(), rkey: rb.mr.RKey(),
			gone: func() time.Time { gone(t, pair, db); return time.Now() },
			stop: func() { db.Close() },
			wait: func() { e2ePoll(t, "warm-up receive", cqB, 1) }}
	}
}

// vanishPostRecvs posts B's receives: one of vanishSize for the warm-up
// SEND, then vanishRecvs of vanishSize/4.
func vanishPostRecvs(t testing.TB, qb verbs.QP, mr verbs.MR) {
	t.Helper()
	sge := func(off, n int) []verbs.SGE {
		return []verbs.SGE{{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}}
	}
	recvs := []verbs.RecvWR{{WRID: 1, SGList: sge(0, vanishSize)}}
	for i := range vanishRecvs {
		recvs = append(recvs, verbs.RecvWR{WRID: uint64(2 + i), SGList: sge(i*(vanishSize/4), vanishSize/4)})
	}
	_, err := qb.PostRecv(recvs)
	e2eMust(t, err)
}

// nsDevice creates a soft device on a UDP socket (port 4791) made inside
// namespace ns, closed at the end of the test.
func nsDevice(t testing.TB, ns *netns.NS, addr netip.Addr, name string) *Device {
	t.Helper()
	var c *udp.Conn
	err := ns.Do(func() (err error) {
		c, err = udp.Listen(addr, udp.Options{})
		return err
	})
	if err != nil {
		t.Fatalf("udp.Listen(%v) in %s: %v", addr, ns.Name, err)
	}
	d, err := New(Options{Name: name, Conn: c})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func vanish(t *testing.T, prefix netip.Prefix, timeout, retry uint8, mkPeer func(*testing.T, *netns.Pair, uint32, uint8, uint8) *vanishPeer) {
	pair := netns.NewPair(t, netns.Options{Prefix: prefix})
	goroutines := runtime.NumGoroutine()
	da := nsDevice(t, pair.A, pair.AddrA, "nsa")
	const nwr, size, nrecv = vanishWRs, vanishSize, 8
	ra := e2eNewRes(t, da, 2*nwr*size/4+1<<20)
	scqA, rcqA := ra.cq(t, 256), ra.cq(t, 64)
	qa := ra.qp(t, verbs.QPTRC, scqA, rcqA, nil, 128)
	peer := mkPeer(t, pair, qa.Num(), timeout, retry)
	vanishRCToRTS(t, qa, peer.qpn, peer.gid, 0x100, timeout, retry)

	// The connection works: one of each operation completes.
	e2eFill(ra.buf, 1)
	warm := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, SGList: ra.sge(0, 4096)},
		{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: ra.sge(0, 4096), RemoteAddr: peer.addr, RKey: peer.rkey},
		{WRID: 3, Opcode: verbs.WRRDMARead, SGList: ra.sge(size, 4096), RemoteAddr: peer.addr, RKey: peer.rkey},
		{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, SGList: ra.sge(2*size, 8), RemoteAddr: peer.addr + 8192, RKey: peer.rkey, CompareAdd: 1},
	}
	for i := range warm {
		warm[i].Flags = verbs.SendSignaled
	}
	_, err := qa.PostSend(warm)
	e2eMust(t, err)
	for _, w := range e2ePoll(t, "warm-up", scqA, len(warm)) {
		if w.Status != verbs.WCSuccess {
			t.Fatalf("warm-up completion %+v", w)
		}
	}
	if peer.wait != nil {
		peer.wait()
	}

	// Receives on A (B would SEND to it), then the mix, then B vanishes.
	for i := range nrecv {
		_, err := qa.PostRecv([]verbs.RecvWR{{WRID: 1000 + uint64(i), SGList: ra.sge(i*4096, 4096)}})
		e2eMust(t, err)
	}
	// B has receives for half of the SENDs (vanishRecvs): the SEND after
	// them meets RNR NAKs (retried forever: rnr_retry 7) until B vanishes,
	// so at least half of the WRs are still outstanding then, however fast
	// the rest go.
	wrs := make([]verbs.SendWR, nwr)
	for i := range wrs {
		w := &wrs[i]
		w.WRID, w.Flags = uint64(100+i), verbs.SendSignaled
		remote := peer.addr + uint64(i%(nwr/4))*(size/4)
		switch i % 4 {
		case 0:
			w.Opcode, w.SGList = verbs.WRSend, ra.sge(0, size/4)
		case 1:
			w.Opcode, w.SGList, w.RemoteAddr, w.RKey = verbs.WRRDMAWrite, ra.sge(0, size), remote, peer.rkey
		case 2:
			w.Opcode, w.SGList, w.RemoteAddr, w.RKey = verbs.WRRDMARead, ra.sge(size+(i%8)*size, size), remote, peer.rkey
		case 3:
			w.Opcode, w.SGList, w.RemoteAddr, w.RKey = verbs.WRAtomicCmpAndSwp, ra.sge(2*size+8*(i%64), 8), peer.addr+8192+8, peer.rkey
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
	vanished := peer.gone()

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
		t.Errorf("%d of %d WRs succeeded, but B could take only the first %d SENDs", succ, nwr, vanishRecvs)
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
	// After the last progress the timer expires retry_cnt times, each
	// followed by a retransmission, and once more for the error. (More may
	// have expired before, while B was still there but slow to answer:
	// progress then resets the retry count.)
	if timeouts < uint64(retry)+1 {
		t.Errorf("%d local ACK timeouts, want at least retry_cnt + 1 = %d", timeouts, retry+1)
	}
	if st.Retransmits == before.Retransmits {
		t.Error("no retransmission")
	}
	t.Logf("%d of %d WRs succeeded before the peer vanished; RETRY_EXC_ERR after %v ((retry_cnt %d + 1) x %v = %v; bound %v); %d timeouts, %d packets retransmitted",
		succ, nwr, excAt.Round(time.Microsecond), retry, tNs, expect, bound, timeouts, st.Retransmits-before.Retransmits)
	da.Close()
	peer.stop()
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

// vanishPeerEnv, when set, makes the test binary TestPeerVanishes' peer
// process (TestVanishPeerProcess): "namespace,addrB,addrA,aQPN,timeout,retry".
const vanishPeerEnv = "GOROCE_VANISH_PEER"

// processPeer runs B in a process of its own: this test binary again, with
// only TestVanishPeerProcess, which opens B's socket inside namespace B. B
// vanishes when the process is killed (SIGKILL, by its PID).
func processPeer(t *testing.T, pair *netns.Pair, aQPN uint32, timeout, retry uint8) *vanishPeer {
	cmd := exec.Command(os.Args[0], "-test.run=^TestVanishPeerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%v,%v,%d,%d,%d", vanishPeerEnv, pair.B.Name, pair.AddrB, pair.AddrA, aQPN, timeout, retry))
	stdin, err := cmd.StdinPipe() // kept open: the peer lives until it is closed or the peer is killed
	e2eMust(t, err)
	stdout, err := cmd.StdoutPipe()
	e2eMust(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	e2eMust(t, cmd.Start())
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var once sync.Once
	var killed time.Time
	kill := func() {
		once.Do(func() {
			cmd.Process.Kill() // SIGKILL, to the process this test started
			killed = time.Now()
			stdin.Close()
			<-exited
		})
	}
	t.Cleanup(kill)
	p := &vanishPeer{gid: verbs.GIDFromAddr(pair.AddrB), gone: func() time.Time { kill(); return killed }, stop: kill}
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("peer process ended before it was ready: %s", stderr.String())
			}
			if _, err := fmt.Sscanf(l, "PEER %d %d %d", &p.qpn, &p.addr, &p.rkey); err == nil {
				t.Logf("peer process %d: QP %#x", cmd.Process.Pid, p.qpn)
				return p
			}
		case <-timer.C:
			t.Fatalf("peer process not ready after 20 s: %s", stderr.String())
		}
	}
}

// TestVanishPeerProcess is the peer process of TestPeerVanishes/process_killed
// (it skips unless started as one): device B on a UDP socket in namespace B,
// an RC QP connected to A's with its receives posted; it prints
// "PEER qpn addr rkey" and serves until killed, its stdin closes, or a
// minute passes.
func TestVanishPeerProcess(t *testing.T) {
	env := os.Getenv(vanishPeerEnv)
	if env == "" {
		t.Skip("the peer process of TestPeerVanishes/process_killed")
	}
	var nsName, addrB, addrA string
	var aQPN uint32
	var timeout, retry uint8
	f := strings.Split(env, ",")
	if len(f) != 6 {
		t.Fatalf("%s=%q", vanishPeerEnv, env)
	}
	nsName, addrB, addrA = f[0], f[1], f[2]
	if _, err := fmt.Sscanf(strings.Join(f[3:], " "), "%d %d %d", &aQPN, &timeout, &retry); err != nil {
		t.Fatalf("%s=%q: %v", vanishPeerEnv, env, err)
	}
	db := nsDevice(t, &netns.NS{Name: nsName}, netip.MustParseAddr(addrB), "nsb")
	rb := e2eNewRes(t, db, vanishWRs*vanishSize/4+1<<20)
	cqB := rb.cq(t, 256)
	qb := rb.qp(t, verbs.QPTRC, cqB, cqB, nil, 128)
	vanishRCToRTS(t, qb, aQPN, verbs.GIDFromAddr(netip.MustParseAddr(addrA)), 0x100, timeout, retry)
	vanishPostRecvs(t, qb, rb.mr)
	fmt.Printf("PEER %d %d %d\n", qb.Num(), rb.mr.Addr(), rb.mr.RKey())
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
	}
}
