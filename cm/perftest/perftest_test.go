package perftest

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// The TCP payloads of one ib_write_bw run between two rdma_rxe guests
// (perftest 4.5-0.17, rdma-core 44, Linux 6.1), in order: what the client
// (10.99.0.3) and the server (10.99.0.2) wrote. The server's bandwidth report
// is whatever its uninitialised report held: ib_write_bw's server measures
// nothing and prints the client's report.
var wbwClient = []string{
	"362e3036000000000000000000000000",
	"00001000",
	"00000040",
	"3300",
	"303030303a303030313a3030303031313a3439313733383a30303030303237353a303030303535626332653665613030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30333a30303030303030303a00",
	"303030303a303030313a3030303031313a3439313733383a30303030303237353a303030303535626332653665613030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30333a30303030303030303a00",
	"303030303a303030313a3030303031313a3439313733383a30303030303237353a303030303535626332653665613030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30333a30303030303030303a00",
	"303030303a303030313a3030303031313a3439313733383a30303030303237353a303030303535626332653665613030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30333a30303030303030303a00",
	"0000000000004000",
	"0000000000000014",
	"4021844544889de9",
	"4018ac6ddae742ae",
	"3f39df418810eb54",
	"303030303a303030313a3030303031313a3439313733383a30303030303237353a303030303535626332653665613030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30333a30303030303030303a00",
	"646f6e6500",
}

var wbwServer = []string{
	"362e3036000000000000000000000000",
	"00001000",
	"00000040",
	"3300",
	"303030303a303030313a3030303031313a3930386535633a30303030303263623a303030303535626630653335333030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30323a30303030303030303a00",
	"303030303a303030313a3030303031313a3930386535633a30303030303263623a303030303535626630653335333030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30323a30303030303030303a00",
	"303030303a303030313a3030303031313a3930386535633a30303030303263623a303030303535626630653335333030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30323a30303030303030303a00",
	"303030303a303030313a3030303031313a3930386535633a30303030303263623a303030303535626630653335333030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30323a30303030303030303a00",
	"00007ffe0b083154",
	"00007f941db7311a",
	"0000000000000006",
	"00007ffe0b11f300",
	"00007ffe0b083154",
	"303030303a303030313a3030303031313a3930386535633a30303030303263623a303030303535626630653335333030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a36333a30303a30323a30303030303030303a00",
	"646f6e6500",
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gid(s string) verbs.GID { return verbs.GID(netip.MustParseAddr(s).As16()) }

var (
	wbwClientDest = Dest{LID: 0, OutReads: 1, QPN: 0x11, PSN: 0x491738, RKey: 0x275, VAddr: 0x55bc2e6ea000, GID: gid("::ffff:10.99.0.3")}
	wbwServerDest = Dest{LID: 0, OutReads: 1, QPN: 0x11, PSN: 0x908e5c, RKey: 0x2cb, VAddr: 0x55bf0e353000, GID: gid("::ffff:10.99.0.2")}
)

func TestKeyMsgGolden(t *testing.T) {
	for _, c := range []struct {
		msg  string
		dest Dest
	}{{wbwClient[4], wbwClientDest}, {wbwServer[4], wbwServerDest}} {
		b := unhex(t, c.msg)
		if len(b) != KeyMsgLen {
			t.Fatalf("captured key message is %d bytes", len(b))
		}
		d, err := ParseKeyMsg(b)
		if err != nil || d != c.dest {
			t.Errorf("ParseKeyMsg(%q) = %+v, %v; want %+v", b, d, err, c.dest)
		}
		out, err := c.dest.AppendKeyMsg(nil)
		if err != nil || !bytes.Equal(out, b) {
			t.Errorf("AppendKeyMsg(%+v) = %q, %v; want %q", c.dest, out, err, b)
		}
	}
	if got, want := wbwClientDest.String(), "LID 0000 QPN 0x0011 PSN 0x491738 RKey 0x000275 VAddr 0x0055bc2e6ea000"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got, want := wbwClientDest.Format(false, true), "LID 0000 QPN 0x0011 PSN 0x491738 OUT 0x01"; got != want {
		t.Errorf("Format(false, true) = %q, want %q", got, want)
	}
	if got, want := FormatGID(wbwClientDest.GID), "00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:03"; got != want {
		t.Errorf("FormatGID = %q, want %q", got, want)
	}
}

func TestParseKeyMsgErrors(t *testing.T) {
	good := string(unhex(t, wbwClient[4]))
	for _, c := range []struct{ name, msg string }{
		{"empty", ""},
		{"no GID", "0000:0001:000011:491738:00000275:000055bc2e6ea000:00000000"},
		{"one field short", strings.Replace(good, "00:00:00:00:", "00:00:00:", 1)},
		{"one field more", strings.Replace(good, "00:00:00:00:", "00:00:00:00:00:", 1)},
		{"not hex", strings.Replace(good, "491738", "49173g", 1)},
		{"empty field", strings.Replace(good, ":491738:", "::", 1)},
		{"QPN wider than 24 bits", strings.Replace(good, ":000011:", ":1000011:", 1)},
		{"GID byte wider than 8 bits", strings.Replace(good, ":ff:ff:", ":1ff:ff:", 1)},
		{"no final colon", strings.TrimSuffix(good, ":\x00")},
		{"vaddr wider than 64 bits", strings.Replace(good, ":000055bc2e6ea000:", ":1000055bc2e6ea000:", 1)},
	} {
		if d, err := ParseKeyMsg([]byte(c.msg)); !errors.Is(err, ErrMessage) {
			t.Errorf("%s: ParseKeyMsg(%q) = %+v, %v; want an error matching ErrMessage", c.name, c.msg, d, err)
		}
	}
	if _, err := (Dest{QPN: 1 << 24}).AppendKeyMsg(nil); !errors.Is(err, ErrRange) {
		t.Errorf("AppendKeyMsg with a 25-bit QPN: %v, want ErrRange", err)
	}
}

// listen opens a TCP listener on this package's loopback address.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.6.1:0")
	if err != nil {
		t.Skipf("no loopback address 127.0.6.1: %v", err)
	}
	return ln
}

// writeBWFlow runs ib_write_bw's exchange on c as the given side would, with
// the values of the captured run, and returns what it read from the peer.
func writeBWFlow(c *Conn, mine Dest, rep Report) (peer Dest, peerRep Report, err error) {
	v, num, err := c.ExchangeVersions(Version)
	if err != nil {
		return
	}
	if v != "6.06" || num != 6.06 {
		return peer, peerRep, errors.New("version " + v)
	}
	cb, cl, err := c.ExchangeSysData(4096, 64)
	if err != nil {
		return
	}
	if cb != 4096 || cl != 64 {
		return peer, peerRep, errors.New("sys data")
	}
	mtu, err := c.ExchangeMTU(verbs.MTU1024)
	if err != nil {
		return
	}
	if mtu != verbs.MTU1024 {
		return peer, peerRep, errors.New("mtu")
	}
	for i := 0; i < 4; i++ { // keys, keys again once connected, sync after RTR, sync after the test
		if peer, err = c.HandShake(mine); err != nil {
			return
		}
	}
	if peerRep, err = c.ExchangeReports(rep); err != nil {
		return
	}
	err = c.Finish(mine, time.Second)
	return
}

// replay plays one side of the captured exchange on conn: for each message
// of mine, the order of ib_write_bw's side (the client writes first), and
// returns everything the other side sent.
func replay(conn net.Conn, mine []string, client bool) ([]byte, error) {
	var got bytes.Buffer
	theirs := append([]string(nil), wbwServer...)
	if !client {
		theirs = append([]string(nil), wbwClient...)
	}
	for i, m := range mine {
		b, _ := hex.DecodeString(m)
		n := len(b)
		if i == len(mine)-1 { // "done": both write, neither waits
			if _, err := conn.Write(b); err != nil {
				return got.Bytes(), err
			}
			io.Copy(&got, conn)
			return got.Bytes(), nil
		}
		in := make([]byte, len(theirs[i])/2)
		if client {
			if _, err := conn.Write(b); err != nil {
				return got.Bytes(), err
			}
		}
		if _, err := io.ReadFull(conn, in); err != nil {
			return got.Bytes(), err
		}
		got.Write(in)
		if !client {
			if _, err := conn.Write(b[:n]); err != nil {
				return got.Bytes(), err
			}
		}
	}
	return got.Bytes(), nil
}

func join(t *testing.T, msgs []string) []byte {
	var b []byte
	for _, m := range msgs {
		b = append(b, unhex(t, m)...)
	}
	return b
}

// garbage is the captured server's report, whose fields are arbitrary bits.
func garbage(t *testing.T) Report {
	u := func(i int) uint64 {
		b := unhex(t, wbwServer[i])
		var v uint64
		for _, c := range b {
			v = v<<8 | uint64(c)
		}
		return v
	}
	return Report{Size: u(8), Iters: u(9), BWPeak: math.Float64frombits(u(10)), BWAvg: math.Float64frombits(u(11)), MsgRate: math.Float64frombits(u(12))}
}

var clientReport = Report{Size: 16384, Iters: 20, BWPeak: 8.758340970684872, BWAvg: 6.168387813916224, MsgRate: 0.0003947768200906383}

// TestServerAgainstCapturedClient has the captured ib_write_bw client's bytes
// sent to a Conn acting as the server over TCP, and checks that the server
// answers with exactly the captured server's bytes and reads the client's
// values.
func TestServerAgainstCapturedClient(t *testing.T) {
	ln := listen(t)
	type res struct {
		got []byte
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		got, err := replay(c, wbwClient, true)
		ch <- res{got, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Accept(ctx, ln)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	peer, rep, err := writeBWFlow(c, wbwServerDest, garbage(t))
	if err != nil {
		t.Fatal(err)
	}
	if peer != wbwClientDest || rep != clientReport {
		t.Errorf("server read %+v and %+v; want %+v and %+v", peer, rep, wbwClientDest, clientReport)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := join(t, wbwServer); !bytes.Equal(r.got, want) {
		t.Errorf("the server sent\n%q\nwant\n%q", r.got, want)
	}
}

// TestClientAgainstCapturedServer is the other way round: Conn as the client
// against the captured server's bytes.
func TestClientAgainstCapturedServer(t *testing.T) {
	ln := listen(t)
	type res struct {
		got []byte
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		got, err := replay(c, wbwServer, false)
		ch <- res{got, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	var p int
	for _, d := range port {
		p = p*10 + int(d-'0')
	}
	c, err := Dial(ctx, "127.0.6.1", p)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	peer, rep, err := writeBWFlow(c, wbwClientDest, clientReport)
	if err != nil {
		t.Fatal(err)
	}
	if g := garbage(t); peer != wbwServerDest || math.Float64bits(rep.BWAvg) != math.Float64bits(g.BWAvg) || rep.Size != g.Size {
		t.Errorf("client read %+v and %+v; want %+v and %+v", peer, rep, wbwServerDest, g)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := join(t, wbwClient); !bytes.Equal(r.got, want) {
		t.Errorf("the client sent\n%q\nwant\n%q", r.got, want)
	}
}

// pipe returns the two sides of a TCP connection on loopback.
func pipe(t *testing.T) (client, server *Conn) {
	ln := listen(t)
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc := <-ch
	if sc == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { cc.Close(); sc.Close() })
	cc.SetDeadline(time.Now().Add(10 * time.Second))
	sc.SetDeadline(time.Now().Add(10 * time.Second))
	return NewConn(cc, true), NewConn(sc, false)
}

func TestNegotiation(t *testing.T) {
	c, s := pipe(t)
	done := make(chan error, 1)
	go func() {
		if _, _, err := s.ExchangeSysData(8192, 64); err != nil {
			done <- err
			return
		}
		_, err := s.ExchangeMTU(verbs.MTU1024)
		done <- err
	}()
	cb, cl, err := c.ExchangeSysData(4096, 128)
	if err != nil || cb != 8192 || cl != 128 {
		t.Errorf("ExchangeSysData = %d, %d, %v; want the larger of each: 8192, 128", cb, cl, err)
	}
	mtu, err := c.ExchangeMTU(verbs.MTU4096)
	if err != nil || mtu != verbs.MTU1024 {
		t.Errorf("ExchangeMTU = %v, %v; want the smaller, 1024", mtu, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestBadPeer feeds malformed steps to each method: each ends with an error,
// none panics.
func TestBadPeer(t *testing.T) {
	for _, c := range []struct {
		name string
		peer []byte
		run  func(*Conn) error
		want error
	}{
		{"old version", append([]byte("5.60"), make([]byte, 12)...), func(c *Conn) error { _, _, err := c.ExchangeVersions(Version); return err }, ErrVersion},
		{"no version", make([]byte, 16), func(c *Conn) error { _, _, err := c.ExchangeVersions(Version); return err }, ErrVersion},
		{"MTU 9", []byte("9\x00"), func(c *Conn) error { _, err := c.ExchangeMTU(verbs.MTU1024); return err }, ErrMessage},
		{"MTU in bytes", []byte("10"), func(c *Conn) error { _, err := c.ExchangeMTU(verbs.MTU1024); return err }, ErrMessage},
		{"negative cycle buffer", []byte{0xff, 0xff, 0xff, 0xff}, func(c *Conn) error { _, _, err := c.ExchangeSysData(4096, 64); return err }, ErrMessage},
		{"garbage keys", bytes.Repeat([]byte{'z'}, KeyMsgLen), func(c *Conn) error { _, err := c.HandShake(wbwClientDest); return err }, ErrMessage},
		{"truncated keys", []byte("0000:0001:"), func(c *Conn) error { _, err := c.HandShake(wbwClientDest); return err }, io.ErrUnexpectedEOF},
		{"truncated report", []byte{0, 0, 0}, func(c *Conn) error { _, err := c.ExchangeReports(clientReport); return err }, io.ErrUnexpectedEOF},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, sv := pipe(t)
			go func() {
				io.ReadFull(sv.c, make([]byte, 1)) // let the client write first
				sv.c.Write(c.peer)
				sv.c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, sv.c)
			}()
			if err := c.run(cl); !errors.Is(err, c.want) {
				t.Errorf("error %v, want one matching %v", err, c.want)
			}
		})
	}
	if _, err := (&Conn{}).ExchangeMTU(0); !errors.Is(err, ErrRange) {
		t.Errorf("ExchangeMTU(0): %v, want ErrRange", err)
	}
}
