//go:build linux

package udp

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/pollwait"
)

// epollWatches reports whether the kernel lists the Conn's socket in its
// receive epoll instance (/proc/self/fdinfo of the instance: a "tfd:" line
// per descriptor it watches).
func epollWatches(t *testing.T, c *Conn) bool {
	t.Helper()
	var sock, ep uintptr
	if err := c.raw.Control(func(fd uintptr) { sock = fd }); err != nil {
		t.Fatal(err)
	}
	if err := c.rxEp.Raw().Control(func(fd uintptr) { ep = fd }); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", ep))
	if err != nil {
		t.Skipf("fdinfo of an epoll instance: %v", err)
	}
	defer f.Close()
	want := fmt.Sprintf("tfd: %8d ", sock)
	found := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), want) {
			found = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return found
}

// listenLoopback opens a Conn on 127.0.0.1 and a free port, closed at the
// end of the test.
func listenLoopback(t *testing.T) *Conn {
	t.Helper()
	c, err := Listen(netip.MustParseAddr("127.0.0.1"), Options{Port: AnyPort})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// loopbackSender returns a function that sends c a 4-byte datagram
// starting with b from a socket of its own.
func loopbackSender(t *testing.T, c *Conn) func(b byte) {
	peer, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(c.LocalAddrPort()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	return func(b byte) {
		t.Helper()
		if _, err := peer.Write([]byte{b, 1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
}

// awaitJoined waits until c's socket is in its epoll instance (a Receive
// waits), for at most 5 s.
func awaitJoined(t *testing.T, c *Conn) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !epollWatches(t, c) {
		if time.Now().After(deadline) {
			t.Fatal("a waiting Receive's socket is not in its epoll instance")
		}
		time.Sleep(time.Millisecond)
	}
}

// The socket is in an epoll instance only while Receive waits, or has
// waited lately: a polled socket leaves it after IdlePolls polls, so that
// the datagrams queued to it run no epoll wake-up. A datagram that comes
// while a Receive waits ends the wait; one queued before a wait begins is
// read at once.
func TestSocketJoinsEpollOnlyToWait(t *testing.T) {
	c := listenLoopback(t)
	send := loopbackSender(t, c)
	if epollWatches(t, c) {
		t.Fatal("a new Conn's socket is in its epoll instance")
	}
	// Polls that find nothing do not join.
	for range 3 {
		if pkts, err := c.Receive(packetio.PollDeadline()); err != nil || len(pkts) != 0 {
			t.Fatalf("poll: %d packets, %v", len(pkts), err)
		}
	}
	if epollWatches(t, c) {
		t.Fatal("the socket joined its epoll instance for a poll")
	}

	type result struct {
		pkts []packetio.Packet
		err  error
	}
	got := make(chan result, 1)
	go func() {
		pkts, err := c.Receive(time.Now().Add(10 * time.Second))
		got <- result{pkts, err}
	}()
	awaitJoined(t, c)
	send(0xA1)
	select {
	case r := <-got:
		if r.err != nil || len(r.pkts) != 1 || r.pkts[0].Buf[0] != 0xA1 {
			t.Fatalf("waiting Receive: %d packets, %v", len(r.pkts), r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a datagram did not end the wait")
	}

	// It stays in while polled, up to IdlePolls polls.
	for i := range pollwait.IdlePolls - 1 {
		if _, err := c.Receive(packetio.PollDeadline()); err != nil {
			t.Fatal(err)
		}
		if !epollWatches(t, c) {
			t.Fatalf("the socket left its epoll instance after %d polls, want %d", i+1, pollwait.IdlePolls)
		}
	}
	if _, err := c.Receive(packetio.PollDeadline()); err != nil {
		t.Fatal(err)
	}
	if epollWatches(t, c) {
		t.Fatalf("the socket is still in its epoll instance after %d polls", pollwait.IdlePolls)
	}

	// A datagram queued while the socket is out: the next waiting Receive
	// returns it without waiting.
	send(0xA2)
	time.Sleep(10 * time.Millisecond) // loopback delivers within the send; margin only
	start := time.Now()
	pkts, err := c.Receive(time.Now().Add(10 * time.Second))
	if err != nil || len(pkts) != 1 || pkts[0].Buf[0] != 0xA2 {
		t.Fatalf("Receive of a queued datagram: %d packets, %v", len(pkts), err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("Receive of a queued datagram waited %v", waited)
	}
}

// A socket whose polls take IdleDatagrams datagrams after a wait leaves its
// epoll instance before IdlePolls polls: each datagram queued to it while
// in costs its sender a wake-up that nobody waits for.
func TestSocketLeavesEpollAfterDatagrams(t *testing.T) {
	c := listenLoopback(t)
	send := loopbackSender(t, c)
	// poll polls until it has the datagram just sent (loopback queues it
	// within the send; the retries are margin, far fewer than IdlePolls).
	poll := func(b byte) {
		t.Helper()
		for range 10 {
			pkts, err := c.Receive(packetio.PollDeadline())
			if err != nil {
				t.Fatal(err)
			}
			if len(pkts) == 1 && pkts[0].Buf[0] == b {
				return
			}
			if len(pkts) != 0 {
				t.Fatalf("poll: %d packets", len(pkts))
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("datagram %#x not received", b)
	}
	got := make(chan error, 1)
	go func() {
		pkts, err := c.Receive(time.Now().Add(10 * time.Second))
		if err == nil && len(pkts) != 1 {
			err = fmt.Errorf("%d packets", len(pkts))
		}
		got <- err
	}()
	awaitJoined(t, c)
	send(0xB0)
	if err := <-got; err != nil {
		t.Fatalf("waiting Receive: %v", err)
	}
	for i := range pollwait.IdleDatagrams - 1 {
		send(byte(i))
		poll(byte(i))
		if !epollWatches(t, c) {
			t.Fatalf("the socket left its epoll instance after %d datagrams polled, want %d", i+1, pollwait.IdleDatagrams)
		}
	}
	send(0xBF)
	poll(0xBF)
	if epollWatches(t, c) {
		t.Fatalf("the socket is still in its epoll instance after %d datagrams polled", pollwait.IdleDatagrams)
	}
}

// Receive and Transmit allocate nothing on the way into and out of a wait
// (Join, Leave and the wait's callbacks are bound once).
func TestEpollWaitNoAllocs(t *testing.T) {
	c := listenLoopback(t)
	allocs := testing.AllocsPerRun(50, func() {
		// A wait that times out at once, then IdlePolls polls: the socket
		// joins and leaves its epoll instance each run.
		if _, err := c.Receive(time.Now().Add(50 * time.Microsecond)); err != nil {
			t.Fatal(err)
		}
		for range pollwait.IdlePolls {
			if _, err := c.Receive(packetio.PollDeadline()); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations a wait and its polls, want 0", allocs)
	}
}
