//go:build linux

package soft

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/goroce/goroce/internal/testenv"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/tee"
	"github.com/goroce/goroce/packetio/uring"
	"github.com/goroce/goroce/verbs"
)

// TestNetnsUring runs the end-to-end cases of TestNetns (every operation at
// every interesting size with data verified, 64 RC QPs, an SRQ feeding 8
// QPs, UD among 4 QPs) between two soft devices whose packet path is
// io_uring (packetio/uring), each in its own namespace, over veth with MTU
// 1500 (path MTU 1024). The engines must drop nothing for its ICRC, and the
// wire checker judges the capture. It skips without root or when the kernel
// refuses io_uring.
func TestNetnsUring(t *testing.T) {
	netns.Require(t)
	dir := t.TempDir()
	env := &e2eEnv{pmtu: verbs.MTU1024, seen: map[[sha256.Size]byte]struct{}{}}
	env.pair = netns.NewPair(t, netns.Options{Prefix: netip.MustParsePrefix("10.79.11.0/24"), MTU: 1500})
	env.pcap = filepath.Join(dir, "uring-pmtu1024.pcap")
	env.checkPcap = filepath.Join(dir, "uring-pmtu1024-distinct.pcap")
	env.full, env.distinct = e2eNewPcap(t, env.pcap), e2eNewPcap(t, env.checkPcap)
	listen := func(ns *netns.NS, addr netip.Addr) *uring.Conn {
		var c *uring.Conn
		err := ns.Do(func() (err error) {
			c, err = uring.Listen(addr, uring.Options{})
			return err
		})
		if errors.Is(err, packetio.ErrNotSupported) {
			testenv.Skipf(t, testenv.Uring, "io_uring refused: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, cb := listen(env.pair.A, env.pair.AddrA), listen(env.pair.B, env.pair.AddrB)
	t.Logf("io_uring features: %v", ca.Features())
	var err error
	// A sends from its driver only: the SRQ case's hold hook blocks the
	// goroutine that sends (see e2eEnv.hold).
	if env.a, err = New(Options{Name: "uringa", Conn: tee.New(ca, env.capture), NoInline: true, ActiveMTU: verbs.MTU1024}); err != nil {
		t.Fatal(err)
	}
	if env.b, err = New(Options{Name: "uringb", Conn: tee.New(cb, env.capture), ActiveMTU: verbs.MTU1024}); err != nil {
		env.a.Close()
		t.Fatal(err)
	}
	t.Cleanup(env.close)
	for _, s := range []struct {
		name string
		f    func(*testing.T, *e2eEnv)
	}{{"ops", e2eOps}, {"64QPs", e2eManyQPs}, {"SRQ", e2eSRQ}, {"UD", e2eUD}} {
		t.Run(s.name, func(t *testing.T) {
			start, a0, b0 := time.Now(), env.a.Stats(), env.b.Stats()
			s.f(t, env)
			t.Logf("%s: %v; device A: %s; device B: %s", s.name, time.Since(start).Round(time.Millisecond),
				e2eStatsDelta(env.a.Stats(), a0), e2eStatsDelta(env.b.Stats(), b0))
		})
	}
	for _, d := range []*Device{env.a, env.b} {
		if es := d.Stats(); es.ICRCDrops != 0 || es.MalformedDrops != 0 || es.CQOverruns != 0 {
			t.Errorf("device %s: %d packets dropped for their ICRC, %d malformed, %d CQ overruns", d.Name(), es.ICRCDrops, es.MalformedDrops, es.CQOverruns)
		}
	}
	pkts, dupes, err := env.closePcaps()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("captured %d packets, %d of them byte-identical repeats (retransmissions)", pkts, dupes)
	check := e2eStartWireCheck(t, env.checkPcap, env.pmtu)
	t.Run(fmt.Sprintf("wirecheck_pmtu%d", env.pmtu.Bytes()), check.wait)
}
