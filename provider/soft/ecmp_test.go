//go:build linux

package soft

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/tee"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/packetio/uring"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// ecmpArrival is a packet as the receiving device's packet path got it:
// the source port is the one in its UDP header.
type ecmpArrival struct {
	src, dst netip.Addr
	sport    uint16
	pkt      []byte
}

// TestNetnsUDSourcePorts: between two soft devices in two namespaces over
// veth, UD SENDs with 16 flow labels leave from the 16 ports the labels map
// to (wire.SourcePort), as the receiving packet path reads them from the
// UDP header, with ICRCs valid for those ports (Identification 0 and DF);
// every completion succeeds, and RC packets still leave from 4791. Over the
// UDP path a port that another socket in the sender's namespace holds falls
// back to 4791 (its ICRC recomputed, counted) and is still delivered. The
// arrivals are written to a pcap the wire checker (GOROCE_WIRE_CHECK)
// judges when set. Once over packetio/udp and once over packetio/afxdp;
// over packetio/uring, which sends every packet from its socket's port,
// everything leaves from 4791 with its ICRC for 4791.
func TestNetnsUDSourcePorts(t *testing.T) {
	netns.Require(t)
	t.Run("udp", func(t *testing.T) { ecmpRun(t, "udp", "10.79.31.0/24") })
	t.Run("afxdp", func(t *testing.T) { ecmpRun(t, "afxdp", "10.79.32.0/24") })
	t.Run("uring", func(t *testing.T) { ecmpRun(t, "uring", "10.79.33.0/24") })
}

func ecmpRun(t *testing.T, path, prefix string) {
	pair := netns.NewPair(t, netns.Options{Prefix: netip.MustParsePrefix(prefix), MTU: 1500})
	listen := func(ns *netns.NS, addr netip.Addr) (c packetio.Conn) {
		err := ns.Do(func() (err error) {
			switch path {
			case "udp":
				c, err = udp.Listen(addr, udp.Options{})
			case "uring":
				c, err = uring.Listen(addr, uring.Options{})
			default:
				c, err = afxdp.Listen(addr, afxdp.Options{})
			}
			return err
		})
		if errors.Is(err, packetio.ErrNotSupported) {
			t.Skipf("%s refused: %v", path, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca := listen(pair.A, pair.AddrA)
	cb := listen(pair.B, pair.AddrB)
	perPacket := path != "uring"
	if packetio.PerPacketSourcePort(ca) != perPacket {
		ca.Close()
		cb.Close()
		t.Fatalf("the %s path says PerPacketSourcePort %v", path, !perPacket)
	}

	// 16 labels with 16 distinct ports.
	var labels []uint32
	ports := map[uint16]bool{}
	for i := uint32(0); len(labels) < 16; i++ {
		l := (0x9E3779B9 * (i + 1)) & 0xFFFFF
		if p := wire.SourcePort(l, 0, 0); l != 0 && !ports[p] {
			labels, ports[p] = append(labels, l), true
		}
	}
	// Over UDP, another socket in A's namespace holds the port of label 3.
	held := wire.SourcePort(labels[3], 0, 0)
	if path == "udp" {
		var holder *net.UDPConn
		err := pair.A.Do(func() (err error) {
			holder, err = net.ListenUDP("udp4", &net.UDPAddr{IP: pair.AddrA.AsSlice(), Port: int(held)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
	}

	pcapPath := filepath.Join(t.TempDir(), "ecmp-"+path+".pcap")
	pcap := e2eNewPcap(t, pcapPath)
	pcap.pw.Incoming = true
	var (
		mu       sync.Mutex
		arrivals []ecmpArrival
	)
	record := func(ts time.Time, d tee.Dir, src, dst netip.Addr, sport uint16, pkt []byte) {
		if d != tee.In {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		arrivals = append(arrivals, ecmpArrival{src, dst, sport, append([]byte(nil), pkt...)})
		// As it arrived, with its real source port, and the IPv4
		// Identification its ICRC shows (with GSO, segment k of a message
		// has k): the socket hid the header.
		pcap.pw.Write(ts, tee.In, src, dst, sport, pkt)
	}
	da, err := New(Options{Name: "ecmpa", Conn: ca})
	if err != nil {
		ca.Close()
		cb.Close()
		t.Fatal(err)
	}
	defer da.Close()
	db, err := New(Options{Name: "ecmpb", Conn: tee.New(cb, record)})
	if err != nil {
		cb.Close()
		t.Fatal(err)
	}
	defer db.Close()

	a, b := newEnd(t, da, verbs.QPTUD, 1<<16), newEnd(t, db, verbs.QPTUD, 1<<16)
	for _, e := range []*end{a, b} {
		e2eUDToRTS(t, e.qp, tsQKey, 0)
	}
	ahs := make([]verbs.AH, len(labels))
	for i, l := range labels {
		ahs[i], err = a.pd.CreateAH(&verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: db.GID(), FlowLabel: l, PortNum: 1})
		must(t, err)
		defer ahs[i].Destroy()
	}
	const rounds = 4
	n := rounds * len(labels)
	for i := range n {
		_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{{Addr: b.mr.Addr() + uint64(i%16)*1024, Length: 1024, LKey: b.mr.LKey()}}}})
		must(t, err)
	}
	for r := range rounds {
		var wrs []verbs.SendWR
		for i := range labels {
			wrs = append(wrs, verbs.SendWR{WRID: uint64(r*len(labels) + i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: uint32(100 + i), LKey: a.mr.LKey()}}, AH: ahs[i],
				RemoteQPN: b.qp.Num(), RemoteQKey: tsQKey})
		}
		_, err := a.qp.PostSend(wrs)
		must(t, err)
		// Each round's completions before the next: the send queue holds 128.
		for _, w := range wait(t, a.cq, len(labels)) {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("send completion %+v", w)
			}
		}
	}
	recvs := wait(t, b.cq, n)
	for _, w := range recvs {
		if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRecv || w.SrcQP != a.qp.Num() {
			t.Fatalf("receive completion %+v", w)
		}
	}

	// RC between two other QPs of the same devices: from 4791.
	x, y := newEnd(t, da, verbs.QPTRC, 1<<16), newEnd(t, db, verbs.QPTRC, 1<<16)
	connect(t, x, y)
	_, err = x.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 3000, LKey: x.mr.LKey()}}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}})
	must(t, err)
	if w := wait(t, x.cq, 1)[0]; w.Status != verbs.WCSuccess {
		t.Fatalf("RC WRITE: %+v", w)
	}

	// What arrived, by source port.
	mu.Lock()
	got := append([]ecmpArrival(nil), arrivals...)
	mu.Unlock()
	udFrom := map[uint16]int{}
	rcFrom := map[uint16]int{}
	for i, p := range got {
		var pkt wire.Packet
		if err := wire.Parse(p.pkt, &pkt); err != nil {
			t.Fatalf("arrival %d: %v", i, err)
		}
		fl := wire.Flow{Src: p.src, Dst: p.dst, SrcPort: p.sport}
		// Identification 0, or k for segment k of a GSO message.
		if id, df, err := fl.CheckDatagramICRC(p.pkt); err != nil || id >= wire.GSOMaxSegments || !df {
			t.Errorf("arrival %d (%v from port %d): ICRC %v (Identification %d, DF %v)", i, pkt.Info.Transport, p.sport, err, id, df)
		}
		if pkt.Info.Transport == wire.TransportUD {
			udFrom[p.sport]++
		} else {
			rcFrom[p.sport]++
		}
	}
	want := map[uint16]int{}
	for _, l := range labels {
		p := wire.SourcePort(l, 0, 0)
		if (path == "udp" && p == held) || !perPacket {
			p = wire.RoCEv2Port
		}
		want[p] += rounds
	}
	if fmt.Sprint(udFrom) != fmt.Sprint(want) {
		t.Errorf("UD packets per source port %v, want %v", udFrom, want)
	}
	if len(rcFrom) != 1 || rcFrom[wire.RoCEv2Port] == 0 {
		t.Errorf("RC packets per source port %v, want all from 4791", rcFrom)
	}
	st := ca.Stats()
	if path == "udp" && (st.SourcePortFallbacks != rounds || st.SourcePortSockets != uint64(len(labels)-1)) {
		t.Errorf("sender stats %+v: want %d fallbacks (the held port) and %d extra sockets", st, rounds, len(labels)-1)
	}
	if es := db.Stats(); es.ICRCDrops != 0 || es.MalformedDrops != 0 || es.NoRecvDrops != 0 {
		t.Errorf("receiver: %d ICRC drops, %d malformed, %d without a receive", es.ICRCDrops, es.MalformedDrops, es.NoRecvDrops)
	}
	t.Logf("%s: %d UD packets from %d source ports, %d RC packets; sender %+v", path, n, len(udFrom), len(got)-n, st)
	da.Close()
	db.Close()
	if err := pcap.close(); err != nil {
		t.Fatal(err)
	}
	check := e2eStartWireCheck(t, pcapPath, verbs.MTU1024)
	t.Run("wirecheck", check.wait)
}
