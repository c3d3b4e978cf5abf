//go:build linux

package soft

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/fault"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/packetio/uring"
)

var (
	nftSoakOps  = flag.Int("soak.nftops", 50000, "operations in TestSoakNftables (a longer soak: raise it)")
	nftSoakTime = flag.Duration("soak.nfttime", 100*time.Second, "time limit of TestSoakNftables")
)

// nftSoakPrefix is the subnet of TestSoakNftables' namespace pair.
var nftSoakPrefix = netip.MustParsePrefix("10.79.6.0/30")

// TestSoakNftables is TestSoakFaults' scenario with the losses made by the
// kernel: two soft devices on UDP sockets in two network namespaces joined
// by a veth pair, where an nftables rule (numgen random) on each veth end's
// ingress drops 5 % of the UDP datagrams, both ways. The fault decorator on
// top of each socket adds 1 % duplication, 2 % reordering and 0.1 %
// corruption of what the device sends (no drops of its own). Mixed RC
// operations (SEND, WRITE, READ, CAS, FAA) on 16 QP pairs must each complete
// exactly once, successfully, in post order per QP, with every byte and
// atomic result checked and the atomics' words ending where sequential
// execution puts them; no goroutine and no heap may be left over after.
//
// It runs on each packet path: 50,000 operations on udp (about 25 s on two
// busy cores; it fails past -soak.nfttime, 100 s by default; -args
// -soak.nftops=N runs longer), a tenth of that on uring and afxdp. With one
// congestion window shared by the 16 QPs and no packet a QP beside it (see
// engine's ccPath), the lossy path runs 2 to 5 times slower than when each
// QP could always send one: a QP whose packet was lost waits its turn to
// resend. It needs root and the nft command.
func TestSoakNftables(t *testing.T) {
	if testing.Short() {
		t.Skip("soak skipped in -short mode")
	}
	netns.Require(t)
	netns.RequireTool(t, "nft")
	for _, path := range []string{"udp", "uring", "afxdp"} {
		t.Run(path, func(t *testing.T) {
			ops := *nftSoakOps
			if path != "udp" {
				ops /= 10
			}
			soakNftables(t, path, ops)
		})
	}
}

// nftSoakListen opens the packet path named path on addr inside ns, with
// no UDP segmentation offload (nftables counts and drops a GSO message
// whole: one skb for many datagrams on veth, and the soak holds its drops
// to 5 % of the datagrams), or skips when the kernel refuses it.
func nftSoakListen(t *testing.T, ns *netns.NS, addr netip.Addr, path string) packetio.Conn {
	var c packetio.Conn
	err := ns.Do(func() (err error) {
		switch path {
		case "uring":
			c, err = uring.Listen(addr, uring.Options{GSO: uring.OffloadOff})
		case "afxdp":
			c, err = afxdp.Listen(addr, afxdp.Options{})
		default:
			c, err = udp.Listen(addr, udp.Options{GSO: udp.OffloadOff})
		}
		return err
	})
	if errors.Is(err, packetio.ErrNotSupported) {
		suite := map[string]string{"uring": testenv.Uring, "afxdp": testenv.AFXDP}[path]
		testenv.Skipf(t, suite, "%s refused: %v", path, err)
	}
	if err != nil {
		t.Fatalf("%s: listen on %v in %s: %v", path, addr, ns.Name, err)
	}
	return c
}

// soakNftables is TestSoakNftables on one packet path, ops operations.
func soakNftables(t *testing.T, path string, ops int) {
	goroutines := runtime.NumGoroutine()
	var m0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)

	pair := netns.NewPair(t, netns.Options{Prefix: nftSoakPrefix})
	for _, ns := range []*netns.NS{pair.A, pair.B} {
		if err := ns.SetLoss(netns.LinkName, 5); err != nil {
			t.Fatal(err)
		}
	}
	fo := fault.Options{Duplicate: 0.01, Reorder: 0.02, Corrupt: 0.001}
	if path == "afxdp" {
		// AF_XDP frames pass no netfilter hook (the XDP program takes
		// them before it, and sends bypass the stack): the decorator
		// drops the 5 % itself.
		fo.Drop = 0.05
	}
	var devs [2]*Device
	var faults [2]*fault.Conn
	for i, x := range []struct {
		ns   *netns.NS
		addr netip.Addr
	}{{pair.A, pair.AddrA}, {pair.B, pair.AddrB}} {
		// It is also the soak that keeps the udp path's
		// one-datagram-per-packet sends exercised.
		c := nftSoakListen(t, x.ns, x.addr, path)
		fo.Seed = uint64(11 + i)
		faults[i] = fault.New(c, fo)
		var conn packetio.Conn = faults[i]
		d, err := New(Options{Name: fmt.Sprintf("nft%c", 'a'+i), Conn: conn, Engine: engine.Config{TargetDelay: int64(loadTarget(t))}})
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		devs[i] = d
	}
	defer func() { // before the namespaces go; not a cleanup, which would keep the devices reachable
		for _, d := range devs {
			if d != nil {
				d.Close()
			}
		}
	}()
	da, db := devs[0], devs[1]
	ka, kb := e2eKernelDrops(pair.A), e2eKernelDrops(pair.B)

	start := time.Now()
	completed := soak(t, da, db, ops, *nftSoakTime)
	elapsed := time.Since(start)
	dropA, errA := pair.A.LossDropped(netns.LinkName)
	dropB, errB := pair.B.LossDropped(netns.LinkName)
	if errA != nil || errB != nil {
		t.Fatalf("nftables counters: %v, %v", errA, errB)
	}
	if path == "afxdp" {
		dropA, dropB = faults[1].FaultStats().Dropped, faults[0].FaultStats().Dropped
	}
	sa, sb := da.Stats(), db.Stats()
	// The rule dropped about 5 % of what each side sent (the other's
	// TxPackets, duplicates included).
	for _, x := range []struct {
		name       string
		drop, sent uint64
	}{{"b->a", dropA, sb.TxPackets + faults[1].FaultStats().Duplicated}, {"a->b", dropB, sa.TxPackets + faults[0].FaultStats().Duplicated}} {
		if x.sent == 0 || float64(x.drop) < 0.03*float64(x.sent) || float64(x.drop) > 0.07*float64(x.sent) {
			t.Errorf("%s: nftables dropped %d of %d datagrams, want about 5 %%", x.name, x.drop, x.sent)
		}
	}
	t.Logf("%d operations on %d QPs in %v through nftables loss (dropped %d a->b, %d b->a; kernel receive-buffer drops a %d, b %d)",
		completed, soakQPs, elapsed.Round(time.Millisecond), dropB, dropA, e2eKernelDrops(pair.A)-ka, e2eKernelDrops(pair.B)-kb)
	t.Logf("a: %s; faults a->b %+v", e2eStatsDelta(sa, engine.Stats{}), faults[0].FaultStats())
	t.Logf("b: %s; faults b->a %+v", e2eStatsDelta(sb, engine.Stats{}), faults[1].FaultStats())

	da.Close()
	db.Close()
	da, db, devs, faults = nil, nil, [2]*Device{}, [2]*fault.Conn{}
	time.Sleep(10 * time.Millisecond)
	if g := runtime.NumGoroutine(); g > goroutines {
		t.Errorf("%d goroutines after, %d before", g, goroutines)
	}
	var m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m1)
	// The test's buffers (16 MiB) and the devices' are garbage now; what is
	// left must be about what was there before.
	if m1.HeapAlloc > m0.HeapAlloc+8<<20 {
		t.Errorf("heap %d MiB after, %d MiB before", m1.HeapAlloc>>20, m0.HeapAlloc>>20)
	}
	t.Logf("heap: %d KiB before, %d KiB after", m0.HeapAlloc>>10, m1.HeapAlloc>>10)
}
