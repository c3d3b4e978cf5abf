//go:build linux

package soft

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/goroce/goroce/internal/testenv"
	"math"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/tee"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// TestNetnsAFXDP runs the end-to-end cases of TestNetns (every operation at
// every interesting size with data verified, 64 RC QPs, an SRQ, UD) between
// two soft devices whose packet path is AF_XDP (packetio/afxdp), each in
// its own namespace, over veth with MTU 1500 (path MTU 1024): once with
// every send on the driver goroutines, once with posts sending inline (the
// default; without the SRQ case, whose hold hook blocks the sending
// goroutine and so must run on a driver). Then over veth with MTU 9000,
// where a 4096-byte path MTU's packets span two UMEM frames (multi-buffer
// AF_XDP): the devices must take active MTU 4096 from the link, and every
// operation (a 1 MiB RDMA WRITE among them) and UD run at path MTU 4096
// with data verified, packets chained over frames both ways. The XDP counters must reconcile
// with what the devices received, the engines must have dropped nothing for
// its ICRC (the IPv4 and UDP headers are written by the AF_XDP path, the
// ICRC by the engine), and the wire checker judges the capture of the first
// run. It skips without root or when the kernel refuses AF_XDP.
func TestNetnsAFXDP(t *testing.T) {
	netns.Require(t)
	t.Run("driver", func(t *testing.T) {
		afxdpE2E(t, t, "10.79.7.0/24", true, true)
	})
	t.Run("inline", func(t *testing.T) {
		afxdpE2E(t, t, "10.79.10.0/24", false, false)
	})
	t.Run("mtu9000", func(t *testing.T) {
		afxdpE2EMTU(t, t, "10.79.13.0/24", false, false, 9000, verbs.MTU4096)
	})
}

func afxdpE2E(top, t *testing.T, prefix string, noInline, full bool) {
	afxdpE2EMTU(top, t, prefix, noInline, full, 1500, verbs.MTU1024)
}

// afxdpE2EMTU runs the cases over veth of MTU vethMTU, where the devices
// must pick active MTU pmtu, the path MTU of the RC QPs. With full, also
// the SRQ case, a forged-Identification check and the wire checker.
func afxdpE2EMTU(top, t *testing.T, prefix string, noInline, full bool, vethMTU int, pmtu verbs.MTU) {
	dir := t.TempDir()
	env := &e2eEnv{pmtu: pmtu, seen: map[[sha256.Size]byte]struct{}{}}
	env.pair = netns.NewPair(t, netns.Options{Prefix: netip.MustParsePrefix(prefix), MTU: vethMTU})
	env.pcap = filepath.Join(dir, fmt.Sprintf("afxdp-pmtu%d.pcap", pmtu.Bytes()))
	env.checkPcap = filepath.Join(dir, fmt.Sprintf("afxdp-pmtu%d-distinct.pcap", pmtu.Bytes()))
	env.full, env.distinct = e2eNewPcap(t, env.pcap), e2eNewPcap(t, env.checkPcap)
	listen := func(ns *netns.NS, addr netip.Addr) *afxdp.Conn {
		var c *afxdp.Conn
		err := ns.Do(func() (err error) {
			c, err = afxdp.Listen(addr, afxdp.Options{})
			return err
		})
		if errors.Is(err, packetio.ErrNotSupported) {
			testenv.Skipf(t, testenv.AFXDP, "AF_XDP refused: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca := listen(env.pair.A, env.pair.AddrA)
	cb := listen(env.pair.B, env.pair.AddrB)
	multi, frameSize := ca.MultiBuffer()
	t.Logf("AF_XDP %s on %s, MaxPacket %d, multi-buffer %v, %d-byte frames", ca.Mode(), ca.Interface(), ca.MaxPacket(), multi, frameSize)
	var err error
	// The devices' SourcePort (4791 by default), which the engine's ICRC
	// covers, is the Conns' UDP source port (afxdp.Options.Port).
	if env.a, err = New(Options{Name: "xdpa", Conn: tee.New(ca, env.capture), NoInline: noInline}); err != nil {
		t.Fatal(err)
	}
	if env.b, err = New(Options{Name: "xdpb", Conn: tee.New(cb, env.capture), NoInline: noInline}); err != nil {
		env.a.Close()
		t.Fatal(err)
	}
	t.Cleanup(env.close)
	if mtu := env.a.mtu; mtu != pmtu {
		t.Fatalf("active MTU %v over a %d-byte link (%s), want %v", mtu, vethMTU, env.a.mtuWhy, pmtu)
	}
	cases := []struct {
		name string
		f    func(*testing.T, *e2eEnv)
	}{
		{"ops", e2eOps},
		{"64QPs", e2eManyQPs},
		{"SRQ", e2eSRQ},
		{"UD", e2eUD},
	}
	if !full {
		cases = slices.DeleteFunc(cases, func(c struct {
			name string
			f    func(*testing.T, *e2eEnv)
		}) bool {
			return c.name == "SRQ"
		})
	}
	for _, s := range cases {
		t.Run(s.name, func(t *testing.T) {
			start, a0, b0 := time.Now(), env.a.Stats(), env.b.Stats()
			s.f(t, env)
			t.Logf("%s: %v; device A: %s; device B: %s", s.name, time.Since(start).Round(time.Millisecond),
				e2eStatsDelta(env.a.Stats(), a0), e2eStatsDelta(env.b.Stats(), b0))
		})
	}
	for _, c := range []struct {
		name string
		conn *afxdp.Conn
		dev  *Device
	}{{"A", ca, env.a}, {"B", cb, env.b}} {
		st := c.conn.Stats()
		x, err := c.conn.XDPStats()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("conn %s: %+v\n%+v", c.name, st, x)
		// Frames hold the link's MTU or packets span several of them.
		if oneFrame := vethMTU+14 <= frameSize-afxdp.DefaultHeadroom-256; oneFrame == multi || (x.RxChained == 0 || x.TxChained == 0) == multi {
			t.Errorf("conn %s: link MTU %d, %d-byte frames: multi-buffer %v, %d packets received chained, %d sent chained",
				c.name, vethMTU, frameSize, multi, x.RxChained, x.TxChained)
		}
		// Everything the XDP program redirected was received or counted
		// by the kernel as dropped at the socket (RX ring full, no frame
		// in the fill ring); received packets also include the ones
		// looped back to the local address (QPs of one device).
		if x.Redirected != st.PacketsIn-x.Looped+x.RxRingFull+x.RxDropped || st.RxDrops != 0 {
			t.Errorf("conn %s: redirected %d != received %d - looped back %d + RX ring full %d + dropped %d (malformed %d)",
				c.name, x.Redirected, st.PacketsIn, x.Looped, x.RxRingFull, x.RxDropped, st.RxDrops)
		}
		if es := c.dev.Stats(); es.ICRCDrops != 0 || es.MalformedDrops != 0 || es.CQOverruns != 0 {
			t.Errorf("device %s: %d packets dropped for their ICRC, %d malformed, %d CQ overruns", c.name, es.ICRCDrops, es.MalformedDrops, es.CQOverruns)
		}
		// AF_XDP sees each frame's IPv4 Identification and DF: every
		// packet's ICRC is checked on all 32 bits, none by solving for
		// them as on a UDP socket, but for those looped back to the local
		// address without a frame.
		if es := c.dev.Stats(); es.ICRCRecoveredChecks != x.Looped || es.ICRCFullChecks == 0 {
			t.Errorf("device %s: %d packets' ICRCs checked on all 32 bits, %d with the Identification solved for (%d looped back); want all on 32 bits but the looped",
				c.name, es.ICRCFullChecks, es.ICRCRecoveredChecks, x.Looped)
		} else {
			t.Logf("device %s: %d of %d received packets' ICRCs checked on all 32 bits", c.name, es.ICRCFullChecks, es.RxPackets)
		}
	}
	if full {
		t.Run("flipped_identification", func(t *testing.T) { afxdpFlippedID(t, env) })
	}
	pkts, dupes, err := env.closePcaps()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("captured %d packets, %d of them byte-identical repeats (retransmissions)", pkts, dupes)
	if full {
		check := e2eStartWireCheck(top, env.checkPcap, env.pmtu)
		t.Run(fmt.Sprintf("wirecheck_pmtu%d", env.pmtu.Bytes()), check.wait)
	}
}

// BenchmarkNetnsAFXDPWrite: RC RDMA WRITE goodput between two soft devices
// in two namespaces over veth (MTU 1500, path MTU 1024), 16 WRITEs
// outstanding, over packetio/udp and over packetio/afxdp in alternating
// rounds of one invocation; it logs the afxdp/udp ratio per size.
//
//	go test ./provider/soft -run - -bench NetnsAFXDPWrite -v
func BenchmarkNetnsAFXDPWrite(b *testing.B) {
	netns.Require(b)
	pair := netns.NewPair(b, netns.Options{Prefix: netip.MustParsePrefix("10.79.9.0/24"), MTU: 1500})
	const depth, rounds = 16, 2
	listen := func(path string, ns *netns.NS, addr netip.Addr) packetio.Conn {
		var c packetio.Conn
		err := ns.Do(func() error {
			var err error
			if path == "udp" {
				c, err = udp.Listen(addr, udp.Options{})
			} else {
				c, err = afxdp.Listen(addr, afxdp.Options{})
			}
			return err
		})
		if errors.Is(err, packetio.ErrNotSupported) {
			testenv.Skipf(b, testenv.AFXDP, "%s refused: %v", path, err)
		}
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	for _, size := range []int{4096, 65536} {
		rate := map[string][]float64{}
		for range rounds {
			for _, path := range []string{"udp", "afxdp"} {
				da, err := New(Options{Name: "wa", Conn: listen(path, pair.A, pair.AddrA)})
				if err != nil {
					b.Fatal(err)
				}
				db, err := New(Options{Name: "wb", Conn: listen(path, pair.B, pair.AddrB)})
				if err != nil {
					da.Close()
					b.Fatal(err)
				}
				x, y := newEnd(b, da, verbs.QPTRC, size), newEnd(b, db, verbs.QPTRC, size)
				connect(b, x, y)
				var last float64 // of the final run (b.Run calls f with growing b.N)
				b.Run(fmt.Sprintf("%s/%dKiB", path, size>>10), func(b *testing.B) {
					b.SetBytes(int64(size))
					start := time.Now()
					if err := afxdpWriteStream(x, y, size, depth, b.N); err != nil {
						b.Fatal(err)
					}
					r := float64(b.N*size) / time.Since(start).Seconds()
					b.ReportMetric(r*8/1e9, "Gbit/s")
					last = r
				})
				if last > 0 {
					rate[path] = append(rate[path], last)
				}
				da.Close()
				db.Close()
			}
		}
		if u, x := rate["udp"], rate["afxdp"]; len(u) > 0 && len(u) == len(x) {
			ratio := 1.0
			for i := range u {
				ratio *= x[i] / u[i]
			}
			b.Logf("RC WRITE %d KiB goodput afxdp/udp: %.2fx (geometric mean of %d rounds; last %.2f vs %.2f Gbit/s)",
				size>>10, math.Pow(ratio, 1/float64(len(u))), len(u), x[len(x)-1]*8/1e9, u[len(u)-1]*8/1e9)
		}
	}
}

// afxdpWriteStream posts n signaled WRITEs of size bytes from x to y's
// buffer, at most depth outstanding, and waits for their completions.
func afxdpWriteStream(x, y *end, size, depth, n int) error {
	wrs := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList:     []verbs.SGE{{Addr: x.mr.Addr(), Length: uint32(size), LKey: x.mr.LKey()}},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	wc := make([]verbs.WC, 32)
	posted, done := 0, 0
	last := time.Now()
	for done < n {
		for posted < n && posted-done < depth {
			wrs[0].WRID = uint64(posted)
			if _, err := x.qp.PostSend(wrs); err != nil {
				return err
			}
			posted++
		}
		k := x.cq.Poll(wc)
		for i := range k {
			if wc[i].Status != verbs.WCSuccess {
				return fmt.Errorf("WRITE %d: %v", wc[i].WRID, wc[i].Status)
			}
		}
		done += k
		if k > 0 {
			last = time.Now()
		} else if time.Since(last) > 10*time.Second {
			return fmt.Errorf("%d of %d WRITEs completed, then nothing for 10 s", done, n)
		} else {
			runtime.Gosched()
		}
	}
	return nil
}

// afxdpFlippedID sends B two datagrams from a raw IP socket in A's
// namespace, both with a good ICRC computed for IPv4 Identification 0x2345:
// one with that Identification, one with a bit of it flipped. A UDP socket
// could not tell them apart (it solves for the Identification); on AF_XDP,
// B's engine sees the field and must accept the first (counted as checked on
// 32 bits, then dropped for its unknown QP) and drop the second for its
// ICRC.
func afxdpFlippedID(t *testing.T, env *e2eEnv) {
	p := env.pair
	h := wire.Header{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0xFFFF01, PSN: 1}
	fl := wire.Flow{Src: p.AddrA, Dst: p.AddrB, SrcPort: wire.RoCEv2Port, ID: 0x2345}
	frame, err := wire.AppendFrame(nil, &fl, &h, []byte("identification"))
	if err != nil {
		t.Fatal(err)
	}
	good := frame[14:] // the IPv4 datagram
	bad := append([]byte(nil), good...)
	bad[5] ^= 0x04 // Identification 0x2345 -> 0x2341
	wire.IPv4(bad).SetChecksum()
	send := func(dgram []byte) {
		t.Helper()
		err := p.A.Do(func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Sendto(fd, dgram, 0, &unix.SockaddrInet4{Addr: p.AddrB.As4()})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wait := func(what string, cond func(s engine.Stats) bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(env.b.Stats()); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("B did not %s: %+v", what, env.b.Stats())
			}
		}
	}
	s0 := env.b.Stats()
	send(good)
	wait("check the good packet's ICRC on 32 bits", func(s engine.Stats) bool {
		return s.ICRCFullChecks > s0.ICRCFullChecks && s.UnknownQPDrops > s0.UnknownQPDrops
	})
	s1 := env.b.Stats()
	if s1.ICRCDrops != s0.ICRCDrops {
		t.Errorf("the good packet was dropped for its ICRC")
	}
	send(bad)
	wait("drop the packet with a flipped Identification bit", func(s engine.Stats) bool { return s.ICRCDrops > s1.ICRCDrops })
	if s2 := env.b.Stats(); s2.ICRCFullChecks != s1.ICRCFullChecks || s2.UnknownQPDrops != s1.UnknownQPDrops {
		t.Errorf("the packet with a flipped Identification bit passed the ICRC check")
	}
}
