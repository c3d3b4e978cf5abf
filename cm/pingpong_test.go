package cm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

func gid(s string) verbs.GID { return verbs.GID(netip.MustParseAddr(s).As16()) }

// The wire GIDs are what gid_to_wire_gid prints for these GIDs on x86
// (htonl of each 32-bit word read in host order, %08x).
var wireGIDs = []struct {
	gid  string
	wire string
}{
	{"::", "00000000000000000000000000000000"},
	{"::ffff:10.99.0.2", "00000000000000000000ffff0a630002"},
	{"::ffff:192.0.2.10", "00000000000000000000ffffc000020a"},
	{"fe80::5054:ff:fe99:2", "fe80000000000000505400fffe990002"},
	{"2001:db8:1:2:3:4:5:6", "20010db8000100020003000400050006"},
}

func TestWireGID(t *testing.T) {
	for _, c := range wireGIDs {
		g := gid(c.gid)
		if got := string(AppendWireGID(nil, g)); got != c.wire {
			t.Errorf("AppendWireGID(%s) = %s, want %s", c.gid, got, c.wire)
		}
		back, err := ParseWireGID(c.wire)
		if err != nil || back != g {
			t.Errorf("ParseWireGID(%s) = %v, %v; want %s", c.wire, back, err, c.gid)
		}
		back, err = ParseWireGID(strings.ToUpper(c.wire))
		if err != nil || back != g {
			t.Errorf("ParseWireGID(upper %s) = %v, %v", c.wire, back, err)
		}
	}
	for _, bad := range []string{"", "0000", "00000000000000000000ffff0a63000", "00000000000000000000ffff0a6300021",
		"00000000000000000000ffff0a63000g", "0000000000000000000-ffff0a630002", "+0000000000000000000ffff0a630002"} {
		if _, err := ParseWireGID(bad); !errors.Is(err, ErrMessage) {
			t.Errorf("ParseWireGID(%q): err %v, want ErrMessage", bad, err)
		}
	}
}

func TestMessage(t *testing.T) {
	cases := []struct {
		d   Dest
		msg string
	}{
		{Dest{LID: 0, QPN: 0x11, PSN: 0x123456, GID: gid("::ffff:10.99.0.2")}, "0000:000011:123456:00000000000000000000ffff0a630002\x00"},
		{Dest{LID: 0xbeef, QPN: 0xffffff, PSN: 0, GID: gid("fe80::5054:ff:fe99:2")}, "beef:ffffff:000000:fe80000000000000505400fffe990002\x00"},
		{Dest{LID: 1, QPN: 0x4a2, PSN: 0xabc}, "0001:0004a2:000abc:00000000000000000000000000000000\x00"},
	}
	for _, c := range cases {
		b, err := c.d.AppendMessage(nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.msg || len(b) != MessageLen {
			t.Errorf("AppendMessage(%+v) = %q (%d bytes), want %q (%d)", c.d, b, len(b), c.msg, MessageLen)
		}
		d, err := ParseMessage(b)
		if err != nil || d != c.d {
			t.Errorf("ParseMessage(%q) = %+v, %v; want %+v", b, d, err, c.d)
		}
		// Without the NUL, and with garbage after it (the reader's buffer).
		if d, err := ParseMessage(b[:len(b)-1]); err != nil || d != c.d {
			t.Errorf("ParseMessage without NUL: %+v, %v", d, err)
		}
		if d, err := ParseMessage(append(append([]byte(nil), b...), "xyz:"...)); err != nil || d != c.d {
			t.Errorf("ParseMessage with bytes after the NUL: %+v, %v", d, err)
		}
	}
	if want := len("0000:000000:000000:00000000000000000000000000000000\x00"); MessageLen != want {
		t.Fatalf("MessageLen %d, want %d", MessageLen, want)
	}
	// sscanf("%x") takes any number of digits: accept short and upper-case
	// fields.
	d, err := ParseMessage([]byte("0:11:ABCDEF:00000000000000000000FFFF0A630002\x00"))
	if err != nil || d != (Dest{QPN: 0x11, PSN: 0xabcdef, GID: gid("::ffff:10.99.0.2")}) {
		t.Errorf("short fields: %+v, %v", d, err)
	}
	for _, bad := range []string{
		"", "\x00", "0000:000011:123456", "0000:000011:123456:00000000000000000000ffff0a630002:00",
		"0000::123456:00000000000000000000ffff0a630002", "000g:000011:123456:00000000000000000000ffff0a630002",
		"10000:000011:123456:00000000000000000000ffff0a630002", "0000:1000000:123456:00000000000000000000ffff0a630002",
		"0000:000011:1000000:00000000000000000000ffff0a630002", "0000:000011:123456:ffff0a630002",
		"0000:-00011:123456:00000000000000000000ffff0a630002",
	} {
		if _, err := ParseMessage([]byte(bad)); !errors.Is(err, ErrMessage) {
			t.Errorf("ParseMessage(%q): err %v, want ErrMessage", bad, err)
		}
	}
	for _, d := range []Dest{{QPN: 1 << 24}, {PSN: 1 << 24}} {
		if _, err := d.AppendMessage(nil); !errors.Is(err, ErrRange) {
			t.Errorf("AppendMessage(%+v): err %v, want ErrRange", d, err)
		}
	}
}

// TestFormatGID compares with glibc's inet_ntop(AF_INET6) (the values were
// printed by it).
func TestFormatGID(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"::", "::"},
		{"::ffff:10.99.0.2", "::ffff:10.99.0.2"},
		{"fe80::5054:ff:fe99:2", "fe80::5054:ff:fe99:2"},
		{"::1", "::1"},
		{"::10.0.0.1", "::10.0.0.1"},
		{"1:0:0:2::3", "1:0:0:2::3"},
		{"1:0:0:2:0:0:3:4", "1::2:0:0:3:4"},
		{"1:0:0:0:1:0:0:0", "1::1:0:0:0"},
		{"0:0:0:0:1:0:0:0", "::1:0:0:0"},
		{"::ffff:0:0", "::ffff:0.0.0.0"},
		{"0:0:0:0:0:1:0:0", "::1:0:0"},
		{"1:2:3:4:5:6:7:0", "1:2:3:4:5:6:7:0"},
		{"2001:db8::", "2001:db8::"},
	} {
		if got := FormatGID(gid(c.in)); got != c.want {
			t.Errorf("FormatGID(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	// Beyond IPv4-compatible addresses (::a.b.c.d), glibc and Go's netip
	// agree (RFC 5952): compare on random GIDs with many zero groups.
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		var g verbs.GID
		for w := 0; w < 8; w++ {
			if r.IntN(2) == 0 {
				g[2*w], g[2*w+1] = byte(r.IntN(256)), byte(r.IntN(3))
			}
		}
		a := netip.AddrFrom16(g)
		if bytes.Equal(g[:12], make([]byte, 12)) {
			continue
		}
		if got, want := FormatGID(g), a.String(); got != want {
			t.Fatalf("FormatGID(% x) = %s, netip says %s", g[:], got, want)
		}
	}
}

func TestDestString(t *testing.T) {
	d := Dest{QPN: 0x11, PSN: 0x2b3c4d, GID: gid("::ffff:10.0.0.1")}
	if got, want := d.String(), "LID 0x0000, QPN 0x000011, PSN 0x2b3c4d, GID ::ffff:10.0.0.1"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if !d.HasGID() || (Dest{}).HasGID() || (Dest{GID: gid("fe80::")}).HasGID() {
		t.Error("HasGID")
	}
}

// TestExchangeBytes checks the exact bytes and their order each way.
func TestExchangeBytes(t *testing.T) {
	client := Dest{QPN: 0x11, PSN: 0xaaaaaa, GID: gid("::ffff:10.0.0.1")}
	server := Dest{QPN: 0x12, PSN: 0xbbbbbb, GID: gid("::ffff:10.0.0.2")}
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	var seen []string
	done := make(chan error, 1)
	go func() {
		// A scripted server, as rc_pingpong's pp_server_exch_dest.
		buf := make([]byte, 64)
		n, err := io.ReadFull(s, buf[:MessageLen])
		if err != nil {
			done <- err
			return
		}
		seen = append(seen, string(buf[:n]))
		msg, _ := server.AppendMessage(nil)
		s.Write(msg)
		n, err = io.ReadFull(s, buf[:5])
		seen = append(seen, string(buf[:n]))
		done <- err
	}()
	got, err := ClientExchange(c, client)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got != server {
		t.Errorf("client got %+v, want %+v", got, server)
	}
	if want := []string{"0000:000011:aaaaaa:00000000000000000000ffff0a000001\x00", "done\x00"}; strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Errorf("server saw %q, want %q", seen, want)
	}

	// And the server side against a scripted client, with connect called
	// before the answer goes out.
	c2, s2 := net.Pipe()
	defer c2.Close()
	defer s2.Close()
	var order []string
	go func() {
		msg, _ := client.AppendMessage(nil)
		c2.Write(msg)
		buf := make([]byte, MessageLen)
		io.ReadFull(c2, buf)
		order = append(order, "answer "+string(buf))
		c2.Write([]byte("done\x00"))
	}()
	rem, err := ServerExchange(s2, server, func(r Dest) error {
		order = append(order, "connect")
		if r != client {
			t.Errorf("connect with %+v, want %+v", r, client)
		}
		return nil
	})
	if err != nil || rem != client {
		t.Fatalf("ServerExchange = %+v, %v", rem, err)
	}
	if len(order) != 2 || order[0] != "connect" || order[1] != "answer 0000:000012:bbbbbb:00000000000000000000ffff0a000002\x00" {
		t.Errorf("order %q", order)
	}
}

func TestServerConnectFails(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	boom := errors.New("boom")
	go func() {
		msg, _ := Dest{QPN: 1}.AppendMessage(nil)
		c.Write(msg)
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, _ := c.Read(make([]byte, 64))
		if n != 0 {
			t.Errorf("server answered %d bytes after its connect failed", n)
		}
		c.Close()
	}()
	if _, err := ServerExchange(s, Dest{QPN: 2}, func(Dest) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	s.Close()
}

func TestBadDone(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	go func() {
		msg, _ := Dest{QPN: 1}.AppendMessage(nil)
		c.Write(msg)
		io.ReadFull(c, make([]byte, MessageLen))
		c.Write([]byte("nope\x00"))
	}()
	if _, err := ServerExchange(s, Dest{QPN: 2}, nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("err %v, want ErrProtocol", err)
	}
}

// TestDialAccept runs both ends over TCP on loopback.
func TestDialAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := Dest{QPN: 0x11, PSN: 1, GID: gid("::ffff:127.0.0.1")}
	b := Dest{QPN: 0x22, PSN: 2, GID: gid("::ffff:127.0.0.2")}
	type res struct {
		d   Dest
		err error
	}
	ch := make(chan res, 1)
	go func() {
		d, err := Accept(ctx, ln, b, func(Dest) error { return nil })
		ch <- res{d, err}
	}()
	got, err := Dial(ctx, "127.0.0.1", port, a)
	if err != nil || got != b {
		t.Fatalf("Dial = %+v, %v", got, err)
	}
	r := <-ch
	if r.err != nil || r.d != a {
		t.Fatalf("Accept = %+v, %v", r.d, r.err)
	}

	// Accept gives up when its context ends.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := Accept(ctx2, ln, b, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept without a client: %v", err)
	}
}

// TestExchangeSRQ runs srq_pingpong's exchange: SRQMessages messages each
// way whatever the number of QPs. A scripted client as rdma-core's writes
// its QPs' addresses and then whatever its array holds (here garbage that
// is not even an address); the server parses only its own number.
func TestExchangeSRQ(t *testing.T) {
	clients := []Dest{{QPN: 0x11, PSN: 1, GID: gid("::ffff:10.0.0.1")}, {QPN: 0x12, PSN: 2, GID: gid("::ffff:10.0.0.1")}}
	servers := []Dest{{QPN: 0x21, PSN: 3, GID: gid("::ffff:10.0.0.2")}, {QPN: 0x22, PSN: 4, GID: gid("::ffff:10.0.0.2")}}
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	type answer struct {
		msgs []byte
		done []byte
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		var out []byte
		for _, d := range clients {
			out, _ = d.AppendMessage(out)
		}
		for i := len(clients); i < SRQMessages; i++ {
			junk := make([]byte, MessageLen)
			for j := range junk {
				junk[j] = byte('g' + i%7)
			}
			out = append(out, junk...)
		}
		if _, err := c.Write(out); err != nil {
			ch <- answer{err: err}
			return
		}
		msgs := make([]byte, SRQMessages*MessageLen)
		if _, err := io.ReadFull(c, msgs); err != nil {
			ch <- answer{err: err}
			return
		}
		_, err := c.Write([]byte(Done))
		ch <- answer{msgs: msgs, err: err}
	}()
	var connected []Dest
	got, err := ServerExchangeSRQ(s, servers, func(r []Dest) error { connected = r; return nil })
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	if len(got) != 2 || got[0] != clients[0] || got[1] != clients[1] || len(connected) != 2 {
		t.Errorf("server got %+v (connect with %+v), want %+v", got, connected, clients)
	}
	for i := 0; i < SRQMessages; i++ {
		d, err := ParseMessage(a.msgs[i*MessageLen : (i+1)*MessageLen])
		want := Dest{}
		if i < len(servers) {
			want = servers[i]
		}
		if err != nil || d != want {
			t.Fatalf("server's message %d: %+v, %v; want %+v", i, d, err, want)
		}
	}

	// Client against server, three QPs a side.
	c2, s2 := net.Pipe()
	defer c2.Close()
	defer s2.Close()
	three := append(servers, Dest{QPN: 0x23, PSN: 5, GID: gid("::ffff:10.0.0.2")})
	mine := append(clients, Dest{QPN: 0x13, PSN: 6, GID: gid("::ffff:10.0.0.1")})
	go func() {
		_, err := ServerExchangeSRQ(s2, three, nil)
		ch <- answer{err: err}
	}()
	got, err = ClientExchangeSRQ(c2, mine)
	if err != nil || len(got) != 3 || got[2] != three[2] {
		t.Fatalf("ClientExchangeSRQ = %+v, %v", got, err)
	}
	if a := <-ch; a.err != nil {
		t.Fatal(a.err)
	}
	if _, err := ClientExchangeSRQ(c2, make([]Dest, SRQMessages+1)); !errors.Is(err, ErrRange) {
		t.Errorf("more addresses than messages: %v", err)
	}
}
