//go:build linux

package udp

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ICMP errors reported on a later call (ECONNREFUSED) are counted and
// skipped: they neither lose the packet being sent nor end the Conn. An
// unconnected socket sees them only with IP_RECVERR, set here to provoke
// them.
func TestAsyncErrorsSkipped(t *testing.T) {
	lo1, lo2, nobody := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	a, err := Listen(lo1, Options{Port: AnyPort})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// b shares a's port, so nothing (not even a wildcard socket) listens on
	// 127.0.0.3 at that port: datagrams there draw ICMP port unreachable.
	b, err := Listen(lo2, Options{Port: int(a.LocalAddrPort().Port())})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var serr error
	if err := a.raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVERR, 1)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	send := func(to netip.Addr, n int) (int, error) {
		batch := a.TxBatch(n)
		for i := range batch {
			batch[i].Buf = append(batch[i].Buf[:0], byte(i))
			batch[i].Addr = to
		}
		return a.Transmit(batch)
	}
	refuse := func() {
		t.Helper()
		if n, err := send(nobody, 1); n != 1 || err != nil {
			t.Fatalf("send to %v = %d, %v", nobody, n, err)
		}
		time.Sleep(10 * time.Millisecond) // the ICMP error comes back
	}

	refuse()
	if n, err := send(lo2, 4); n != 4 || err != nil {
		t.Fatalf("Transmit after ICMP port unreachable = %d, %v; want 4 sent", n, err)
	}
	if s := a.Stats(); s.AsyncErrors != 1 || s.TxErrors != 0 {
		t.Errorf("after an error on send: %+v; want 1 async error, no tx error", s)
	}
	got := 0
	for end := time.Now().Add(5 * time.Second); got < 4 && time.Now().Before(end); {
		pkts, err := b.Receive(end)
		if err != nil {
			t.Fatal(err)
		}
		got += len(pkts)
	}
	if got != 4 {
		t.Fatalf("peer received %d of 4", got)
	}

	refuse()
	if pkts, err := a.Receive(time.Now().Add(20 * time.Millisecond)); err != nil || len(pkts) != 0 {
		t.Fatalf("Receive after ICMP port unreachable = %d, %v; want a timeout", len(pkts), err)
	}
	if s := a.Stats(); s.AsyncErrors != 2 {
		t.Errorf("after an error on receive: %+v; want 2 async errors", s)
	}
}
