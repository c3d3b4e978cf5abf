//go:build linux

package soft

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"github.com/goroce/goroce/internal/testenv"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/tee"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
)

// Helpers of the end-to-end tests over real sockets in two network
// namespaces (netns_test.go). Names start with e2e so that they do not meet
// the other tests' helpers of the package.

// e2ePollTimeout bounds every wait for completions.
const e2ePollTimeout = 20 * time.Second

// e2eAccess is every access right a test buffer needs.
const e2eAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// e2eEnv is two soft devices, A and B, each on a UDP socket in its own
// network namespace, the namespaces joined by a veth pair, every packet the
// devices send captured.
//
// Two pcaps are written: pcap holds every packet either device sent;
// checkPcap the same but for packets byte for byte identical to one sent
// before (same addresses, same transport packet, ICRC included), which only
// retransmissions are. The wire checker judges packets one at a time, so
// its verdict on a repeated packet is the verdict on the first copy; leaving
// the copies out bounds its running time (about 2 ms a packet) when the
// engine retransmits a lot.
type e2eEnv struct {
	pmtu      verbs.MTU // the path MTU the RC QPs use
	pair      *netns.Pair
	a, b      *Device
	pcap      string // every packet
	checkPcap string // every distinct packet
	full      *e2ePcap
	distinct  *e2ePcap

	// hold, when set, sees every packet device A is about to send, on A's
	// driver goroutine, before it goes out; it may block to hold A back.
	hold atomic.Pointer[func(pkt []byte)]

	mu     sync.Mutex // guards seen and the counters
	seen   map[[sha256.Size]byte]struct{}
	nPkts  int // packets sent by the devices
	nDupes int // of which byte-identical repeats
}

// e2ePcap is a pcap file being written.
type e2ePcap struct {
	f  *os.File
	bw *bufio.Writer
	pw *tee.PcapWriter
}

func e2eNewPcap(t *testing.T, path string) *e2ePcap {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	p := &e2ePcap{f: f, bw: bufio.NewWriterSize(f, 1<<20)}
	if p.pw, err = tee.NewPcapWriter(p.bw); err != nil {
		t.Fatal(err)
	}
	return p
}

// close flushes the file; it reports the first error of writing it.
func (p *e2ePcap) close() error {
	if err := p.pw.Err(); err != nil {
		return err
	}
	if err := p.bw.Flush(); err != nil {
		return err
	}
	return p.f.Close()
}

// capture is the tee function of both devices: it runs on their driver
// goroutines.
func (env *e2eEnv) capture(ts time.Time, d tee.Dir, src, dst netip.Addr, srcPort uint16, pkt []byte) {
	if d != tee.Out {
		return
	}
	if f := env.hold.Load(); f != nil && src == env.a.Addr() {
		(*f)(pkt)
	}
	h := sha256.New()
	a, b := src.As16(), dst.As16()
	h.Write(a[:])
	h.Write(b[:])
	h.Write(pkt)
	var key [sha256.Size]byte
	h.Sum(key[:0])
	env.mu.Lock()
	defer env.mu.Unlock()
	env.full.pw.Write(ts, d, src, dst, srcPort, pkt)
	env.nPkts++
	if _, dup := env.seen[key]; dup {
		env.nDupes++
		return
	}
	env.seen[key] = struct{}{}
	env.distinct.pw.Write(ts, d, src, dst, srcPort, pkt)
}

// e2eSetup creates the namespaces (skipping without root), the sockets
// inside them, the pcaps (in dir) and the devices. Cleanups close the devices before
// the namespaces go.
func e2eSetup(t *testing.T, pmtu verbs.MTU, vethMTU int, dir string) *e2eEnv {
	t.Helper()
	env := &e2eEnv{pmtu: pmtu, seen: map[[sha256.Size]byte]struct{}{}}
	env.pair = netns.NewPair(t, netns.Options{MTU: vethMTU}) // cleanup: namespaces deleted last
	env.pcap = filepath.Join(dir, fmt.Sprintf("netns-pmtu%d.pcap", pmtu.Bytes()))
	env.checkPcap = filepath.Join(dir, fmt.Sprintf("netns-pmtu%d-distinct.pcap", pmtu.Bytes()))
	env.full, env.distinct = e2eNewPcap(t, env.pcap), e2eNewPcap(t, env.checkPcap)
	// Each socket is created on a thread inside its namespace and stays
	// there; the device's driver goroutine may then run anywhere.
	listen := func(ns *netns.NS, addr netip.Addr) (c *udp.Conn, err error) {
		err = ns.Do(func() (err error) {
			c, err = udp.Listen(addr, udp.Options{})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("udp.Listen(%v) in %s: %w", addr, ns.Name, err)
		}
		return c, nil
	}
	ca, err := listen(env.pair.A, env.pair.AddrA)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := listen(env.pair.B, env.pair.AddrB)
	if err != nil {
		ca.Close()
		t.Fatal(err)
	}
	// A never sends inline from PostSend, so that hold runs on its driver
	// goroutine and not on the test's, which it would block.
	env.a, err = New(Options{Name: "nsa", Conn: tee.New(ca, env.capture), NoInline: true})
	if err != nil {
		ca.Close()
		cb.Close()
		t.Fatal(err)
	}
	env.b, err = New(Options{Name: "nsb", Conn: tee.New(cb, env.capture)})
	if err != nil {
		env.a.Close()
		cb.Close()
		t.Fatal(err)
	}
	t.Cleanup(env.close) // LIFO: runs before the namespaces are deleted
	return env
}

// close stops both devices (idempotent).
func (env *e2eEnv) close() {
	env.a.Close()
	env.b.Close()
}

// closePcaps closes the pcap files once the devices are closed, and returns
// how many packets were captured and how many of them were repeats.
func (env *e2eEnv) closePcaps() (pkts, dupes int, err error) {
	env.close()
	if err := env.full.close(); err != nil {
		return 0, 0, fmt.Errorf("pcap %s: %w", env.pcap, err)
	}
	if err := env.distinct.close(); err != nil {
		return 0, 0, fmt.Errorf("pcap %s: %w", env.checkPcap, err)
	}
	env.mu.Lock()
	defer env.mu.Unlock()
	return env.nPkts, env.nDupes, nil
}

// sync orders the test goroutine's accesses to registered memory and the
// device drivers' for the race detector, both ways. A driver reads and writes
// registered memory holding the device mutex; what tells the test that it is
// done (a completion on the other device, after packets went through the
// kernel) or that it may begin (a post on the other device) is no
// synchronisation the race detector sees, but taking each device's mutex
// is. Call it after the test prepared the buffers, before posting, and
// after the completions, before checking the buffers.
func (env *e2eEnv) sync() {
	env.a.Stats()
	env.b.Stats()
}

// e2eStatsDelta formats the non-zero counters of now - before.
func e2eStatsDelta(now, before engine.Stats) string {
	n, b := reflect.ValueOf(now), reflect.ValueOf(before)
	var out []string
	for i := range n.NumField() {
		if d := n.Field(i).Uint() - b.Field(i).Uint(); d != 0 {
			out = append(out, fmt.Sprintf("%s %d", n.Type().Field(i).Name, d))
		}
	}
	return strings.Join(out, ", ")
}

// e2eUDPCounters returns the kernel's UDP counters (the Udp: lines of
// /proc/net/snmp) inside a namespace, e.g. "RcvbufErrors" -> datagrams
// dropped because the socket's receive buffer was full.
func e2eUDPCounters(ns *netns.NS) (map[string]uint64, error) {
	out, err := ns.Exec("cat", "/proc/net/snmp")
	if err != nil {
		return nil, err
	}
	var names, values []string
	for _, l := range strings.Split(string(out), "\n") {
		if f, ok := strings.CutPrefix(l, "Udp: "); ok {
			if names == nil {
				names = strings.Fields(f)
			} else {
				values = strings.Fields(f)
			}
		}
	}
	if len(names) == 0 || len(names) != len(values) {
		return nil, fmt.Errorf("no Udp counters in /proc/net/snmp of %s", ns.Name)
	}
	m := map[string]uint64{}
	for i, n := range names {
		v, err := strconv.ParseUint(values[i], 10, 64)
		if err != nil {
			return nil, err
		}
		m[n] = v
	}
	return m, nil
}

// e2eKernelDrops returns how many UDP datagrams the kernel of a namespace
// dropped for want of room in a socket's receive buffer, or 0 if it cannot
// tell.
func e2eKernelDrops(ns *netns.NS) uint64 {
	c, err := e2eUDPCounters(ns)
	if err != nil {
		return 0
	}
	return c["RcvbufErrors"]
}

// e2eRes is a device's objects a test uses: a context, a PD, and a buffer
// registered with every access right.
type e2eRes struct {
	dev *Device
	ctx verbs.Context
	pd  verbs.PD
	mr  verbs.MR
	buf []byte
}

func e2eNewRes(t testing.TB, d *Device, size int) *e2eRes {
	t.Helper()
	r := &e2eRes{dev: d, buf: make([]byte, size)}
	var err error
	r.ctx, err = d.Open()
	e2eMust(t, err)
	r.pd, err = r.ctx.AllocPD()
	e2eMust(t, err)
	r.mr, err = r.pd.RegMR(r.buf, e2eAccess)
	e2eMust(t, err)
	t.Cleanup(func() { r.mr.Dereg() })
	return r
}

// extraMR registers another buffer of size bytes in the same PD.
func (r *e2eRes) extraMR(t testing.TB, size int) verbs.MR {
	t.Helper()
	mr, err := r.pd.RegMR(make([]byte, size), e2eAccess)
	e2eMust(t, err)
	t.Cleanup(func() { mr.Dereg() })
	return mr
}

// sge returns one SGE of n bytes at offset off of the buffer.
func (r *e2eRes) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: r.mr.Addr() + uint64(off), Length: uint32(n), LKey: r.mr.LKey()}}
}

func (r *e2eRes) cq(t testing.TB, n int) verbs.CQ {
	t.Helper()
	cq, err := r.ctx.CreateCQ(n, nil)
	e2eMust(t, err)
	t.Cleanup(func() { cq.Destroy() })
	return cq
}

// qp creates a QP, destroyed at the end of the test.
func (r *e2eRes) qp(t testing.TB, typ verbs.QPType, scq, rcq verbs.CQ, srq verbs.SRQ, maxWR uint32) verbs.QP {
	t.Helper()
	qp, err := r.pd.CreateQP(&verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, SRQ: srq, QPType: typ,
		Cap: verbs.QPCap{MaxSendWR: maxWR, MaxRecvWR: maxWR, MaxSendSGE: 4, MaxRecvSGE: 4}})
	e2eMust(t, err)
	t.Cleanup(func() { qp.Destroy() })
	return qp
}

func e2eMust(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// e2eRCToRTS moves an RC QP from RESET to RTS aimed at peer QPN on the
// device with GID peer: it receives from rqpsn and sends from sqpsn.
func e2eRCToRTS(t testing.TB, qp verbs.QP, pmtu verbs.MTU, peerQPN uint32, peer verbs.GID, rqpsn, sqpsn uint32) {
	t.Helper()
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: pmtu, DestQPN: peerQPN, RQPSN: rqpsn,
		MaxDestRdAtomic: 16, MinRNRTimer: 12, AHAttr: verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: peer, PortNum: 1}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: sqpsn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
}

// e2eConnect connects RC QPs x (on device dx) and y (on dy); x sends from
// PSN px, y from py.
func e2eConnect(t testing.TB, pmtu verbs.MTU, x verbs.QP, dx *Device, px uint32, y verbs.QP, dy *Device, py uint32) {
	t.Helper()
	e2eRCToRTS(t, x, pmtu, y.Num(), dy.GID(), py, px)
	e2eRCToRTS(t, y, pmtu, x.Num(), dx.GID(), px, py)
}

// e2eUDToRTS moves a UD QP from RESET to RTS with Q_Key qkey.
func e2eUDToRTS(t testing.TB, qp verbs.QP, qkey, sqpsn uint32) {
	t.Helper()
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: qkey},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState))
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: sqpsn}, verbs.AttrState|verbs.AttrSQPSN))
}

// e2eCQWant is a CQ and how many completions to collect from it.
type e2eCQWant struct {
	name string
	cq   verbs.CQ
	n    int
	got  []verbs.WC
}

// e2eCollect polls the CQs round robin until each gave its n completions,
// failing the test after e2ePollTimeout. It never takes more than n from a
// CQ, so that extra completions show in e2eNoMore.
func e2eCollect(t testing.TB, ws ...*e2eCQWant) {
	t.Helper()
	deadline := time.Now().Add(e2ePollTimeout)
	buf := make([]verbs.WC, 64)
	for {
		done, idle := true, true
		for _, w := range ws {
			if len(w.got) >= w.n {
				continue
			}
			done = false
			k := w.cq.Poll(buf[:min(len(buf), w.n-len(w.got))])
			if k > 0 {
				w.got = append(w.got, buf[:k]...)
				idle = false
			}
		}
		if done {
			return
		}
		if idle {
			if time.Now().After(deadline) {
				var b strings.Builder
				for _, w := range ws {
					fmt.Fprintf(&b, "\n  %s: %d of %d completions", w.name, len(w.got), w.n)
					for i, c := range w.got {
						if i >= 8 {
							fmt.Fprintf(&b, "\n    ...")
							break
						}
						fmt.Fprintf(&b, "\n    %+v", c)
					}
				}
				t.Fatalf("completions missing after %v:%s", e2ePollTimeout, b.String())
			}
			e2eYield()
		}
	}
}

// e2ePoll collects n completions from one CQ.
func e2ePoll(t testing.TB, name string, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	w := &e2eCQWant{name: name, cq: cq, n: n}
	e2eCollect(t, w)
	return w.got
}

// e2eNoMore fails if a CQ holds a completion nobody expected.
func e2eNoMore(t testing.TB, name string, cq verbs.CQ) {
	t.Helper()
	wc := make([]verbs.WC, 4)
	if k := cq.Poll(wc); k > 0 {
		t.Errorf("%s: %d unexpected completions, first %+v", name, k, wc[0])
	}
}

// e2eWCDiff lists the fields in which got differs from want, or "".
func e2eWCDiff(got, want verbs.WC) string {
	var d []string
	add := func(name string, g, w any) {
		if g != w {
			d = append(d, fmt.Sprintf("%s %v want %v", name, g, w))
		}
	}
	add("WRID", fmt.Sprintf("%#x", got.WRID), fmt.Sprintf("%#x", want.WRID))
	add("status", got.Status, want.Status)
	add("opcode", got.Opcode, want.Opcode)
	add("vendor_err", got.VendorErr, want.VendorErr)
	add("byte_len", got.ByteLen, want.ByteLen)
	add("imm", fmt.Sprintf("%#x", got.Imm), fmt.Sprintf("%#x", want.Imm))
	add("invalidated_rkey", got.InvalidatedRKey, want.InvalidatedRKey)
	add("qp_num", fmt.Sprintf("%#x", got.QPNum), fmt.Sprintf("%#x", want.QPNum))
	add("src_qp", fmt.Sprintf("%#x", got.SrcQP), fmt.Sprintf("%#x", want.SrcQP))
	add("wc_flags", fmt.Sprintf("%#x", uint32(got.Flags)), fmt.Sprintf("%#x", uint32(want.Flags)))
	add("pkey_index", got.PKeyIndex, want.PKeyIndex)
	add("slid", got.SLID, want.SLID)
	add("sl", got.SL, want.SL)
	add("dlid_path_bits", got.DLIDPathBits, want.DLIDPathBits)
	return strings.Join(d, ", ")
}

// e2eCheckWCs compares completions with the expected ones, in order.
// sendLen lists, per completion, a byte_len also accepted: libibverbs
// defines byte_len of a send-queue completion only for RDMA READ and
// atomics (ibv_poll_cq(3)); rdma_rxe reports the message length for SEND
// and WRITE too, goroce 0. Pass nil when byte_len must match exactly.
func e2eCheckWCs(t testing.TB, what string, got, want []verbs.WC, sendLen []uint32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d completions, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range want {
		w := want[i]
		if sendLen != nil && got[i].ByteLen == sendLen[i] {
			w.ByteLen = sendLen[i]
		}
		if d := e2eWCDiff(got[i], w); d != "" {
			t.Errorf("%s: completion %d: %s\n  got  %+v\n  want %+v", what, i, d, got[i], w)
			if bad++; bad >= 8 {
				t.FailNow()
			}
		}
	}
	if bad > 0 {
		t.FailNow()
	}
}

// e2eYield lets the device drivers run (2 cores: a busy poll starves them).
func e2eYield() { runtime.Gosched() }

// e2eFill fills b with a pseudo-random pattern of seed.
func e2eFill(b []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	for j := 0; i < len(b); i, j = i+1, j+1 {
		b[i] = byte(x >> (8 * j))
	}
}

// e2ePattern returns n bytes of e2eFill(seed).
func e2ePattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	e2eFill(b, seed)
	return b
}

// e2eSame fails unless got and want are the same bytes, naming the first
// difference.
func e2eSame(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	first, n := -1, 0
	for i := range got {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	t.Fatalf("%s: %d of %d bytes differ, first at offset %d: %#02x want %#02x", what, n, len(want), first, got[first], want[first])
}

// e2eCheck is a run of the independent wire checker named by
// GOROCE_WIRE_CHECK on one pcap, started in the background (it takes about
// 2 ms a packet) so that it overlaps with the next traffic.
type e2eCheck struct {
	pcap  string
	pmtu  verbs.MTU
	skip  string // why it does not run
	fail  error  // why it could not start
	cmd   *exec.Cmd
	out   bytes.Buffer
	start time.Time
	done  chan error
}

// e2eStartWireCheck starts `$GOROCE_WIRE_CHECK --pmtu N pcap`, or records
// why it cannot run. The process is killed at the end of test t if nobody
// waited for it.
func e2eStartWireCheck(t *testing.T, pcap string, pmtu verbs.MTU) *e2eCheck {
	c := &e2eCheck{pcap: pcap, pmtu: pmtu}
	checker := os.Getenv("GOROCE_WIRE_CHECK")
	if checker == "" {
		c.skip = "GOROCE_WIRE_CHECK (path of wire-check's check-pcap.sh) is not set"
		return c
	}
	if _, err := exec.LookPath("tshark"); err != nil {
		c.skip = "tshark is not installed; the wire checker needs it"
		return c
	}
	c.cmd = testenv.WireCheckCommand(t, checker, "--pmtu", pmtu.String(), pcap)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	c.start = time.Now()
	if err := c.cmd.Start(); err != nil {
		c.fail = fmt.Errorf("wire check: %w", err)
		c.cmd = nil
		return c
	}
	c.done = make(chan error, 1)
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			c.cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// wait waits for the checker and requires exit status 0 and a last line
// ending " 0 failed".
func (c *e2eCheck) wait(t *testing.T) {
	t.Helper()
	if c.fail != nil {
		t.Fatal(c.fail)
	}
	if c.cmd == nil {
		testenv.Skip(t, testenv.WireCheck, c.skip)
	}
	var err error
	select {
	case err = <-c.done:
		c.done <- err // for the cleanup
	case <-time.After(5 * time.Minute):
		t.Fatalf("wire check of %s: no verdict after 5 minutes", c.pcap)
	}
	text := strings.TrimSpace(c.out.String())
	last := text
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	if err != nil || !strings.HasSuffix(last, " 0 failed") {
		var bad []string
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, "BAD") || strings.Contains(l, "!!") {
				bad = append(bad, l)
				if len(bad) == 20 {
					break
				}
			}
		}
		t.Fatalf("wire check of %s (pmtu %d): %v: %s\nfirst bad lines:\n%s", c.pcap, c.pmtu.Bytes(), err, last, strings.Join(bad, "\n"))
	}
	t.Logf("wire check (pmtu %d): %s, %v after the capture closed", c.pmtu.Bytes(), last, time.Since(c.start).Round(time.Millisecond))
}
