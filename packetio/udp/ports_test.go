//go:build linux

package udp_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/rocetest"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/wire"
)

// testPort is the i-th source port of these tests: 0xF000 and up, above
// Linux's ephemeral range (32768-60999), so that no other socket on the
// machine is likely to hold one.
func testPort(i int) uint16 { return 0xF000 + uint16(i) }

// udPacket appends a UD SEND whose ICRC is for the datagram from src:sport
// to dst:4791, with seq in its payload.
func udPacket(t testing.TB, buf []byte, src, dst netip.Addr, sport uint16, seq int) []byte {
	t.Helper()
	h := wire.Header{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: wire.PSN(seq),
		DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 0x12}}
	payload := []byte{byte(seq >> 8), byte(seq), 1, 2, 3, 4, 5, 6}
	b, err := wire.AppendTransport(buf[:0], &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	fl := wire.Flow{Src: src, Dst: dst, SrcPort: sport}
	if err := fl.SetDatagramICRC(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// sendPorts transmits one packet per port in ports, in one batch, each
// with its ICRC for that port (0: the Conn's own).
func sendPorts(t testing.TB, a *udp.Conn, to netip.Addr, ports []uint16, seq0 int) {
	t.Helper()
	batch := a.TxBatch(len(ports))
	if len(batch) != len(ports) {
		t.Fatalf("TxBatch lent %d", len(batch))
	}
	for i, p := range ports {
		icrcPort := p
		if p == 0 {
			icrcPort = a.LocalAddrPort().Port()
		}
		batch[i].Buf = udPacket(t, batch[i].Buf, a.LocalAddr(), to, icrcPort, seq0+i)
		batch[i].Addr, batch[i].Port = to, p
		if i%2 == 1 {
			rocetest.InPieces(t, &batch[i]) // a fallback's ICRC recomputed over the pieces too
		}
	}
	if n, err := a.Transmit(batch); err != nil || n != len(ports) {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
}

// checkArrivals checks that the packets arrived from the wanted ports, in
// the order sent per port, each with a valid ICRC for the port it arrived
// from, written for Identification 0 and DF (IP_PMTUDISC_DO).
func checkArrivals(t testing.TB, got []packetiotest.Received, from netip.Addr, to netip.Addr, want []uint16, seq0 int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d packets arrived, want %d", len(got), len(want))
	}
	seen := map[int]bool{}
	for _, p := range got {
		var pkt wire.Packet
		if err := wire.Parse(p.Buf, &pkt); err != nil {
			t.Fatalf("packet from port %d: %v", p.Port, err)
		}
		seq := int(pkt.Payload()[0])<<8 | int(pkt.Payload()[1])
		i := seq - seq0
		if i < 0 || i >= len(want) || seen[i] {
			t.Fatalf("unexpected sequence number %d", seq)
		}
		seen[i] = true
		if p.Port != want[i] {
			t.Errorf("packet %d arrived from port %d, want %d", i, p.Port, want[i])
		}
		fl := wire.Flow{Src: from, Dst: to, SrcPort: p.Port}
		if id, df, err := fl.CheckDatagramICRC(p.Buf); err != nil || id != 0 || !df {
			t.Errorf("packet %d from port %d: ICRC %v (Identification %d, DF %v), want valid for 0 and DF", i, p.Port, err, id, df)
		}
	}
}

// TestSourcePorts: packets leave from the source port each one asks for,
// 16 ports in one batch and again in the next (the sockets are kept), with
// the socket's own port for Port 0; the ICRC the sender computed for each
// port checks out at the receiver.
func TestSourcePorts(t *testing.T) {
	a, b := loopbackPair(t, noGSO())
	if !packetio.PerPacketSourcePort(a) {
		t.Fatal("PerPacketSourcePort false by default")
	}
	own := a.LocalAddrPort().Port()
	var ports, want []uint16
	for i := range 16 {
		ports = append(ports, testPort(i))
	}
	ports = append(ports, 0, own)
	want = append(append(want, ports[:16]...), own, own)
	for round := range 2 {
		sendPorts(t, a, lo2, ports, round*100)
		checkArrivals(t, packetiotest.Recv(t, b, len(ports), 5*time.Second), lo1, lo2, want, round*100)
	}
	st := a.Stats()
	if st.SourcePortSockets != 16 || st.SourcePortFallbacks != 0 || st.TxErrors != 0 || st.PacketsOut != 2*18 {
		t.Errorf("stats %+v, want 16 sockets opened once, no fallback", st)
	}
	// One sendmmsg per socket: the main one and 16 extra, per round.
	if st.TxBatches != 2*17 {
		t.Errorf("TxBatches %d, want %d (one per socket per batch)", st.TxBatches, 2*17)
	}
}

// TestSourcePortInUse: a port another socket holds cannot be bound; its
// packets leave from the Conn's own port with the ICRC recomputed for it,
// and are counted; the other ports of the batch are not disturbed.
func TestSourcePortInUse(t *testing.T) {
	a, b := loopbackPair(t, noGSO())
	own := a.LocalAddrPort().Port()
	taken := testPort(100)
	holder, err := net.ListenUDP("udp4", &net.UDPAddr{IP: lo1.AsSlice(), Port: int(taken)})
	if err != nil {
		t.Skipf("cannot hold port %d for the test: %v", taken, err)
	}
	defer holder.Close()
	ports := []uint16{testPort(101), taken, testPort(102), taken}
	sendPorts(t, a, lo2, ports, 0)
	checkArrivals(t, packetiotest.Recv(t, b, len(ports), 5*time.Second), lo1, lo2, []uint16{testPort(101), own, testPort(102), own}, 0)
	if st := a.Stats(); st.SourcePortFallbacks != 2 || st.TxErrors != 0 {
		t.Errorf("stats %+v, want 2 fallbacks", st)
	}
	// Once the port is free (and the retry delay passed), it is used.
	holder.Close()
	time.Sleep(1100 * time.Millisecond)
	sendPorts(t, a, lo2, []uint16{taken}, 10)
	checkArrivals(t, packetiotest.Recv(t, b, 1, 5*time.Second), lo1, lo2, []uint16{taken}, 10)
}

// TestSourcePortsEvict: with room for 4 extra sockets, 8 ports in turn
// close the least recently used; a batch with more ports than that sends
// the excess from the own port (recomputed ICRC). Everything arrives.
func TestSourcePortsEvict(t *testing.T) {
	a, b := loopbackPair(t, udp.Options{GSO: udp.OffloadOff, SourcePorts: 4})
	own := a.LocalAddrPort().Port()
	for i := range 8 {
		sendPorts(t, a, lo2, []uint16{testPort(200 + i)}, i)
		checkArrivals(t, packetiotest.Recv(t, b, 1, 5*time.Second), lo1, lo2, []uint16{testPort(200 + i)}, i)
	}
	// 200-203 were closed; 204-207 are open.
	sendPorts(t, a, lo2, []uint16{testPort(207), testPort(200)}, 20)
	checkArrivals(t, packetiotest.Recv(t, b, 2, 5*time.Second), lo1, lo2, []uint16{testPort(207), testPort(200)}, 20)
	if st := a.Stats(); st.SourcePortSockets != 9 || st.SourcePortFallbacks != 0 {
		t.Errorf("stats %+v, want 9 sockets opened (200 again), no fallback", st)
	}
	var ports []uint16
	for i := range 6 {
		ports = append(ports, testPort(300+i))
	}
	sendPorts(t, a, lo2, ports, 30)
	checkArrivals(t, packetiotest.Recv(t, b, 6, 5*time.Second), lo1, lo2,
		[]uint16{testPort(300), testPort(301), testPort(302), testPort(303), own, own}, 30)
	if st := a.Stats(); st.SourcePortFallbacks != 2 {
		t.Errorf("stats %+v, want the 2 ports beyond the 4 sockets sent from the own port", st)
	}
}

// TestSourcePortsOff: with SourcePorts negative, Port is ignored on send.
func TestSourcePortsOff(t *testing.T) {
	a, b := loopbackPair(t, udp.Options{GSO: udp.OffloadOff, SourcePorts: -1})
	if packetio.PerPacketSourcePort(a) {
		t.Fatal("PerPacketSourcePort true with SourcePorts -1")
	}
	own := a.LocalAddrPort().Port()
	batch := a.TxBatch(1)
	batch[0].Buf = udPacket(t, batch[0].Buf, lo1, lo2, own, 1)
	batch[0].Addr, batch[0].Port = lo2, testPort(400)
	if _, err := a.Transmit(batch); err != nil {
		t.Fatal(err)
	}
	checkArrivals(t, packetiotest.Recv(t, b, 1, 5*time.Second), lo1, lo2, []uint16{own}, 1)
}

// TestSourcePortsNoAllocs: sending from 16 ports in steady state (sockets
// open) allocates nothing.
func TestSourcePortsNoAllocs(t *testing.T) {
	a, b := loopbackPair(t, noGSO())
	var pkts [][]byte
	ports := make([]uint16, 16)
	for i := range ports {
		ports[i] = testPort(500 + i)
		pkts = append(pkts, udPacket(t, nil, lo1, lo2, ports[i], i))
	}
	round := func() {
		batch := a.TxBatch(len(ports))
		for i := range batch {
			batch[i].Buf = append(batch[i].Buf[:0], pkts[i]...)
			batch[i].Addr, batch[i].Port = lo2, ports[i]
		}
		if _, err := a.Transmit(batch); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(ports); {
			p, err := b.Receive(time.Now().Add(5 * time.Second))
			if err != nil || len(p) == 0 {
				t.Fatalf("Receive: %d, %v", len(p), err)
			}
			got += len(p)
		}
	}
	round()
	if allocs := testing.AllocsPerRun(100, round); allocs != 0 {
		t.Errorf("%v allocations per batch of 16 ports", allocs)
	}
}
