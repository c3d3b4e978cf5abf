package cm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/goroce/goroce/verbs"
)

// PingpongPort is the TCP port rdma-core's pingpong examples listen on and
// connect to by default.
const PingpongPort = 18515

// MessageLen is the length of a pingpong address message: "LLLL:QQQQQQ:
// PPPPPP:" and 32 hex digits of GID, and the terminating NUL
// (sizeof "0000:000000:000000:00000000000000000000000000000000").
const MessageLen = 4 + 1 + 6 + 1 + 6 + 1 + 32 + 1

// Done is the client's last message in the pingpong exchange (sizeof "done":
// the NUL goes too).
const Done = "done\x00"

// Errors of the pingpong exchange.
var (
	// ErrMessage is matched by errors about a malformed address message.
	ErrMessage = errors.New("cm: malformed pingpong address message")
	// ErrRange is matched by errors about a value a message cannot carry
	// (a QPN or PSN wider than 24 bits).
	ErrRange = errors.New("cm: value out of range for a pingpong message")
	// ErrProtocol is matched by errors about the exchange itself: a short
	// message, no "done".
	ErrProtocol = errors.New("cm: pingpong exchange failed")
)

// Dest is one side's address in the pingpong exchange (rdma-core's struct
// pingpong_dest): its port's LID (0 on RoCE), its QP number and first send
// PSN, and its GID (all zero when the side runs without -g).
type Dest struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID verbs.GID
}

// String formats d as the tools print an address after "local address:" or
// "remote address:": "LID 0x0000, QPN 0x000011, PSN 0x2b3c4d, GID ::ffff:10.0.0.1".
func (d Dest) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", d.LID, d.QPN, d.PSN, FormatGID(d.GID))
}

// HasGID reports whether the GID's interface ID (its last 8 bytes) is
// non-zero: the test rc_pingpong and ud_pingpong make to decide whether the
// address handle is global (carries a GRH), which RoCE needs.
func (d Dest) HasGID() bool {
	for _, b := range d.GID[8:] {
		if b != 0 {
			return true
		}
	}
	return false
}

const hexDigits = "0123456789abcdef"

// AppendWireGID appends g as pingpong.c's gid_to_wire_gid writes it: 32
// lowercase hex digits, the GID's bytes in order.
func AppendWireGID(b []byte, g verbs.GID) []byte {
	for _, c := range g {
		b = append(b, hexDigits[c>>4], hexDigits[c&15])
	}
	return b
}

// ParseWireGID parses a GID written by gid_to_wire_gid: 32 hex digits (either
// case), as wire_gid_to_gid reads them, 8 digits (one 32-bit word) at a time.
func ParseWireGID(s string) (verbs.GID, error) {
	var g verbs.GID
	if len(s) != 32 {
		return g, fmt.Errorf("%w: GID %q is not 32 hex digits", ErrMessage, s)
	}
	for i := 0; i < 4; i++ {
		w, err := strconv.ParseUint(s[i*8:i*8+8], 16, 32)
		if err != nil {
			return g, fmt.Errorf("%w: GID %q is not 32 hex digits", ErrMessage, s)
		}
		g[i*4], g[i*4+1], g[i*4+2], g[i*4+3] = byte(w>>24), byte(w>>16), byte(w>>8), byte(w)
	}
	return g, nil
}

// AppendMessage appends d's address message, as the tools write it:
// sprintf("%04x:%06x:%06x:%s", lid, qpn, psn, wire gid) and its NUL,
// MessageLen bytes. A QPN or PSN wider than 24 bits is an error matching
// ErrRange (the tools would write a longer message than the peer reads).
func (d Dest) AppendMessage(b []byte) ([]byte, error) {
	if d.QPN > 0xFFFFFF || d.PSN > 0xFFFFFF {
		return b, fmt.Errorf("%w: QPN %#x, PSN %#x (24 bits each)", ErrRange, d.QPN, d.PSN)
	}
	b = appendHex(b, uint32(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, d.QPN, 6)
	b = append(b, ':')
	b = appendHex(b, d.PSN, 6)
	b = append(b, ':')
	b = AppendWireGID(b, d.GID)
	return append(b, 0), nil
}

func appendHex(b []byte, v uint32, width int) []byte {
	for i := width - 1; i >= 0; i-- {
		b = append(b, hexDigits[v>>(4*uint(i))&15])
	}
	return b
}

// ParseMessage parses an address message: "lid:qpn:psn:gid" in hex, as the
// tools read it with sscanf("%x:%x:%x:%s") and wire_gid_to_gid, ended by a
// NUL or by the end of b. It is stricter than sscanf: every field must be
// present and hex, the GID exactly 32 digits, the LID 16 bits and the QPN and
// PSN 24 bits. Errors match ErrMessage.
func ParseMessage(b []byte) (Dest, error) {
	var d Dest
	s := b
	for i, c := range b {
		if c == 0 {
			s = b[:i]
			break
		}
	}
	var fields [4][]byte
	n := 0
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ':' {
			if n == 4 {
				return d, fmt.Errorf("%w: %q has more than 4 fields", ErrMessage, s)
			}
			fields[n] = s[start:i]
			n++
			start = i + 1
		}
	}
	if n != 4 {
		return d, fmt.Errorf("%w: %q: want lid:qpn:psn:gid", ErrMessage, s)
	}
	var vals [3]uint64
	for i, bits := range [3]int{16, 24, 24} {
		f := fields[i]
		if len(f) == 0 || len(f) > 8 {
			return d, fmt.Errorf("%w: %q: field %d is not a hex number", ErrMessage, s, i+1)
		}
		v, err := strconv.ParseUint(string(f), 16, 32)
		if err != nil {
			return d, fmt.Errorf("%w: %q: field %d is not a hex number", ErrMessage, s, i+1)
		}
		if v >= 1<<bits {
			return d, fmt.Errorf("%w: %q: field %d wider than %d bits", ErrMessage, s, i+1, bits)
		}
		vals[i] = v
	}
	g, err := ParseWireGID(string(fields[3]))
	if err != nil {
		return d, err
	}
	return Dest{LID: uint16(vals[0]), QPN: uint32(vals[1]), PSN: uint32(vals[2]), GID: g}, nil
}

// FormatGID formats g as glibc's inet_ntop(AF_INET6) does, which is how the
// pingpong tools print GIDs: lowercase hex groups without leading zeros, the
// first longest run of two or more zero groups as "::", and the last 32 bits
// as a dotted IPv4 address after ::ffff: (IPv4-mapped) or :: with six zero
// groups (IPv4-compatible).
func FormatGID(g verbs.GID) string {
	var w [8]uint16
	for i := range w {
		w[i] = uint16(g[2*i])<<8 | uint16(g[2*i+1])
	}
	best, bestLen := -1, 0
	for i := 0; i < 8; {
		if w[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && w[j] == 0 {
			j++
		}
		if j-i > bestLen {
			best, bestLen = i, j-i
		}
		i = j
	}
	if bestLen < 2 {
		best, bestLen = -1, 0
	}
	b := make([]byte, 0, 46)
	for i := 0; i < 8; i++ {
		if best >= 0 && i >= best && i < best+bestLen {
			if i == best {
				b = append(b, ':')
			}
			continue
		}
		if i != 0 {
			b = append(b, ':')
		}
		if i == 6 && best == 0 && (bestLen == 6 || (bestLen == 5 && w[5] == 0xffff)) {
			for k := 12; k < 16; k++ {
				if k > 12 {
					b = append(b, '.')
				}
				b = strconv.AppendUint(b, uint64(g[k]), 10)
			}
			return string(b)
		}
		b = strconv.AppendUint(b, uint64(w[i]), 16)
	}
	if best >= 0 && best+bestLen == 8 {
		b = append(b, ':')
	}
	return string(b)
}

// SRQMessages is how many address messages ibv_srq_pingpong sends each
// way (its MAX_QP), whatever its number of QPs (-q): the first -q are its
// QPs', the rest carry whatever its array holds there.
const SRQMessages = 256

// ClientExchange runs the client side of the pingpong exchange on rw: it
// writes local's message, reads the server's and writes Done. It returns the
// server's address.
func ClientExchange(rw io.ReadWriter, local Dest) (Dest, error) {
	r, err := clientExchange(rw, []Dest{local}, 1)
	if err != nil {
		return Dest{}, err
	}
	return r[0], nil
}

// ClientExchangeSRQ is ClientExchange for ibv_srq_pingpong: SRQMessages
// messages each way, locals' first (zero addresses after them), and the
// first len(locals) of the server's returned (the rest read and ignored).
func ClientExchangeSRQ(rw io.ReadWriter, locals []Dest) ([]Dest, error) {
	return clientExchange(rw, locals, SRQMessages)
}

// appendMessages appends n address messages: locals', then zero addresses.
func appendMessages(locals []Dest, n int) ([]byte, error) {
	if len(locals) == 0 || len(locals) > n {
		return nil, fmt.Errorf("%w: %d addresses for %d messages", ErrRange, len(locals), n)
	}
	b := make([]byte, 0, n*MessageLen)
	for i := 0; i < n; i++ {
		var d Dest
		if i < len(locals) {
			d = locals[i]
		}
		var err error
		if b, err = d.AppendMessage(b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// readMessages reads n address messages and parses the first want.
func readMessages(r io.Reader, n, want int) ([]Dest, error) {
	buf := make([]byte, n*MessageLen)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("%w: reading the remote address: %w", ErrProtocol, err)
	}
	ds := make([]Dest, want)
	for i := range ds {
		var err error
		if ds[i], err = ParseMessage(buf[i*MessageLen : (i+1)*MessageLen]); err != nil {
			return nil, fmt.Errorf("address %d: %w", i, err)
		}
	}
	return ds, nil
}

func clientExchange(rw io.ReadWriter, locals []Dest, n int) ([]Dest, error) {
	msg, err := appendMessages(locals, n)
	if err != nil {
		return nil, err
	}
	if _, err := rw.Write(msg); err != nil {
		return nil, fmt.Errorf("%w: sending the local address: %w", ErrProtocol, err)
	}
	remote, err := readMessages(rw, n, len(locals))
	if err != nil {
		return nil, err
	}
	if _, err := rw.Write([]byte(Done)); err != nil {
		return nil, fmt.Errorf("%w: sending done: %w", ErrProtocol, err)
	}
	return remote, nil
}

// ServerExchange runs the server side of the pingpong exchange on rw: it
// reads the client's message, calls connect with the client's address (to
// bring the local QP to RTR and RTS: the client sends as soon as it has the
// answer), writes local's message and reads Done. If connect fails, the
// exchange stops there without answering, as the tools do, and its error is
// returned. It returns the client's address.
func ServerExchange(rw io.ReadWriter, local Dest, connect func(remote Dest) error) (Dest, error) {
	var conn func([]Dest) error
	if connect != nil {
		conn = func(r []Dest) error { return connect(r[0]) }
	}
	r, err := serverExchange(rw, []Dest{local}, 1, conn)
	if len(r) == 0 {
		return Dest{}, err
	}
	return r[0], err
}

// ServerExchangeSRQ is ServerExchange for ibv_srq_pingpong: SRQMessages
// messages each way (see ClientExchangeSRQ); connect gets the first
// len(locals) of the client's addresses.
func ServerExchangeSRQ(rw io.ReadWriter, locals []Dest, connect func(remote []Dest) error) ([]Dest, error) {
	return serverExchange(rw, locals, SRQMessages, connect)
}

func serverExchange(rw io.ReadWriter, locals []Dest, n int, connect func(remote []Dest) error) ([]Dest, error) {
	msg, err := appendMessages(locals, n)
	if err != nil {
		return nil, err
	}
	remote, err := readMessages(rw, n, len(locals))
	if err != nil {
		return nil, err
	}
	if connect != nil {
		if err := connect(remote); err != nil {
			return remote, err
		}
	}
	if _, err := rw.Write(msg); err != nil {
		return remote, fmt.Errorf("%w: sending the local address: %w", ErrProtocol, err)
	}
	done := make([]byte, len(Done))
	if _, err := io.ReadFull(rw, done); err != nil {
		return remote, fmt.Errorf("%w: reading done: %w", ErrProtocol, err)
	}
	if string(done) != Done {
		return remote, fmt.Errorf("%w: the client ended with %q, not %q", ErrProtocol, done, Done)
	}
	return remote, nil
}

// Listen opens the TCP listener of a pingpong server on port (0:
// PingpongPort), on every address, as the tools do.
func Listen(port int) (net.Listener, error) {
	if port == 0 {
		port = PingpongPort
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("cm: listen on port %d: %w", port, err)
	}
	return ln, nil
}

// acceptContext accepts one connection on ln, or fails when ctx ends first
// (what names what was awaited, for the error); ln stays usable either way.
func acceptContext(ctx context.Context, ln net.Listener, what string) (net.Conn, error) {
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	var a accepted
	select {
	case a = <-ch:
	case <-ctx.Done():
		d, ok := ln.(interface{ SetDeadline(time.Time) error })
		if ok {
			d.SetDeadline(time.Unix(1, 0))
		}
		if a = <-ch; a.err == nil {
			a.c.Close()
		}
		if ok {
			d.SetDeadline(time.Time{})
		}
		return nil, fmt.Errorf("cm: waiting for %s: %w", what, ctx.Err())
	}
	if a.err != nil {
		return nil, fmt.Errorf("cm: accept: %w", a.err)
	}
	return a.c, nil
}

// Accept waits for one client on ln (until ctx ends), runs ServerExchange
// with it and closes the connection. It does not close ln.
func Accept(ctx context.Context, ln net.Listener, local Dest, connect func(remote Dest) error) (Dest, error) {
	var r Dest
	err := accept(ctx, ln, func(c net.Conn) (err error) {
		r, err = ServerExchange(c, local, connect)
		return err
	})
	return r, err
}

// AcceptSRQ is Accept with ServerExchangeSRQ.
func AcceptSRQ(ctx context.Context, ln net.Listener, locals []Dest, connect func(remote []Dest) error) ([]Dest, error) {
	var r []Dest
	err := accept(ctx, ln, func(c net.Conn) (err error) {
		r, err = ServerExchangeSRQ(c, locals, connect)
		return err
	})
	return r, err
}

func accept(ctx context.Context, ln net.Listener, exchange func(net.Conn) error) error {
	c, err := acceptContext(ctx, ln, "a client")
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	return exchange(c)
}

// Dial connects to a pingpong server at host (a name or address) on port
// (0: PingpongPort), runs ClientExchange and closes the connection.
func Dial(ctx context.Context, host string, port int, local Dest) (Dest, error) {
	var r Dest
	err := dial(ctx, host, port, func(c net.Conn) (err error) {
		r, err = ClientExchange(c, local)
		return err
	})
	return r, err
}

// DialSRQ is Dial with ClientExchangeSRQ.
func DialSRQ(ctx context.Context, host string, port int, locals []Dest) ([]Dest, error) {
	var r []Dest
	err := dial(ctx, host, port, func(c net.Conn) (err error) {
		r, err = ClientExchangeSRQ(c, locals)
		return err
	})
	return r, err
}

func dial(ctx context.Context, host string, port int, exchange func(net.Conn) error) error {
	if port == 0 {
		port = PingpongPort
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("cm: couldn't connect to %s:%d: %w", host, port, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	return exchange(c)
}
