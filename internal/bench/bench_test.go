package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cm/perftest"
	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/internal/racesync"
	"github.com/goroce/goroce/packetio/fault"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// This package's loopback addresses: 127.0.6.1 and 127.0.6.2.
var (
	addrA = netip.MustParseAddr("127.0.6.1")
	addrB = netip.MustParseAddr("127.0.6.2")
)

func TestParseTest(t *testing.T) {
	for _, name := range Tests {
		tt, err := ParseTest(name)
		if err != nil || tt.String() != name {
			t.Errorf("ParseTest(%q) = %v, %v", name, tt, err)
		}
	}
	for _, bad := range []string{"", "write", "write_", "_bw", "rdma_bw", "write_bw_lat", "WRITE_BW"} {
		if _, err := ParseTest(bad); !errors.Is(err, ErrUsage) {
			t.Errorf("ParseTest(%q): %v, want ErrUsage", bad, err)
		}
	}
}

func TestNormalize(t *testing.T) {
	o := Options{Test: Test{Verb: Write}}
	if err := o.normalize(); err != nil || o.Size != 65536 || o.Iters != 1000 || o.TxDepth != 128 || o.CQMod != 100 || o.QPs != 1 {
		t.Errorf("write_bw defaults: %+v, %v", o, err)
	}
	o = Options{Test: Test{Verb: Send, Lat: true}}
	if err := o.normalize(); err != nil || o.Size != 2 || o.TxDepth != 1 || o.CQMod != 1 {
		t.Errorf("send_lat defaults: %+v, %v", o, err)
	}
	o = Options{Test: Test{Verb: Atomic}, Inline: 100}
	if err := o.normalize(); err != nil || o.Size != 8 || o.Atomic != verbs.WRAtomicFetchAndAdd || o.Inline != 0 || o.QPTimeout != DefaultQPTimeout {
		t.Errorf("atomic_bw defaults (no inline for atomics, as perftest): %+v, %v", o, err)
	}
	o = Options{Test: Test{Verb: Write}, PostList: 16, Iters: 1600}
	if err := o.normalize(); err != nil || o.CQMod != 16 {
		t.Errorf("-l 16: CQ moderation %d (%v), want the list's 16", o.CQMod, err)
	}
	o = Options{Test: Test{Verb: Send}, UD: true, Inline: MaxInline}
	if err := o.normalize(); err != nil || o.Inline != MaxInlineUD {
		t.Errorf("UD inline %d (%v), want it cut to %d", o.Inline, err, MaxInlineUD)
	}
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"size 0 after default", Options{Test: Test{Verb: Write}, Size: -1}},
		{"size too large", Options{Test: Test{Verb: Write}, Size: MaxSize + 1}},
		{"atomic size", Options{Test: Test{Verb: Atomic}, Size: 16}},
		{"atomic -a", Options{Test: Test{Verb: Atomic}, All: true}},
		{"atomic op", Options{Test: Test{Verb: Atomic}, Atomic: verbs.WRSend}},
		{"few iterations", Options{Test: Test{Verb: Write}, Iters: 4}},
		{"duration UD", Options{Test: Test{Verb: Send}, UD: true, Duration: time.Second}},
		{"duration and all", Options{Test: Test{Verb: Write}, Duration: time.Second, All: true}},
		{"latency QPs", Options{Test: Test{Verb: Send, Lat: true}, QPs: 2}},
		{"too many QPs", Options{Test: Test{Verb: Write}, QPs: 5000}},
		{"tx depth", Options{Test: Test{Verb: Write}, TxDepth: 20000}},
		{"rx depth", Options{Test: Test{Verb: Send}, RxDepth: -1}},
		{"cq mod", Options{Test: Test{Verb: Write}, CQMod: 2000}},
		{"mtu", Options{Test: Test{Verb: Write}, MTU: 9}},
		{"gid", Options{Test: Test{Verb: Write}, GIDIndex: -1}},
		{"verify atomics", Options{Test: Test{Verb: Atomic}, Verify: true}},
		{"verify duration", Options{Test: Test{Verb: Write}, Verify: true, Duration: time.Second}},
		{"bad verb", Options{Test: Test{Verb: 7}}},
		{"warm-up send_bw", Options{Test: Test{Verb: Send}, WarmUp: true}},
		{"warm-up write_lat", Options{Test: Test{Verb: Write, Lat: true}, WarmUp: true}},
		{"UD write_bw", Options{Test: Test{Verb: Write}, UD: true}},
		{"-b send_lat", Options{Test: Test{Verb: Send, Lat: true}, Duplex: true}},
		{"-b UD", Options{Test: Test{Verb: Send}, Duplex: true, UD: true}},
		{"-b -D", Options{Test: Test{Verb: Write}, Duplex: true, Duration: time.Second}},
		{"-b verify", Options{Test: Test{Verb: Write}, Duplex: true, Verify: true}},
		{"inline too large", Options{Test: Test{Verb: Send}, Inline: MaxInline + 1}},
		{"inline negative", Options{Test: Test{Verb: Write}, Inline: -1}},
		{"qp timeout", Options{Test: Test{Verb: Write}, QPTimeout: 32}},
		{"post list latency", Options{Test: Test{Verb: Send, Lat: true}, PostList: 2}},
		{"post list iterations", Options{Test: Test{Verb: Write}, PostList: 16, Iters: 1001}},
		{"post list cq mod", Options{Test: Test{Verb: Write}, PostList: 16, CQMod: 5}},
		{"post list tx depth", Options{Test: Test{Verb: Write}, PostList: 32, TxDepth: 16}},
		{"UD read_lat", Options{Test: Test{Verb: Read, Lat: true}, UD: true}},
	} {
		if err := c.o.normalize(); !errors.Is(err, ErrUsage) {
			t.Errorf("%s: %v, want ErrUsage", c.name, err)
		}
	}
}

func TestSlotOffset(t *testing.T) {
	// 64-byte messages in a 4096-byte cycle buffer: 64 slots, then around.
	for _, c := range []struct {
		n                 uint64
		size, cycle, line int
		want              int
	}{
		{0, 64, 4096, 64, 0}, {1, 64, 4096, 64, 64}, {63, 64, 4096, 64, 4032}, {64, 64, 4096, 64, 0},
		{1, 2, 4096, 64, 64}, // small messages advance a cache line
		{1, 100, 4096, 64, 128}, {31, 100, 4096, 64, 31 * 128}, {32, 100, 4096, 64, 0},
		{5, 4096, 4096, 64, 0}, {5, 2048, 4096, 64, 2048}, {2, 2048, 4096, 64, 0},
	} {
		if got := slotOffset(c.n, c.size, c.cycle, c.line); got != c.want {
			t.Errorf("slotOffset(%d, %d, %d, %d) = %d, want %d", c.n, c.size, c.cycle, c.line, got, c.want)
		}
	}
}

// TestSlotCursor: the cursor a bandwidth test's post loop steps gives
// slotOffset's offsets, message after message.
func TestSlotCursor(t *testing.T) {
	for _, size := range []int{1, 2, 64, 100, 1000, 2048, 2049, 4096, 65536} {
		for _, line := range []int{64, 128} {
			c := newSlotCursor(size, 4096, line)
			for n := range uint64(300) {
				if got, want := c.next(), slotOffset(n, size, 4096, line); got != want {
					t.Fatalf("size %d, line %d, message %d: cursor %d, slotOffset %d", size, line, n, got, want)
				}
			}
		}
	}
}

func TestLatResult(t *testing.T) {
	// Posts 10, 20, ..., 1000 µs apart: the deltas are 10..990 µs (99 of
	// them); perftest drops the two largest and divides by 2 for SEND.
	var tp []int64
	var at int64
	for i := 0; i <= 99; i++ {
		tp = append(tp, at)
		at += int64(i+1) * 10_000
	}
	r := latResult(64, tp, 2)
	m := 97.0 // measured deltas after the tail
	wantAvg := (m + 1) / 2 * 10 / 2
	if r.Iters != 100 || r.Min != 5 || r.MaxAll != 495 || r.Max != 490 || r.Typical != 245 || math.Abs(r.Avg-wantAvg) > 1e-9 {
		t.Errorf("latResult = %+v; want min 5, max 490 (perftest's), max of all 495, typical 245, avg %v", r, wantAvg)
	}
	if r.P99 != 490 || r.P999 != 490 || r.P50 != r.Typical {
		t.Errorf("percentiles %v %v %v", r.P50, r.P99, r.P999)
	}
	// READ: whole round trips.
	if r := latResult(8, []int64{0, 4000, 8000, 12000, 16000, 20000}, 1); r.Typical != 4 || r.Stdev != 0 {
		t.Errorf("steady READ: %+v", r)
	}
}

func TestPeakDelta(t *testing.T) {
	// 8 messages, a completion every 4: posts at 0..7 µs, the first 4 done
	// at 10 µs, the next at 12 µs. Best window: posts 4..7 done at 12 µs
	// -> (12-4)/4 = 2 µs per message; whole run 12/8 = 1.5 µs.
	tp := []int64{0, 1000, 2000, 3000, 4000, 5000, 6000, 7000}
	tc := []int64{10000, 10000, 10000, 10000, 12000, 12000, 12000, 12000}
	if got := peakDelta(tp, tc, 4); got != 1500 {
		t.Errorf("peakDelta = %v, want 1500", got)
	}
	tc = []int64{4000, 4000, 4000, 4000, 40000, 40000, 40000, 40000}
	if got := peakDelta(tp, tc, 4); got != 1000 { // the first window: 4 in 4 µs
		t.Errorf("peakDelta = %v, want 1000", got)
	}
}

func TestCheckSlots(t *testing.T) {
	s := &session{o: Options{QPs: 1, Iters: 10, Size: 100}, cycle: 4096, cacheLine: 64, buff: 4096}
	s.buf = make([]byte, 2*4096)
	if err := s.checkSlots(1, 100); !errors.Is(err, ErrVerify) {
		t.Fatalf("an empty target passed: %v", err)
	}
	fillPattern(s.buf[4096:])
	if err := s.checkSlots(1, 100); err != nil {
		t.Fatal(err)
	}
	s.buf[4096+9*128+99]++ // the last byte of the 10th message
	if err := s.checkSlots(1, 100); !errors.Is(err, ErrVerify) {
		t.Fatalf("a changed byte passed: %v", err)
	}
	s.buf[4096+9*128+99]--
	s.buf[4096+10*128]++ // past what 10 messages cover
	if err := s.checkSlots(1, 100); err != nil {
		t.Fatalf("a byte no message covers failed: %v", err)
	}
}

func TestLoadStoreByte(t *testing.T) {
	b := make([]byte, 16)
	for i := range b {
		storeByte(b, i, byte(i+1))
	}
	for i := range b {
		if b[i] != byte(i+1) || loadByte(b, i) != byte(i+1) {
			t.Fatalf("byte %d: %d, %d", i, b[i], loadByte(b, i))
		}
	}
}

// newDev opens a soft device on a UDP socket of addr (port 4791).
func newDev(t testing.TB, addr netip.Addr) *soft.Device {
	t.Helper()
	conn, err := udp.Listen(addr, udp.Options{})
	if err != nil {
		t.Skipf("no UDP socket on %v: %v", addr, err)
	}
	dev, err := soft.New(soft.Options{Name: "soft0", Conn: conn})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// pair runs a test between two soft devices over UDP on loopback and
// returns both outcomes.
func pair(t testing.TB, srv, cli *soft.Device, o Options) (server, client *Outcome) {
	return pairOver(t, srv, cli, o, false)
}

// pairOver is pair with the exchange over TCP or, with cm, over rdma_cm
// (perftest's -R).
func pairOver(t testing.TB, srv, cli *soft.Device, o Options, cm bool) (server, client *Outcome) {
	t.Helper()
	server, client, serr, cerr := pairErr(t, srv, cli, o, cm)
	if serr != nil || cerr != nil {
		t.Fatalf("%v: server: %v; client: %v", o.Test, serr, cerr)
	}
	return server, client
}

// pairErr is pairOver returning each side's error; a side that fails does
// not end the other's run.
func pairErr(t testing.TB, srv, cli *soft.Device, o Options, cm bool) (server, client *Outcome, serr, cerr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ln net.Listener
	port := perftest.Port
	if !cm {
		var err error
		if ln, err = net.Listen("tcp", net.JoinHostPort(addrA.String(), "0")); err != nil {
			t.Fatal(err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
	}
	type res struct {
		out *Outcome
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var c *perftest.Conn
		var err error
		if cm {
			c, err = perftest.AcceptCM(ctx, srv, port)
		} else {
			c, err = perftest.Accept(ctx, ln)
		}
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer c.Close()
		vctx, err := srv.Open()
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer vctx.Close()
		so := o
		so.Client = false
		out, err := Run(ctx, vctx, c, so)
		if err != nil && !errors.Is(err, ErrUDLoss) {
			cancel() // the client may wait for this side forever
		}
		ch <- res{out, err}
	}()
	var c *perftest.Conn
	var err error
	if cm {
		c, err = perftest.DialCM(ctx, cli, addrA.String(), port)
	} else {
		c, err = perftest.Dial(ctx, addrA.String(), port)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	vctx, err := cli.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer vctx.Close()
	co := o
	co.Client = true
	cout, cerr := Run(ctx, vctx, c, co)
	if cerr != nil {
		c.Close()
	}
	r := <-ch
	return r.out, cout, r.err, cerr
}

// TestRunLoopback runs every test between two soft devices over UDP on
// loopback, with data verification where it applies, and checks the
// figures: the right sizes and counts, positive rates and times, both
// sides agreeing on each other's keys.
func TestRunLoopback(t *testing.T) {
	srv, cli := newDev(t, addrA), newDev(t, addrB)
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"write_bw", Options{Test: Test{Verb: Write}, Size: 4096, Iters: 500, Verify: true}},
		{"write_bw-small-2qp", Options{Test: Test{Verb: Write}, Size: 100, Iters: 300, QPs: 2, Verify: true, MTU: verbs.MTU1024}},
		{"read_bw", Options{Test: Test{Verb: Read}, Size: 9000, Iters: 200, Verify: true, OutReads: 4}},
		{"send_bw", Options{Test: Test{Verb: Send}, Size: 3000, Iters: 500, RxDepth: 64, Verify: true}},
		{"atomic_bw", Options{Test: Test{Verb: Atomic}, Iters: 300}},
		{"atomic_bw-cas", Options{Test: Test{Verb: Atomic}, Iters: 100, Atomic: verbs.WRAtomicCmpAndSwp}},
		{"write_bw-warm-up-2qp", Options{Test: Test{Verb: Write}, Size: 4096, Iters: 300, QPs: 2, Verify: true, WarmUp: true}},
		{"read_bw-warm-up", Options{Test: Test{Verb: Read}, Size: 9000, Iters: 200, Verify: true, OutReads: 4, WarmUp: true}},
		{"atomic_bw-warm-up", Options{Test: Test{Verb: Atomic}, Iters: 100, WarmUp: true}},
		{"send_lat", Options{Test: Test{Verb: Send, Lat: true}, Size: 64, Iters: 200, Verify: true}},
		{"write_bw-inline-nopeak", Options{Test: Test{Verb: Write}, Size: 64, Iters: 500, Inline: 220, NoPeak: true, Verify: true, QPTimeout: 10}},
		{"send_bw-inline", Options{Test: Test{Verb: Send}, Size: 100, Iters: 500, RxDepth: 64, Inline: 128, Verify: true}},
		{"send_lat-inline", Options{Test: Test{Verb: Send, Lat: true}, Size: 236, Iters: 200, Inline: 236, Verify: true}},
		{"write_lat-inline", Options{Test: Test{Verb: Write, Lat: true}, Size: 64, Iters: 200, Inline: 220, Verify: true}},
		{"send_bw-ud-inline", Options{Test: Test{Verb: Send}, Size: 512, Iters: 300, Inline: 900, Verify: true, UD: true}},
		{"write_bw-postlist", Options{Test: Test{Verb: Write}, Size: 64, Iters: 512, PostList: 16, Verify: true}},
		{"send_bw-postlist-cqmod", Options{Test: Test{Verb: Send}, Size: 100, Iters: 400, PostList: 8, CQMod: 4, RxDepth: 64, Verify: true}},
		{"read_bw-postlist-2qp", Options{Test: Test{Verb: Read}, Size: 300, Iters: 200, PostList: 4, QPs: 2, OutReads: 4, Verify: true}},
		{"send_bw-ud-postlist", Options{Test: Test{Verb: Send}, Size: 256, Iters: 300, PostList: 10, Verify: true, UD: true}},
		{"write_bw-bi", Options{Test: Test{Verb: Write}, Size: 4096, Iters: 500, Duplex: true}},
		{"read_bw-bi-2qp", Options{Test: Test{Verb: Read}, Size: 9000, Iters: 200, QPs: 2, OutReads: 4, Duplex: true}},
		{"atomic_bw-bi", Options{Test: Test{Verb: Atomic}, Iters: 300, Duplex: true}},
		{"send_bw-bi", Options{Test: Test{Verb: Send}, Size: 3000, Iters: 500, RxDepth: 64, Duplex: true}},
		{"send_bw-bi-2qp", Options{Test: Test{Verb: Send}, Size: 100, Iters: 1000, QPs: 2, Duplex: true, MTU: verbs.MTU1024}},
		{"send_bw-ud", Options{Test: Test{Verb: Send}, Size: 1024, Iters: 500, Verify: true, UD: true, MTU: verbs.MTU1024}},
		{"send_bw-ud-2qp", Options{Test: Test{Verb: Send}, Size: 4096, Iters: 200, QPs: 2, Verify: true, UD: true}},
		{"send_bw-ud-rx16", Options{Test: Test{Verb: Send}, Size: 100, Iters: 16, RxDepth: 16, Verify: true, UD: true}},
		{"send_lat-ud", Options{Test: Test{Verb: Send, Lat: true}, Size: 64, Iters: 200, Verify: true, UD: true}},
		{"send_lat-ud-busy", Options{Test: Test{Verb: Send, Lat: true}, Size: 2048, Iters: 200, Verify: true, UD: true, Busy: true}},
		{"write_lat", Options{Test: Test{Verb: Write, Lat: true}, Size: 64, Iters: 200, Verify: true}},
		{"send_lat-busy", Options{Test: Test{Verb: Send, Lat: true}, Size: 64, Iters: 200, Verify: true, Busy: true}},
		{"write_lat-busy", Options{Test: Test{Verb: Write, Lat: true}, Size: 64, Iters: 200, Verify: true, Busy: true}},
		{"read_lat-busy", Options{Test: Test{Verb: Read, Lat: true}, Size: 64, Iters: 200, Busy: true}},
		{"read_lat", Options{Test: Test{Verb: Read, Lat: true}, Size: 64, Iters: 200}},
		{"atomic_lat", Options{Test: Test{Verb: Atomic, Lat: true}, Iters: 200}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if raceEnabled && c.o.Test == (Test{Verb: Write, Lat: true}) {
				t.Skip("write_lat polls memory a remote WRITE fills, which the race detector cannot see ordered (see race_test.go)")
			}
			so, co := pair(t, srv, cli, c.o)
			o := c.o
			o.normalize()
			n := uint64(o.Iters * o.QPs)
			if len(so.Local) != o.QPs || len(co.Remote) != o.QPs {
				t.Fatalf("%d local and %d remote QPs", len(so.Local), len(co.Remote))
			}
			for i := range so.Local {
				if so.Local[i] != co.Remote[i] || co.Local[i] != so.Remote[i] {
					t.Errorf("QP %d: the sides disagree: server %+v / %+v, client %+v / %+v", i, so.Local[i], so.Remote[i], co.Local[i], co.Remote[i])
				}
			}
			if so.PeerVersion != perftest.Version || co.MTU != so.MTU || co.MTU == 0 {
				t.Errorf("peer version %q, MTUs %v %v", so.PeerVersion, co.MTU, so.MTU)
			}
			if o.MTU != 0 && co.MTU != o.MTU {
				t.Errorf("MTU %v, asked for %v", co.MTU, o.MTU)
			}
			sides := []*Outcome{co}
			if !(o.Test.Lat && o.Test.Verb != Send && o.Test.Verb != Write) {
				sides = append(sides, so) // read/atomic_lat servers measure nothing
			}
			for _, out := range sides {
				if len(out.Results) != 1 {
					t.Fatalf("%d results", len(out.Results))
				}
				r := out.Results[0]
				if r.Size != o.Size || r.Iters != n {
					t.Errorf("result %+v: want %d bytes, %d iterations", r, o.Size, n)
				}
				if o.Test.Lat {
					if !(r.Min > 0 && r.Min <= r.Typical && r.Typical <= r.P99 && r.P99 <= r.P999 && r.P999 <= r.MaxAll && r.Avg > 0 && r.Stdev >= 0) {
						t.Errorf("latencies out of order: %+v", r)
					}
				} else if o.NoPeak && r.BWPeak != 0 {
					t.Errorf("-N: peak %v, want 0", r.BWPeak)
				} else if !(r.BWAvg > 0 && (o.NoPeak || r.BWPeak >= r.BWAvg*0.999) && math.Abs(r.MsgRate*float64(o.Size)*1e6/(1<<20)-r.BWAvg) < r.BWAvg*1e-6) {
					t.Errorf("bandwidth figures inconsistent: %+v", r)
				}
				if o.Verify && !r.Verified {
					t.Errorf("data not verified: %+v", r)
				}
			}
			if o.Duplex && so.Results[0] != co.Results[0] {
				// Each side's row is its rates plus the peer's: the same sums.
				t.Errorf("bidirectional rows differ: server %+v, client %+v", so.Results[0], co.Results[0])
			}
			if !o.Test.Lat && o.Test.Verb != Send && !o.Duplex && so.Results[0] != co.Results[0] {
				if r := so.Results[0]; !r.Remote || r.BWAvg != co.Results[0].BWAvg {
					t.Errorf("the server's report %+v is not the client's %+v", r, co.Results[0])
				}
			}
			t.Logf("client %+v", co.Results[0])
		})
	}
}

// TestRunUD checks what UD changes besides the QPs: a message is one packet,
// so -s is cut to the path MTU and -a stops there; a receiver posts a
// receive for every message by default; a UD QP and its AH are what the
// peer's sends are aimed at.
func TestRunUD(t *testing.T) {
	o := Options{Test: Test{Verb: Send}, UD: true, Iters: 20000}
	if err := o.normalize(); err != nil || o.RxDepth != UDMaxRx {
		t.Errorf("UD send_bw -n 20000: rx depth %d (%v), want %d", o.RxDepth, err, UDMaxRx)
	}
	o = Options{Test: Test{Verb: Send}, UD: true, Iters: 300}
	if err := o.normalize(); err != nil || o.RxDepth != 300 {
		t.Errorf("UD send_bw -n 300: rx depth %d (%v), want 300", o.RxDepth, err)
	}
	srv, cli := newDev(t, addrA), newDev(t, addrB)
	so, co := pair(t, srv, cli, Options{Test: Test{Verb: Send}, UD: true, Size: 9000, Iters: 50, MTU: verbs.MTU2048, Verify: true})
	for _, out := range []*Outcome{so, co} {
		if len(out.Results) != 1 || out.Results[0].Size != 2048 || out.Results[0].Iters != 50 || !out.Results[0].Verified {
			t.Errorf("-s 9000 at path MTU 2048: %+v, want one verified row of 50 messages of 2048 bytes", out.Results)
		}
	}
	_, co = pair(t, srv, cli, Options{Test: Test{Verb: Send}, UD: true, All: true, Iters: 20, MTU: verbs.MTU1024})
	if len(co.Results) != 10 {
		t.Fatalf("-a at path MTU 1024: %d rows, want 10 (2 to 1024)", len(co.Results))
	}
	for i, r := range co.Results {
		if r.Size != 2<<i || r.Iters != 20 || r.BWAvg <= 0 {
			t.Errorf("row %d: %+v", i, r)
		}
	}
	st := srv.Stats()
	if st.NoRecvDrops != 0 || st.QKeyDrops != 0 {
		t.Errorf("the server dropped messages: %d found no receive, %d had the wrong Q_Key", st.NoRecvDrops, st.QKeyDrops)
	}
}

// TestRunUDLoss loses a twentieth of the client's packets: UD resends
// nothing, so the server of send_bw reports what arrived and fails, and
// the client, whose sends all completed, ends cleanly; in send_lat, whose
// ping-pong stops at the first loss, both sides fail. Each side gives up
// after UDQuiet of silence.
func TestRunUDLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits for UDQuiet")
	}
	srv := newDev(t, addrA)
	conn, err := udp.Listen(addrB, udp.Options{})
	if err != nil {
		t.Skipf("no UDP socket on %v: %v", addrB, err)
	}
	lossy := fault.New(conn, fault.Options{Seed: 7, Drop: 0.05})
	cli, err := soft.New(soft.Options{Name: "soft0", Conn: lossy})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	const n = 200
	so, co, serr, cerr := pairErr(t, srv, cli, Options{Test: Test{Verb: Send}, UD: true, Size: 512, Iters: n}, false)
	if cerr != nil || len(co.Results) != 1 || co.Results[0].Iters != n {
		t.Errorf("send_bw client: %v, %+v; want all %d sends done and no error", cerr, co.Results, n)
	}
	if !errors.Is(serr, ErrUDLoss) || !strings.Contains(serr.Error(), fmt.Sprintf(" of %d messages arrived", n)) {
		t.Errorf("send_bw server: %v, want ErrUDLoss with the count", serr)
	}
	dropped := lossy.FaultStats().Dropped
	if so == nil || len(so.Results) != 1 || dropped == 0 || so.Results[0].Iters != n-dropped || so.Results[0].BWAvg <= 0 {
		t.Errorf("send_bw server: %+v; want one row of the %d messages of %d that were not dropped", so, n-dropped, n)
	}
	_, _, serr, cerr = pairErr(t, srv, cli, Options{Test: Test{Verb: Send, Lat: true}, UD: true, Size: 64, Iters: n}, false)
	if !errors.Is(serr, ErrUDLoss) || !errors.Is(cerr, ErrUDLoss) {
		t.Errorf("send_lat: server %v, client %v; want ErrUDLoss on both", serr, cerr)
	}
}

// TestRunAllSizes runs -a on a write test: one row per size, 2 to 2^23.
func TestRunAllSizes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	srv, cli := newDev(t, addrA), newDev(t, addrB)
	_, co := pair(t, srv, cli, Options{Test: Test{Verb: Write}, All: true, Iters: 5, TxDepth: 4})
	if len(co.Results) != 23 {
		t.Fatalf("%d rows, want 23", len(co.Results))
	}
	for i, r := range co.Results {
		if r.Size != 2<<i || r.Iters != 5 || r.BWAvg <= 0 {
			t.Errorf("row %d: %+v", i, r)
		}
	}
}

// TestRunDuration runs write_bw for a second.
func TestRunDuration(t *testing.T) {
	srv, cli := newDev(t, addrA), newDev(t, addrB)
	t0 := time.Now()
	so, co := pair(t, srv, cli, Options{Test: Test{Verb: Write}, Size: 1024, Duration: time.Second})
	if el := time.Since(t0); el < time.Second {
		t.Errorf("a 1 s run ended after %v", el)
	}
	r := co.Results[0]
	if r.Iters < 100 || r.BWAvg <= 0 || so.Results[0].Iters != r.Iters {
		t.Errorf("client %+v, server %+v", r, so.Results[0])
	}

	// send_bw: the server counts for as long from its first message on,
	// its receives reposted throughout (64 of them for thousands of
	// messages, fewer than the client's window: RNR NAKs pace it). The
	// counts differ by less than a window: the client counts completions,
	// a signaled one every CQMod, and the server may stop before the last
	// messages in flight arrive.
	t0 = time.Now()
	so, co = pair(t, srv, cli, Options{Test: Test{Verb: Send}, Size: 1024, RxDepth: 64, Duration: time.Second})
	if el := time.Since(t0); el < time.Second {
		t.Errorf("a 1 s send_bw ended after %v", el)
	}
	c, sv := co.Results[0], so.Results[0]
	if d := int64(sv.Iters) - int64(c.Iters); c.Iters < 1000 || d > DefaultTxDepthBW || -d > DefaultTxDepthBW || sv.BWAvg <= 0 || sv.BWPeak != 0 {
		t.Errorf("send_bw -D: client %+v, server %+v; want counts within a window (%d) of each other, and no peak", c, sv, DefaultTxDepthBW)
	}
	t.Logf("send_bw -D: client %d messages, server %d; the server sent %d RNR NAKs", c.Iters, sv.Iters, srv.Stats().RNRSent)

	// send_lat and write_lat: each side's clock from its first message;
	// the one that stops first leaves the other waiting, until its own
	// time is up. Both count their exchanges and time them.
	for _, tt := range []Test{{Verb: Send, Lat: true}, {Verb: Write, Lat: true}} {
		if raceEnabled && tt.Verb == Write {
			continue // write_lat polls memory a remote WRITE fills (see race_test.go)
		}
		t0 = time.Now()
		so, co = pair(t, srv, cli, Options{Test: tt, Size: 64, Duration: time.Second})
		if el := time.Since(t0); el < time.Second || el > 10*time.Second {
			t.Errorf("a 1 s %v ended after %v", tt, el)
		}
		for side, out := range map[string]*Outcome{"client": co, "server": so} {
			r := out.Results[0]
			if r.Iters < 100 || r.Avg <= 0 || r.TPS <= 0 || math.Abs(r.TPS*r.Avg*2/1e6-1) > 0.01 {
				t.Errorf("%v -D: %s %+v: want exchanges counted, and t_avg and tps of the same time", tt, side, r)
			}
		}
		if d := int64(so.Results[0].Iters) - int64(co.Results[0].Iters); d > 2 || d < -2 {
			t.Logf("%v -D: client %d exchanges, server %d", tt, co.Results[0].Iters, so.Results[0].Iters)
		}
	}
}

// TestWarmUp: --perform_warm_up sends a window of messages per QP before
// the test (the client's device sends that many more packets than without
// it) and counts none of them in the result.
func TestWarmUp(t *testing.T) {
	srv, cli := newDev(t, addrA), newDev(t, addrB)
	sent := func(warm bool) (uint64, Result) {
		before := cli.Stats().TxPackets
		_, co := pair(t, srv, cli, Options{Test: Test{Verb: Write}, Size: 64, Iters: 200, QPs: 2, TxDepth: 50, WarmUp: warm})
		return cli.Stats().TxPackets - before, co.Results[0]
	}
	cold, rc := sent(false)
	warm, rw := sent(true)
	t.Logf("packets sent: %d without warm-up, %d with", cold, warm)
	if warm < cold+2*50 {
		t.Errorf("with warm-up %d packets, without %d: want at least 100 (two QPs' windows of 50) more", warm, cold)
	}
	if rc.Iters != 400 || rw.Iters != 400 {
		t.Errorf("iterations: %d without warm-up, %d with, want 400 both", rc.Iters, rw.Iters)
	}
}

// TestBWAllocs checks that the traffic loop allocates nothing per message:
// a run of 20 times as many messages allocates (nearly) the same.
func TestBWAllocs(t *testing.T) {
	if racesync.Enabled {
		// On a loaded machine its counts include the race detector's and
		// the waits it causes: 431-1,017 mallocs for 1,500 UD messages
		// against 199-289 for 200, on this code and the code before.
		t.Skip("allocations are counted without -race")
	}
	srv, cli := newDev(t, addrA), newDev(t, addrB)
	for _, c := range []struct {
		name  string
		o     Options
		large int
	}{
		{"write", Options{Test: Test{Verb: Write}, Size: 64}, 4000},
		{"write-inline", Options{Test: Test{Verb: Write}, Size: 64, Inline: 220}, 4000},
		{"write-postlist", Options{Test: Test{Verb: Write}, Size: 64, PostList: 8}, 4000},
		{"send-bidirectional", Options{Test: Test{Verb: Send}, Size: 64, Duplex: true}, 4000},
		// UD's messages go unpaced: few enough that the receiver's socket
		// buffer holds them whatever the machine's load.
		{"send-ud", Options{Test: Test{Verb: Send}, Size: 256, UD: true}, 1500},
	} {
		t.Run(c.name, func(t *testing.T) {
			allocs := func(n int) uint64 {
				var a, b runtime.MemStats
				o := c.o
				o.Iters = n
				runtime.GC()
				runtime.ReadMemStats(&a)
				pair(t, srv, cli, o)
				runtime.ReadMemStats(&b)
				return b.Mallocs - a.Mallocs
			}
			allocs(200) // warm up
			small, large := allocs(200), allocs(c.large)
			t.Logf("mallocs: %d for 200 messages, %d for %d", small, large, c.large)
			if extra := uint64(c.large - 200); large > small+extra/10 { // < 0.1 per extra message, both sides and both devices together
				t.Errorf("%d mallocs for %d messages against %d for 200: the message path allocates", large, c.large, small)
			}
		})
	}
}

func TestRunBadOptions(t *testing.T) {
	if _, err := Run(context.Background(), nil, perftest.NewConn(nil, true), Options{Test: Test{Verb: Write}, Iters: 1}); !errors.Is(err, ErrUsage) {
		t.Errorf("Run with 1 iteration: %v", err)
	}
	if _, err := Run(context.Background(), nil, perftest.NewConn(nil, false), Options{Test: Test{Verb: Write}, Client: true}); !errors.Is(err, ErrUsage) {
		t.Errorf("Run with a server connection as client: %v", err)
	}
}

// TestBaselineLoopback runs the raw-UDP baseline of each test it covers
// between two UDP paths on loopback: every datagram arrives, the figures are
// positive.
func TestBaselineLoopback(t *testing.T) {
	for _, c := range []Options{
		{Test: Test{Verb: Write}, Size: 4096, Iters: 300},
		{Test: Test{Verb: Read}, Size: 100, Iters: 300},
		{Test: Test{Verb: Send}, Size: 65536, Iters: 50, TxDepth: 8},
		{Test: Test{Verb: Send, Lat: true}, Size: 64, Iters: 200},
		{Test: Test{Verb: Write, Lat: true}, Size: 64, Iters: 200},
		// An ACK datagram behind every message: Baseline fails unless
		// the peer's arrive.
		{Test: Test{Verb: Send, Lat: true}, Size: 2, Iters: 200, BaseACK: true},
		{Test: Test{Verb: Write, Lat: true}, Size: 64, Iters: 200, BaseACK: true},
	} {
		name := c.Test.String()
		if c.BaseACK {
			name += "+ack"
		}
		t.Run(name, func(t *testing.T) {
			ua, err := udp.Listen(addrA, udp.Options{})
			if err != nil {
				t.Skipf("no UDP socket on %v: %v", addrA, err)
			}
			defer ua.Close()
			ub, err := udp.Listen(addrB, udp.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer ub.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ln, err := net.Listen("tcp", net.JoinHostPort(addrA.String(), "0"))
			if err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				conn, err := perftest.Accept(ctx, ln)
				if err != nil {
					errc <- err
					return
				}
				defer conn.Close()
				so := c
				_, err = Baseline(ctx, ua, addrB, conn, so)
				errc <- err
			}()
			conn, err := perftest.Dial(ctx, addrA.String(), ln.Addr().(*net.TCPAddr).Port)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			co := c
			co.Client = true
			r, err := Baseline(ctx, ub, addrA, conn, co)
			if serr := <-errc; err != nil || serr != nil {
				t.Fatalf("client: %v; server: %v", err, serr)
			}
			if r.Size != c.Size || r.Iters != uint64(c.Iters) {
				t.Errorf("result %+v: want %d bytes, %d iterations", r, c.Size, c.Iters)
			}
			if c.Test.Lat && !(r.Min > 0 && r.Typical >= r.Min && r.MaxAll >= r.P999) || !c.Test.Lat && !(r.BWAvg > 0 && r.MsgRate > 0) {
				t.Errorf("figures %+v", r)
			}
			t.Logf("%+v", r)
		})
	}
	if _, err := Baseline(context.Background(), nil, addrA, nil, Options{Test: Test{Verb: Atomic}}); !errors.Is(err, ErrUsage) {
		t.Errorf("atomic baseline: %v", err)
	}
	if _, err := Baseline(context.Background(), nil, addrA, nil, Options{Test: Test{Verb: Write}, BaseACK: true}); !errors.Is(err, ErrUsage) {
		t.Errorf("bandwidth baseline with an ACK per message: %v", err)
	}
}

func TestBaseSizes(t *testing.T) {
	if got := baseSizes(Test{Verb: Write}, 2500, 1024); len(got) != 3 || got[0] != 12+16+1024+4 || got[1] != 12+1024+4 || got[2] != 12+452+4 {
		t.Errorf("write 2500/1024: %v", got)
	}
	if got := baseSizes(Test{Verb: Send}, 64, 1024); len(got) != 1 || got[0] != 12+64+4 {
		t.Errorf("send 64: %v", got)
	}
}

// TestRunLoopbackCM runs tests with perftest's -R between two soft devices
// over UDP on loopback: the exchange over an rdma_cm connection, the data
// QPs connected through rdma_cm, the data verified; then every connection
// is disconnected (the managers track none once time-wait is over) and
// nothing was rejected.
func TestRunLoopbackCM(t *testing.T) {
	srv, cli := newDev(t, addrA), newDev(t, addrB)
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"write_bw", Options{Test: Test{Verb: Write}, Size: 4096, Iters: 300, Verify: true}},
		{"write_bw-4qp", Options{Test: Test{Verb: Write}, Size: 4096, Iters: 200, QPs: 4, Verify: true}},
		{"send_bw", Options{Test: Test{Verb: Send}, Size: 3000, Iters: 300, RxDepth: 64, Verify: true}},
		{"send_bw-4qp", Options{Test: Test{Verb: Send}, Size: 3000, Iters: 200, QPs: 4, RxDepth: 64, Verify: true}},
		{"read_bw-2qp", Options{Test: Test{Verb: Read}, Size: 9000, Iters: 100, QPs: 2, Verify: true, OutReads: 4}},
		{"send_lat", Options{Test: Test{Verb: Send, Lat: true}, Size: 64, Iters: 100, Verify: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Each case's own counts: a failure stays in its case.
			before := map[*soft.Device]rdmacm.Stats{}
			for _, d := range []*soft.Device{srv, cli} {
				before[d] = rdmacm.Attach(d, rdmacm.MachineConfig{}).Stats().Machine
			}
			so, co := pairOver(t, srv, cli, c.o, true)
			o := c.o
			o.normalize()
			if len(so.Local) != o.QPs || len(co.Remote) != o.QPs {
				t.Fatalf("%d local and %d remote QPs", len(so.Local), len(co.Remote))
			}
			for i := range so.Local {
				if so.Local[i] != co.Remote[i] || co.Local[i] != so.Remote[i] {
					t.Errorf("QP %d: the sides disagree: server %+v / %+v, client %+v / %+v", i, so.Local[i], so.Remote[i], co.Local[i], co.Remote[i])
				}
			}
			for _, out := range []*Outcome{so, co} {
				if len(out.Results) != 1 {
					t.Fatalf("%d results", len(out.Results))
				}
				r := out.Results[0]
				if n := o.Iters * o.QPs; r.Size != o.Size || r.Iters != uint64(n) || !r.Verified {
					t.Errorf("result %+v: want %d bytes, %d iterations, verified", r, o.Size, n)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for _, d := range []*soft.Device{srv, cli} {
				mg := rdmacm.Attach(d, rdmacm.MachineConfig{})
				for mg.Stats().Conns != 0 && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				// The only REJs allowed answer a REQ the client sent before
				// the server listened (NoListenerRejects: the client dials
				// again) or one resent while its REP was on its way that
				// arrived after the connection closed (StaleRejects): a
				// loaded machine makes both, and Linux's CM answers them so
				// too.
				st := mg.Stats()
				b := before[d]
				rej := st.Machine.Rejects - b.Rejects
				ok := st.Machine.StaleRejects - b.StaleRejects + st.Machine.NoListenerRejects - b.NoListenerRejects
				if st.Conns != 0 || rej != ok {
					t.Errorf("%v: %d connections left, %d rejects (%d of them stale or for no listener): %+v", d.Addr(), st.Conns, rej, ok, st)
				}
			}
		})
	}
}
