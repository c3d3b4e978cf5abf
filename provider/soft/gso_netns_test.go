//go:build linux

package soft

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
)

// RC WRITEs of 64 KiB between two soft devices in two namespaces over
// veth, with UDP GSO (and GRO) on and off, at path MTU 4096 over a 9000-byte
// link and 1024 over 1500: the data arrives intact, no packet fails its
// ICRC, GSO is used exactly when on (the sender's Conn counts its messages)
// and the receiver's engine checks the GSO segments' ICRCs with their
// Identification known (held to small ones, or by their place in a GRO
// train). With GSO on, the sender's payloads go from where they lie in
// its memory region (gather) or are copied into the packets (NoGather);
// the sender's engine counts the former.
func TestNetnsGSOWrite(t *testing.T) {
	for _, mtu := range []struct {
		veth int
		pmtu verbs.MTU
	}{{9000, verbs.MTU4096}, {1500, verbs.MTU1024}} {
		for _, c := range []struct{ gso, gather bool }{{true, true}, {true, false}, {false, true}} {
			t.Run(fmt.Sprintf("mtu%d/gso=%v/gather=%v", mtu.veth, c.gso, c.gather), func(t *testing.T) { gsoWrite(t, mtu.veth, mtu.pmtu, c.gso, c.gather) })
		}
	}
}

func gsoWrite(t *testing.T, vethMTU int, pmtu verbs.MTU, gso, gather bool) {
	p := netns.NewPair(t, netns.Options{MTU: vethMTU})
	opts := udp.Options{}
	if !gso {
		opts.GSO, opts.GRO = udp.OffloadOff, udp.OffloadOff
	}
	var conns [2]*udp.Conn
	var devs [2]*Device
	for i, x := range []struct {
		ns   *netns.NS
		addr netip.Addr
	}{{p.A, p.AddrA}, {p.B, p.AddrB}} {
		if err := x.ns.Do(func() (err error) {
			conns[i], err = udp.Listen(x.addr, opts)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		d, err := New(Options{Name: fmt.Sprintf("gso%c", 'a'+i), Conn: conns[i], NoGather: !gather})
		if err != nil {
			conns[i].Close()
			t.Fatal(err)
		}
		devs[i] = d
		defer d.Close()
	}
	if o := conns[0].Offloads(); o.GSO != gso {
		t.Fatalf("offloads %v, want GSO %v", o, gso)
	}
	const size, rounds = 64 << 10, 8
	a, b := newEnd(t, devs[0], verbs.QPTRC, size), newEnd(t, devs[1], verbs.QPTRC, size)
	connectPerf(t, a, b, pmtu, 16)
	for r := range rounds {
		for i := range a.buf {
			a.buf[i] = byte(i*7 + r)
		}
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(r), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: size, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		must(t, err)
		if w := wait(t, a.cq, 1)[0]; w.Status != verbs.WCSuccess {
			t.Fatalf("round %d: %+v", r, w)
		}
		// The receiver's driver wrote b.buf under its device's mutex before
		// it sent the ACK behind this completion, and writes it again after
		// the next post; the network is no synchronisation the memory model
		// (or the race detector) knows, so the read sits between two
		// takings of that mutex.
		devs[1].Stats()
		same := bytes.Equal(a.buf, b.buf)
		devs[1].Stats()
		if !same {
			t.Fatalf("round %d: the 64 KiB written differ", r)
		}
	}
	sa, sb := conns[0].Stats(), devs[1].Stats()
	t.Logf("sender conn: %d packets out, %d GSO messages of %d segments, %d fallbacks; receiver: %d ICRC checks held to small Identifications, %d by GRO train position, %d GRO buffers",
		sa.PacketsOut, sa.GSOMessages, sa.GSOSegments, sa.GSOFallbacks, sb.ICRCLowIDChecks, sb.ICRCTrainChecks, conns[1].Stats().GROBuffers)
	if (sa.GSOMessages > 0) != gso || sa.GSOFallbacks != 0 {
		t.Errorf("GSO %v but %d GSO messages, %d fallbacks", gso, sa.GSOMessages, sa.GSOFallbacks)
	}
	if sb.ICRCDrops != 0 || sb.MalformedDrops != 0 {
		t.Errorf("receiver dropped %d packets for their ICRC, %d malformed", sb.ICRCDrops, sb.MalformedDrops)
	}
	// Every WRITE packet's payload is a path MTU (1024 or 4096 bytes) of
	// one SGE: all go in pieces when gathering, none otherwise.
	if g := devs[0].Stats().TxGathered; gather && g < rounds*size/uint64(pmtu.Bytes()) || !gather && g != 0 {
		t.Errorf("gather %v: %d packets sent with their payload left where it lies", gather, g)
	}
	// GSO messages cross the veth whole and reach the GRO socket as one
	// buffer each: their packets after the first are checked by position.
	if gso && (sb.ICRCTrainChecks == 0 || conns[1].Stats().GROBuffers == 0) {
		t.Errorf("receiver checked no ICRC by GRO train position: %+v", sb)
	}
}

// BenchmarkNetnsGSOWrite streams RC WRITEs of 64 KiB (16 in flight) between
// two soft devices in two namespaces over veth, at path MTU 4096 over MTU
// 9000 and 1024 over 1500, with UDP GSO and GRO on and off (compare the
// Gbit/s of on and off within one run: the machine is shared).
func BenchmarkNetnsGSOWrite(b *testing.B) {
	for _, mtu := range []struct {
		veth int
		pmtu verbs.MTU
	}{{9000, verbs.MTU4096}, {1500, verbs.MTU1024}} {
		p := netns.NewPair(b, netns.Options{MTU: mtu.veth})
		for _, cs := range []struct{ on, gather bool }{{true, true}, {true, false}, {false, true}} {
			on := cs.on
			b.Run(fmt.Sprintf("mtu%d/gso=%v/gather=%v", mtu.veth, on, cs.gather), func(b *testing.B) {
				opts := udp.Options{}
				if !on {
					opts.GSO, opts.GRO = udp.OffloadOff, udp.OffloadOff
				}
				var devs [2]*Device
				for i, x := range []struct {
					ns   *netns.NS
					addr netip.Addr
				}{{p.A, p.AddrA}, {p.B, p.AddrB}} {
					var c *udp.Conn
					if err := x.ns.Do(func() (err error) {
						c, err = udp.Listen(x.addr, opts)
						return err
					}); err != nil {
						b.Fatal(err)
					}
					d, err := New(Options{Name: fmt.Sprintf("gsob%c", 'a'+i), Conn: c, NoGather: !cs.gather})
					if err != nil {
						c.Close()
						b.Fatal(err)
					}
					devs[i] = d
					defer d.Close()
				}
				const size, depth = 64 << 10, 16
				x, y := perfEnd(b, devs[0], size, depth), perfEnd(b, devs[1], size, depth)
				connectPerf(b, x, y, mtu.pmtu, 1)
				b.SetBytes(size)
				start := time.Now()
				if err := afxdpWriteStream(x, y, size, depth, b.N); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N*size)*8/1e9/time.Since(start).Seconds(), "Gbit/s")
				sa, sb := devs[0].Stats(), devs[1].Stats()
				b.Logf("N=%d: sender retransmits %d timeouts %d NAKs %d; receiver out of sequence %d ICRC drops %d",
					b.N, sa.Retransmits, sa.Timeouts, sa.NAKsReceived, sb.OutOfSequence, sb.ICRCDrops)
			})
		}
	}
}
