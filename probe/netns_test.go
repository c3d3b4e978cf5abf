//go:build linux

package probe_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/tee"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// TestNetns: a prober in one namespace and a responder in another, joined
// by a veth pair: 160 probes over 16 flow labels and 2 responder QPs
// complete with sane delays, and the probes leave from the 16 source ports
// the labels map to.
func TestNetns(t *testing.T) {
	netns.Require(t)
	pair := netns.NewPair(t, netns.Options{})
	var mu sync.Mutex
	ports := map[uint16]int{}
	capture := func(_ time.Time, d tee.Dir, _, _ netip.Addr, sport uint16, pkt []byte) {
		if d != tee.Out {
			return
		}
		var p wire.Packet
		if err := wire.Parse(pkt, &p); err != nil || p.Opcode() != wire.UDSendOnly {
			return
		}
		mu.Lock()
		ports[sport]++
		mu.Unlock()
	}
	open := func(ns *netns.NS, a netip.Addr, f tee.Func) verbs.Context {
		var c *udp.Conn
		if err := ns.Do(func() (err error) { c, err = udp.Listen(a, udp.Options{}); return err }); err != nil {
			t.Fatal(err)
		}
		opts := soft.Options{Name: "ns" + a.String(), Conn: c}
		if f != nil {
			opts.Conn = tee.New(c, f)
		}
		d, err := soft.New(opts)
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		ctx, err := d.Open()
		if err != nil {
			d.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { ctx.Close(); d.Close() })
		return ctx
	}
	ca := open(pair.A, pair.AddrA, capture)
	cb := open(pair.B, pair.AddrB, nil)
	r, err := probe.NewResponder(cb, probe.ResponderOptions{QPs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	col := newCollector()
	p, err := probe.NewProber(ca, probe.ProberOptions{OnResult: col.add})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	labels := probe.FlowLabels(11, 16)
	const n = 160
	for i := 0; i < n; i++ {
		peer := peerOf(r, i%2)
		if peer.Addr != pair.AddrB {
			t.Fatalf("responder GID %v, want %v", peer.GID, pair.AddrB)
		}
		if err := p.Probe(peer, labels[i%len(labels)], "t"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Microsecond)
	}
	rs := col.wait(t, 10*time.Second, count(n))
	if len(rs) != n {
		t.Fatalf("%d results of %d", len(rs), n)
	}
	checkOK(t, rs)
	qpns := map[uint32]int{}
	for _, r := range rs {
		qpns[r.ResponderQPN]++
	}
	if len(qpns) != 2 {
		t.Fatalf("responder QPs probed: %v", qpns)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[uint16]int{}
	for _, l := range labels {
		want[probe.SourcePort(l)] = n / len(labels)
	}
	if len(ports) != len(want) {
		t.Fatalf("probes left from ports %v, want %v", ports, want)
	}
	for sp, k := range want {
		if ports[sp] != k {
			t.Fatalf("port %#x: %d probes, want %d (all: %v)", sp, ports[sp], k, ports)
		}
	}
	t.Logf("median network RTT %v, prober delay %v, responder delay %v; stats %+v / %+v",
		median(rs, func(r probe.Result) time.Duration { return r.NetworkRTT }),
		median(rs, func(r probe.Result) time.Duration { return r.ProberDelay }),
		median(rs, func(r probe.Result) time.Duration { return r.ResponderDelay }), p.Stats(), r.Stats())
}
