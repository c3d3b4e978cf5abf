//go:build linux

package netns

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseQdiscStats(t *testing.T) {
	for _, tt := range []struct {
		name, out string
		want      QdiscStats
		bad       bool
	}{
		{"tbf", "qdisc tbf 8001: root refcnt 2 rate 500Mbit burst 32Kb lat 1.0ms \n Sent 1296 bytes 12 pkt (dropped 3, overlimits 7 requeues 0) \n backlog 0b 0p requeues 0\n",
			QdiscStats{Kind: "tbf", SentBytes: 1296, SentPackets: 12, Dropped: 3, Overlimits: 7}, false},
		{"child first", "qdisc pfifo 10: parent 1:1 limit 10p\n Sent 5 bytes 1 pkt (dropped 0, overlimits 0 requeues 0)\nqdisc tbf 1: root refcnt 2 rate 1Mbit\n Sent 9 bytes 2 pkt (dropped 1, overlimits 2 requeues 0)\n",
			QdiscStats{Kind: "tbf", SentBytes: 9, SentPackets: 2, Dropped: 1, Overlimits: 2}, false},
		{"noqueue", "qdisc noqueue 0: root refcnt 2 \n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)\n", QdiscStats{Kind: "noqueue"}, false},
		{"no counters", "qdisc noqueue 0: root refcnt 2\n", QdiscStats{}, true},
		{"bad number", "qdisc tbf 1: root\n Sent x bytes 1 pkt (dropped 0, overlimits 0 requeues 0)\n", QdiscStats{}, true},
	} {
		got, err := parseQdiscStats([]byte(tt.out))
		if (err != nil) != tt.bad || (!tt.bad && got != tt.want) {
			t.Errorf("%s: got %+v, %v; want %+v (error %v)", tt.name, got, err, tt.want, tt.bad)
		}
	}
}

// A router's link with a token bucket and a CE-marking rule far below its
// rate: a burst of ECT(0) datagrams through it is queued, partly dropped
// and partly marked, and the receiver sees the marks.
func TestTBFAndCEMark(t *testing.T) {
	RequireTool(t, "tc")
	RequireTool(t, "nft")
	r := NewRouter(t, RouterOptions{Hosts: 2})
	dev := r.RouterLinks[1]
	if err := r.Router.SetTBF(dev, 20e6, 16<<10, 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := r.Router.SetCEMark(dev, 1000, 8); err != nil {
		t.Fatal(err)
	}
	tx := listenUDPIn(t, r.Hosts[0], &net.UDPAddr{IP: r.HostAddrs[0].AsSlice()})
	rx := listenUDPIn(t, r.Hosts[1], &net.UDPAddr{IP: r.HostAddrs[1].AsSlice(), Port: 7001})
	for _, s := range []struct {
		c        *net.UDPConn
		opt, val int
	}{{tx, unix.IP_TOS, 0x02}, {rx, unix.IP_RECVTOS, 1}} {
		raw, err := s.c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var serr error
		if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, s.opt, s.val) }); err != nil || serr != nil {
			t.Fatal(err, serr)
		}
	}
	const n = 300
	msg := make([]byte, 1000)
	to := &net.UDPAddr{IP: r.HostAddrs[1].AsSlice(), Port: 7001}
	for range n {
		if _, err := tx.WriteToUDP(msg, to); err != nil {
			t.Fatal(err)
		}
	}
	got, ce := 0, 0
	buf, oob := make([]byte, 2048), make([]byte, 128)
	for got < n {
		rx.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, oobn, _, _, err := rx.ReadMsgUDP(buf, oob)
		if err != nil {
			break // the rest was dropped
		}
		got++
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) > 0 && m.Data[0]&3 == 3 {
				ce++
			}
		}
	}
	st, err := r.Router.QdiscStats(dev)
	if err != nil {
		t.Fatal(err)
	}
	marked, err := r.Router.CEMarked(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d datagrams arrived, %d CE; router: %d marked, qdisc %+v", got, n, ce, marked, st)
	if st.Kind != "tbf" || st.SentPackets == 0 {
		t.Errorf("qdisc %+v: want tbf having sent packets", st)
	}
	if got == 0 || ce == 0 || marked == 0 || uint64(ce) > marked {
		t.Errorf("%d datagrams arrived, %d CE, %d marked: want some, some CE, at least as many marked", got, ce, marked)
	}
	if err := r.Router.SetCEMark(dev, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Router.CEMarked(dev); err == nil {
		t.Error("the marking rule is still there after SetCEMark(dev, 0, 0)")
	}
	if err := r.Router.SetTBF(dev, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Router.QdiscStats(dev); err != nil || st.Kind == "tbf" {
		t.Errorf("after SetTBF(dev, 0, 0, 0): %+v, %v", st, err)
	}
}

// A burst into a slow token bucket waits in its queue: Backlog reads the
// bytes and packets queued right after the burst, and nothing once the
// bucket has let them out.
func TestBacklog(t *testing.T) {
	RequireTool(t, "tc")
	r := NewRouter(t, RouterOptions{Hosts: 2})
	dev := r.RouterLinks[1]
	// 1 Mbit/s: 20 datagrams of 1,000 bytes take 160 ms to leave.
	if err := r.Router.SetTBF(dev, 1e6, 1600, 64<<10); err != nil {
		t.Fatal(err)
	}
	b, err := r.Router.Backlog(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if n, p, err := b.Read(); err != nil || n != 0 || p != 0 {
		t.Fatalf("idle queue: %d bytes, %d packets, %v; want 0, 0", n, p, err)
	}
	tx := listenUDPIn(t, r.Hosts[0], &net.UDPAddr{IP: r.HostAddrs[0].AsSlice()})
	to := &net.UDPAddr{IP: r.HostAddrs[1].AsSlice(), Port: 7001}
	for range 20 {
		if _, err := tx.WriteToUDP(make([]byte, 1000), to); err != nil {
			t.Fatal(err)
		}
	}
	n, p, err := b.Read()
	if err != nil || p < 10 || n < 10*1000 {
		t.Errorf("after a burst of 20 x 1,000 bytes into 1 Mbit/s: %d bytes, %d packets queued, %v; want at least 10 packets of 1,000 bytes", n, p, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if n, p, err = b.Read(); err != nil {
			t.Fatal(err)
		}
	}
	if n != 0 || p != 0 {
		t.Errorf("5 s after the burst: %d bytes, %d packets queued, want 0", n, p)
	}
}

// listenUDPIn opens a UDP socket on addr in ns, closed when the test ends.
func listenUDPIn(t *testing.T, ns *NS, addr *net.UDPAddr) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	if err := ns.Do(func() (err error) {
		c, err = net.ListenUDP("udp4", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
