package soft

import (
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
)

func udpDevices(b *testing.B, x, y string) (*Device, *Device) {
	ca, err := udp.Listen(netip.MustParseAddr(x), udp.Options{})
	if err != nil {
		b.Skip("udp:", err)
	}
	cb, err := udp.Listen(netip.MustParseAddr(y), udp.Options{})
	if err != nil {
		b.Skip("udp:", err)
	}
	a, _ := New(Options{Name: "a", Conn: ca})
	c, _ := New(Options{Name: "b", Conn: cb})
	b.Cleanup(func() { a.Close(); c.Close() })
	return a, c
}

// spin polls until a completion arrives; after 10 s it gives up with a
// zero WC. Unless tight, it yields the processor between polls.
func spin(cq verbs.CQ, wc []verbs.WC, tight bool) verbs.WC {
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; cq.Poll(wc[:1]) == 0; i++ {
		if !tight {
			runtime.Gosched() // the device drivers need the CPU too
		}
		if i%4096 == 0 && time.Now().After(deadline) {
			return verbs.WC{Status: verbs.WCGeneralErr}
		}
	}
	return wc[0]
}

// BenchmarkSendRoundTrip: 64-byte SEND ping-pong between two soft devices
// over UDP on loopback, beside BenchmarkUDPRoundTrip; its loops yield the
// processor between empty polls.
func BenchmarkSendRoundTrip(b *testing.B) { sendRoundTrip(b, false) }

// BenchmarkSendRoundTripTight is BenchmarkSendRoundTrip with loops that
// poll without ever yielding, as a program's naive loop does.
func BenchmarkSendRoundTripTight(b *testing.B) { sendRoundTrip(b, true) }

func sendRoundTrip(b *testing.B, tight bool) {
	da, db := udpDevices(b, "127.0.1.1", "127.0.1.2")
	x, y := newEnd(b, da, verbs.QPTRC, 4096), newEnd(b, db, verbs.QPTRC, 4096)
	connect(b, x, y)
	wy := make([]verbs.WC, 1)
	send := func(e *end) {
		e.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{{Addr: e.mr.Addr(), Length: 64, LKey: e.mr.LKey()}}}})
	}
	recv := func(e *end) {
		e.qp.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{{Addr: e.mr.Addr() + 1024, Length: 64, LKey: e.mr.LKey()}}}})
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // y echoes every message
		defer close(done)
		recv(y)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if y.cq.Poll(wy) == 0 {
				if !tight {
					runtime.Gosched()
				}
			} else if wy[0].Opcode == verbs.WCRecv {
				recv(y)
				send(y)
			}
		}
	}()
	wx := make([]verbs.WC, 1)
	n := 0
	for b.Loop() {
		recv(x)
		send(x)
		for got := 0; got < 2; got++ { // our send's completion and the echo
			if w := spin(x.cq, wx, tight); w.Status != verbs.WCSuccess {
				b.Fatalf("completion %+v", w)
			}
		}
		n++
	}
	close(stop)
	<-done
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(n), "µs/rtt")
	if testing.Verbose() {
		b.Logf("a %+v\nb %+v", da.Stats(), db.Stats())
	}
}

// BenchmarkUDPRoundTrip is the baseline: a 64+16-byte UDP ping-pong between
// two plain sockets on loopback.
func BenchmarkUDPRoundTrip(b *testing.B) {
	ca, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 2, 1)})
	if err != nil {
		b.Skip(err)
	}
	cb, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 2, 2)})
	if err != nil {
		b.Skip(err)
	}
	defer ca.Close()
	defer cb.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, addr, err := cb.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			cb.WriteToUDPAddrPort(buf[:n], addr)
		}
	}()
	msg := make([]byte, 80)
	buf := make([]byte, 2048)
	dst := cb.LocalAddr().(*net.UDPAddr).AddrPort()
	ca.SetReadDeadline(time.Now().Add(time.Minute))
	n := 0
	for b.Loop() {
		n++
		ca.WriteToUDPAddrPort(msg, dst)
		if _, _, err := ca.ReadFromUDPAddrPort(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(n), "µs/rtt")
}
