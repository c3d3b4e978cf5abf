//go:build linux

package afxdp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/packetiotest"
)

// newPair2Q joins two namespaces by a veth pair with two RX and two TX
// queues at each end (netns.NewPair makes single-queue ones).
func newPair2Q(t *testing.T) (a, b *netns.NS, addrA, addrB netip.Addr) {
	a, b = netns.New(t), netns.New(t)
	addrA, addrB = netip.MustParseAddr("10.79.8.1"), netip.MustParseAddr("10.79.8.2")
	const macA, macB = "02:79:08:00:00:01", "02:79:08:00:00:02"
	cmds := [][]string{
		{"link", "add", "name", "veth0", "netns", a.Name, "address", macA, "numtxqueues", "2", "numrxqueues", "2",
			"type", "veth", "peer", "name", "veth0", "netns", b.Name, "address", macB, "numtxqueues", "2", "numrxqueues", "2"},
		{"-n", a.Name, "addr", "add", "10.79.8.1/24", "dev", "veth0"},
		{"-n", b.Name, "addr", "add", "10.79.8.2/24", "dev", "veth0"},
		{"-n", a.Name, "link", "set", "veth0", "up"},
		{"-n", b.Name, "link", "set", "veth0", "up"},
		{"-n", a.Name, "neigh", "replace", "10.79.8.2", "lladdr", macB, "dev", "veth0", "nud", "permanent"},
		{"-n", b.Name, "neigh", "replace", "10.79.8.1", "lladdr", macA, "dev", "veth0", "nud", "permanent"},
	}
	for _, c := range cmds {
		if out, err := a.Exec(append([]string{"ip"}, c...)...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	return a, b, addrA, addrB
}

// One socket per RX queue: on a two-queue veth, Listen binds both queues by
// default, and packets arriving on either (the peer transmits on queue 1,
// then on queue 0) are received; bound to queue 0 only, the packets of
// queue 1 find no socket and the XDP program passes them to the kernel,
// counted in NoSocket.
func TestNetnsTwoQueues(t *testing.T) {
	nsA, nsB, addrA, addrB := newPair2Q(t)
	b := listenIn(t, nsB, addrB, afxdp.Options{})
	if b.Queues() != 2 {
		t.Fatalf("Listen bound %d queues of a two-queue veth, want 2", b.Queues())
	}
	sent := 0
	for _, q := range []int{1, 0} {
		a := listenIn(t, nsA, addrA, afxdp.Options{Queue: q, Queues: 1})
		packetiotest.Send(t, a, b, sent, 32, 500)
		packetiotest.Send(t, a, b, sent+32, 32, 500)
		packetiotest.Check(t, packetiotest.Recv(t, b, 64, 5*time.Second), a, b, sent, 500)
		sent += 64
		a.Close()
	}
	x, err := b.XDPStats()
	if err != nil {
		t.Fatal(err)
	}
	if x.Redirected != uint64(sent) || x.NoSocket != 0 {
		t.Errorf("two sockets: redirected %d, no socket %d; want %d and 0", x.Redirected, x.NoSocket, sent)
	}
	b.Close()

	// Control: only queue 0 has a socket.
	b = listenIn(t, nsB, addrB, afxdp.Options{Queues: 1})
	a := listenIn(t, nsA, addrA, afxdp.Options{Queue: 1, Queues: 1})
	packetiotest.Send(t, a, b, 0, 16, 100)
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if pkts, err := b.Receive(deadline); err != nil || len(pkts) != 0 {
			t.Fatalf("queue-0 socket received %d packets sent on queue 1 (%v)", len(pkts), err)
		}
	}
	if x, err = b.XDPStats(); err != nil || x.NoSocket != 16 || x.Redirected != 0 {
		t.Errorf("one socket: redirected %d, no socket %d (%v); want 0 and 16", x.Redirected, x.NoSocket, err)
	}
}
