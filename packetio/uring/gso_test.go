//go:build linux

package uring_test

import (
	"bytes"
	"cmp"
	"errors"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/rocetest"
	"github.com/goroce/goroce/packetio/internal/udpsock"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/uring"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// GSO on loopback, one SENDMSG per GSO message: rocetest.GSOLoopback,
// with packets in pieces too (the Conn is a packetio.Gatherer).
func TestGSOLoopback(t *testing.T) {
	a, b := loopbackPair(t, uring.Listen, uring.Options{GSO: uring.OffloadRequire, GRO: uring.OffloadOff, Batch: 128})
	if g, ok := any(a).(packetio.Gatherer); !ok || !g.Gathers() {
		t.Fatal("the Conn does not send packets in pieces")
	}
	rocetest.GSOLoopback(t, a, b, true)
}

// Without GSO, a packet in pieces leaves as one datagram of its three
// iovecs, intact, in its place in the batch.
func TestPiecesWithoutGSO(t *testing.T) {
	a, b := loopbackPair(t, uring.Listen, uring.Options{GSO: uring.OffloadOff, GRO: uring.OffloadOff})
	port := b.LocalAddrPort().Port()
	fl := wire.Flow{Src: a.LocalAddr(), Dst: b.LocalAddr(), SrcPort: a.LocalAddrPort().Port(), DstPort: port}
	sizes := []int{1040, 4112, 64, 2000, 1040}
	sent := rocetest.SendPieces(t, a, b.LocalAddr(), port, sizes, true)
	got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
	rocetest.CheckIDs(t, got, sent, fl, make([]uint16, len(sent)))
	if s := a.Stats(); s.PacketsOut != uint64(len(sent)) || s.GSOMessages != 0 || s.TxErrors != 0 {
		t.Errorf("stats %+v, want %d packets out, no GSO message", s, len(sent))
	}
}

// TxBatch and Transmit with GSO on and off: rocetest.GSOTxBatch.
func TestGSOTxBatchAndOff(t *testing.T) {
	for _, gso := range []uring.Offload{uring.OffloadRequire, uring.OffloadOff} {
		t.Run("gso="+gso.String(), func(t *testing.T) {
			a, b := loopbackPair(t, uring.Listen, uring.Options{GSO: gso, GRO: uring.OffloadOff, Batch: 8})
			rocetest.GSOTxBatch(t, a, b, gso == uring.OffloadRequire, udpsock.GSOTxBatch)
		})
	}
}

// GRO trains on loopback (rocetest.GROLoopback), on every receive path.
func TestGROLoopback(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			a, b := loopbackPair(t, p.listen, uring.Options{GSO: uring.OffloadRequire, GRO: uring.OffloadRequire, Batch: 128})
			rocetest.GROLoopback(t, a, b)
		})
	}
}

// A GRO Conn receives datagrams sent alone as before: rocetest.GROSingles.
func TestGROSingles(t *testing.T) {
	a, b := loopbackPair(t, uring.Listen, uring.Options{GSO: uring.OffloadOff, GRO: uring.OffloadRequire})
	rocetest.GROSingles(t, a, b)
}

// A train longer than a receive slot is cut by the kernel (MSG_TRUNC): the
// segments that lie whole in the slot are returned, the others dropped
// and counted, none returned in part; on both receive paths.
func TestGROTruncated(t *testing.T) {
	for _, singleshot := range []bool{false, true} {
		name := "multishot"
		if singleshot {
			name = "singleshot"
		}
		t.Run(name, func(t *testing.T) {
			const room = 16 << 10 // three 4112-byte segments and a part
			b, err := listenOrSkip(t, func(a netip.Addr, o uring.Options) (*uring.Conn, error) {
				return uring.ListenGRORoom(a, o, room, singleshot)
			}, lo1, uring.Options{Port: uring.AnyPort, GRO: uring.OffloadRequire})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			port := b.LocalAddrPort().Port()
			a, err := uring.Listen(lo2, uring.Options{Port: uring.AnyPort, DstPort: int(port), GSO: uring.OffloadRequire})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			fl := wire.Flow{Src: lo2, Dst: lo1, SrcPort: a.LocalAddrPort().Port(), DstPort: port}
			sent := rocetest.Send(t, a, lo1, port, rocetest.Repeat(8, 4112))
			got := packetiotest.Recv(t, b, 3, 5*time.Second)
			rocetest.CheckTrains(t, got, sent[:3], fl)
			// Nothing more, and still receiving afterwards.
			if pkts, err := b.Receive(time.Now().Add(50 * time.Millisecond)); len(pkts) != 0 || err != nil {
				t.Errorf("Receive after the cut train: %d packets, %v", len(pkts), err)
			}
			if s := b.Stats(); s.RxDrops != 5 || s.PacketsIn != 3 {
				t.Errorf("receiver stats %+v, want 3 packets in, 5 dropped", s)
			}
			more := rocetest.Send(t, a, lo1, port, rocetest.Repeat(3, 4112))
			rocetest.CheckTrains(t, packetiotest.Recv(t, b, 3, 5*time.Second), more, fl)
		})
	}
}

// psn returns the PSN of a transport packet.
func psn(b []byte) int { return int(b[9])<<16 | int(b[10])<<8 | int(b[11]) }

// A GSO message the kernel refuses (here EINVAL: SO_NO_CHECK, set behind
// the Conn's back, does not mix with UDP_SEGMENT) is sent again one
// datagram per packet, with every ICRC back to Identification 0, and
// counted in GSOFallbacks; GSO stays on (only EIO turns it off). A packet
// that is not part of the refused message is sent as usual. Packets in
// pieces fall back as whole ones do.
func TestGSOFallback(t *testing.T) {
	a, b := loopbackPair(t, uring.Listen, uring.Options{GSO: uring.OffloadRequire, GRO: uring.OffloadOff})
	if err := uring.SetSockoptInt(a, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); err != nil {
		t.Fatal(err)
	}
	port := b.LocalAddrPort().Port()
	fl := wire.Flow{Src: a.LocalAddr(), Dst: b.LocalAddr(), SrcPort: port, DstPort: port}
	sizes := append(rocetest.Repeat(10, 1040), 2000)
	// Every other packet in pieces: its ICRC, in its last piece, is
	// restored as well.
	sent := rocetest.SendPieces(t, a, b.LocalAddr(), port, sizes, true)
	got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
	// The refused message's packets leave after the rest of the batch.
	slices.SortFunc(got, func(x, y packetiotest.Received) int { return cmp.Compare(psn(x.Buf), psn(y.Buf)) })
	rocetest.CheckIDs(t, got, sent, fl, make([]uint16, len(sent)))
	s := a.Stats()
	if s.GSOFallbacks != 1 || s.GSOMessages != 0 || s.PacketsOut != uint64(len(sent)) || s.TxErrors != 0 {
		t.Errorf("stats %+v, want 1 fallback and %d packets out", s, len(sent))
	}
	if o := a.Offloads(); !o.GSO {
		t.Errorf("GSO turned off by EINVAL: %v", o)
	}
}

// A GSO message whose segments exceed the path MTU is refused (EINVAL);
// its packets are then sent one each and refused with EMSGSIZE, each
// reported, while the rest of the batch goes.
func TestNetnsGSOTooLarge(t *testing.T) {
	p := netns.NewPair(t, netns.Options{Prefix: netnsPrefix, MTU: 1500})
	a := listenIn(t, p.A, p.AddrA, uring.Options{GSO: uring.OffloadRequire})
	b := listenIn(t, p.B, p.AddrB, uring.Options{GRO: uring.OffloadOff})
	fl := wire.Flow{Src: p.AddrA, Dst: p.AddrB, SrcPort: wire.RoCEv2Port, DstPort: wire.RoCEv2Port}
	sizes := append(rocetest.Repeat(4, 1040), rocetest.Repeat(3, 2000)...)
	batch := a.TxBatch(len(sizes))
	var fits [][]byte
	for i, n := range sizes {
		batch[i].Buf = rocetest.Packet(t, batch[i].Buf, &fl, n, i)
		batch[i].Addr = p.AddrB
		if n < 1500 {
			fits = append(fits, bytes.Clone(batch[i].Buf))
		}
	}
	n, err := a.Transmit(batch)
	var te *packetio.TransmitError
	if n != 4 || !errors.As(err, &te) || te.Index != 4 || te.Failed != 3 || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("Transmit = %d, %v; want 4 sent and EMSGSIZE for the 3 others", n, err)
	}
	rocetest.CheckIDs(t, packetiotest.Recv(t, b, 4, 5*time.Second), fits, fl, rocetest.Seq(4))
	if s := a.Stats(); s.GSOFallbacks != 1 || s.GSOMessages != 1 || s.TxErrors != 3 {
		t.Errorf("stats %+v, want 1 GSO message, 1 fallback, 3 errors", s)
	}
}

// offloadPair opens two namespaces whose veths cut GSO messages into
// datagrams before the link (tx-udp-segmentation off) and coalesce
// received datagrams again (GRO and UDP GRO forwarding on: a veth hands
// its peer's packets to NAPI, and so to GRO, only then), so that what
// crosses the link is one datagram per packet, as on a NIC.
func offloadPair(t *testing.T, mtu int) *netns.Pair {
	p := netns.NewPair(t, netns.Options{Prefix: netnsPrefix, MTU: mtu})
	for _, ns := range []*netns.NS{p.A, p.B} {
		rocetest.SetFeatures(t, ns, map[string]bool{"tx-udp-segmentation": false, "rx-gro": true, "rx-udp-gro-forwarding": true})
	}
	return p
}

// roceFrames returns the captured RoCEv2 frames.
func roceFrames(frames [][]byte) []*wire.Frame {
	var out []*wire.Frame
	for _, fr := range frames {
		f := new(wire.Frame)
		if wire.ParseFrame(fr, f) != nil || f.UDP().DstPort() != wire.RoCEv2Port {
			continue
		}
		out = append(out, f)
	}
	return out
}

// Between two namespaces GSO messages cross the veth link as one datagram
// per packet: each captured frame has DF, IPv4 Identification k for
// segment k of its message, its own lengths and an ICRC that checks on all
// 32 bits over the real headers. The receiver, with GRO, gets the packets
// coalesced again into trains (GROSeg 0..N-1, each Identification its
// train's first's plus its position); with GRO off, one by one.
func TestNetnsGSOGRO(t *testing.T) {
	for _, gro := range []uring.Offload{uring.OffloadRequire, uring.OffloadOff} {
		t.Run("gro="+gro.String(), func(t *testing.T) {
			p := offloadPair(t, 1500)
			a := listenIn(t, p.A, p.AddrA, uring.Options{GSO: uring.OffloadRequire, Batch: 128})
			b := listenIn(t, p.B, p.AddrB, uring.Options{GRO: gro, Batch: 128})
			capA := startCaptureDir(t, p.A, true)
			fl := wire.Flow{Src: p.AddrA, Dst: p.AddrB, SrcPort: wire.RoCEv2Port, DstPort: wire.RoCEv2Port}
			sizes := rocetest.Repeat(70, 1040) // 62 in one message (65507 bytes at most), 8 in the next
			ids := rocetest.Seq(62, 8)
			sent := rocetest.Send(t, a, p.AddrB, wire.RoCEv2Port, sizes)
			got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
			sb := b.Stats()
			if gro == uring.OffloadOff {
				rocetest.CheckIDs(t, got, sent, fl, ids)
				if sb.GROBuffers != 0 {
					t.Errorf("GRO-off receiver stats %+v", sb)
				}
			} else {
				trains := rocetest.CheckTrains(t, got, sent, fl)
				t.Logf("%d packets in GSO messages: %d trains, receiver %d GRO buffers of %d segments", len(sent), trains, sb.GROBuffers, sb.GROSegments)
				if sb.GROBuffers == 0 || trains >= len(sent) {
					t.Errorf("nothing coalesced: %+v", sb)
				}
			}
			frames := roceFrames(capA.stop())
			if len(frames) != len(sent) {
				t.Fatalf("captured %d RoCEv2 frames, want %d", len(frames), len(sent))
			}
			for i, f := range frames {
				ip := f.IPv4()
				if !ip.DF() || ip.ID() != ids[i] || ip.TotalLen() != wire.IPv4UDPLen+len(sent[i]) {
					t.Errorf("frame %d: DF %v Identification %d length %d; want DF, %d, %d", i, ip.DF(), ip.ID(), ip.TotalLen(), ids[i], wire.IPv4UDPLen+len(sent[i]))
				}
				tr := f.Transport()
				if !bytes.Equal(tr[:len(tr)-wire.ICRCLen], sent[i][:len(sent[i])-wire.ICRCLen]) {
					t.Errorf("frame %d: transport packet differs from the one sent", i)
				}
				if err := wire.CheckICRC(f.IPUDP(), tr); err != nil {
					t.Errorf("frame %d (Identification %d): ICRC over the real headers: %v", i, ip.ID(), err)
				}
			}
			if s := a.Stats(); s.GSOMessages != 2 || s.GSOSegments != 70 {
				t.Errorf("sender stats %+v, want 2 GSO messages of 70 segments", s)
			}
		})
	}
}

// Two soft devices in two namespaces, each on an io_uring Conn with GSO
// and GRO on and veths that cut and coalesce as NICs do: RC WRITE, SEND
// and READ of up to 128 KiB move the data intact, the messages leave as
// GSO messages (large payloads in pieces, from where they lie) and arrive
// as GRO trains, and every RoCEv2 frame on the
// link has DF, an Identification below 64 and an ICRC right over its real
// headers.
func TestSoftRCNetnsOffloads(t *testing.T) {
	p := offloadPair(t, 9000)
	opts := uring.Options{GSO: uring.OffloadRequire, GRO: uring.OffloadRequire}
	ca := listenIn(t, p.A, p.AddrA, opts)
	cb := listenIn(t, p.B, p.AddrB, opts)
	capA, capB := startCaptureDir(t, p.A, true), startCaptureDir(t, p.B, true)
	a, b := openEnd(t, ca, "uring0"), openEnd(t, cb, "uring1")
	connectRC(t, a, b, verbs.MTU4096)
	rcOps(t, a, b)
	// The Conn is a packetio.Gatherer: the devices sent their large
	// payloads from where they lie, in pieces.
	if ga, gb := a.dev.Stats().TxGathered, b.dev.Stats().TxGathered; ga+gb == 0 {
		t.Errorf("no packet went in pieces (TxGathered %d, %d)", ga, gb)
	}
	a.dev.Close()
	b.dev.Close()
	frames := roceFrames(append(capA.stop(), capB.stop()...))
	nonzero := 0
	for i, f := range frames {
		ip := f.IPv4()
		if !ip.DF() || ip.ID() >= wire.GSOMaxSegments {
			t.Errorf("frame %d: DF %v Identification %d; want DF and below %d", i, ip.DF(), ip.ID(), wire.GSOMaxSegments)
		}
		if ip.ID() != 0 {
			nonzero++
		}
		if err := wire.CheckICRC(f.IPUDP(), f.Transport()); err != nil {
			t.Errorf("frame %d (Identification %d): %v", i, ip.ID(), err)
		}
	}
	sa, sb := ca.Stats(), cb.Stats()
	t.Logf("%d RoCEv2 frames, %d with a non-zero Identification; a %+v; b %+v", len(frames), nonzero, sa, sb)
	if sa.GSOMessages == 0 || sb.GSOMessages == 0 || sa.GROBuffers == 0 || sb.GROBuffers == 0 || nonzero == 0 {
		t.Errorf("GSO messages %d/%d, GRO buffers %d/%d, %d frames with Identification > 0: want all > 0",
			sa.GSOMessages, sb.GSOMessages, sa.GROBuffers, sb.GROBuffers, nonzero)
	}
	if sa.TxErrors+sb.TxErrors+sa.RxDrops+sb.RxDrops+sa.GSOFallbacks+sb.GSOFallbacks != 0 {
		t.Errorf("errors, drops or fallbacks: a %+v b %+v", sa, sb)
	}
}

// Transmit with GSO and Receive with GRO make no allocation in steady
// state.
func TestGSOGRONoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			a, b := loopbackPair(t, p.listen, uring.Options{GSO: uring.OffloadRequire, GRO: uring.OffloadRequire})
			port := b.LocalAddrPort().Port()
			fl := wire.Flow{Src: a.LocalAddr(), Dst: b.LocalAddr(), SrcPort: port, DstPort: port}
			tmpl := rocetest.Packet(t, nil, &fl, 4112, 1)
			if allocs := testing.AllocsPerRun(50, func() { packetiotest.RoundTrip(a, b, tmpl, 16) }); allocs != 0 {
				t.Errorf("%v allocations per GSO Transmit and GRO Receive", allocs)
			}
			if sa, sb := a.Stats(), b.Stats(); sa.GSOMessages == 0 || sb.GROBuffers == 0 {
				t.Errorf("no GSO message or GRO buffer: a %+v b %+v", sa, sb)
			}
		})
	}
}
