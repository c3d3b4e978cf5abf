package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Port is the TCP port perftest listens on and connects to by default.
const Port = 18515

// Sizes of the exchange's messages.
const (
	VersionLen = 16  // the version string, NUL-padded (MAX_VERSION)
	KeyMsgLen  = 108 // a key message with its GID and NUL (KEY_MSG_SIZE_GID)
	ReportLen  = 8   // one field of a bandwidth report
	mtuLen     = 2   // "%d" of the MTU enum and its NUL (sizeof(char[2]))
)

// Version is the version string goroce announces: perftest 4.5-0.17's
// (its configure.ac says 6.06). Peers refuse versions below 5.70.
const Version = "6.06"

// MinVersion is the oldest peer version this exchange speaks: perftest 4.5
// refuses older ones (check_version_compatibility), whose reports and MTU
// messages differ.
const MinVersion = 5.70

// Done is the last message of both sides ("done" and its NUL).
const Done = "done\x00"

// Errors of the exchange.
var (
	// ErrMessage is matched by errors about a malformed message.
	ErrMessage = errors.New("perftest: malformed message")
	// ErrVersion is matched by errors about a peer version this exchange
	// does not speak.
	ErrVersion = errors.New("perftest: incompatible version")
	// ErrRange is matched by errors about a value a message cannot carry.
	ErrRange = errors.New("perftest: value out of range")
)

// Dest is one QP's side of the key exchange (perftest's struct
// pingpong_dest): the port's LID (0 on RoCE), the READs and atomics it
// accepts outstanding (out_reads, which the peer uses as its max_rd_atomic),
// the QP number and first PSN, the R_Key and address of the memory the peer
// may access, the GID and the SRQ number (XRC and DC only; 0 otherwise).
type Dest struct {
	LID      uint16
	OutReads uint16
	QPN      uint32
	PSN      uint32
	RKey     uint32
	VAddr    uint64
	GID      verbs.GID
	SRQN     uint32
}

const hexDigits = "0123456789abcdef"

func appendHex(b []byte, v uint64, width int) []byte {
	for i := width - 1; i >= 0; i-- {
		b = append(b, hexDigits[v>>(4*uint(i))&15])
	}
	return b
}

// AppendKeyMsg appends d's key message as ethernet_write_keys writes it
// (KEY_PRINT_FMT_GID and the NUL): KeyMsgLen bytes. A QPN or PSN wider than
// 24 bits is an error matching ErrRange: perftest would print a longer
// message than its peer reads.
func (d Dest) AppendKeyMsg(b []byte) ([]byte, error) {
	if d.QPN > 0xFFFFFF || d.PSN > 0xFFFFFF {
		return b, fmt.Errorf("%w: QPN %#x, PSN %#x (24 bits each)", ErrRange, d.QPN, d.PSN)
	}
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.OutReads), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.RKey), 8)
	b = append(b, ':')
	b = appendHex(b, d.VAddr, 16)
	b = append(b, ':')
	for _, c := range d.GID {
		b = append(b, hexDigits[c>>4], hexDigits[c&15], ':')
	}
	b = appendHex(b, uint64(d.SRQN), 8)
	return append(b, ':', 0), nil
}

// ParseKeyMsg parses a key message: colon-separated hex fields (lid,
// out_reads, qpn, psn, rkey, vaddr, 16 GID bytes, srqn), ended by a NUL or by
// the end of b, as ethernet_read_keys reads them with strtol. It is stricter
// than perftest: every field must be present and hex and fit its type, and
// the QPN and PSN 24 bits. Errors match ErrMessage.
func ParseKeyMsg(b []byte) (Dest, error) {
	var d Dest
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	fields := bytes.Split(b, []byte{':'})
	// 6 fields, 16 GID bytes, srqn and the empty tail after the last ':'.
	if len(fields) != 6+16+1+1 || len(fields[len(fields)-1]) != 0 {
		return d, fmt.Errorf("%w: key message %q: want 23 colon-terminated hex fields", ErrMessage, b)
	}
	num := func(i, bits int) (uint64, error) {
		f := fields[i]
		if len(f) == 0 || len(f) > 16 {
			return 0, fmt.Errorf("%w: key message %q: field %d is not a hex number", ErrMessage, b, i+1)
		}
		v, err := strconv.ParseUint(string(f), 16, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: key message %q: field %d is not a hex number", ErrMessage, b, i+1)
		}
		if bits < 64 && v >= 1<<bits {
			return 0, fmt.Errorf("%w: key message %q: field %d wider than %d bits", ErrMessage, b, i+1, bits)
		}
		return v, nil
	}
	var vals [7]uint64
	var err error
	for i, bits := range [6]int{16, 16, 24, 24, 32, 64} {
		if vals[i], err = num(i, bits); err != nil {
			return d, err
		}
	}
	for i := range d.GID {
		v, err := num(6+i, 8)
		if err != nil {
			return d, err
		}
		d.GID[i] = byte(v)
	}
	if vals[6], err = num(22, 32); err != nil {
		return d, err
	}
	d.LID, d.OutReads, d.QPN, d.PSN = uint16(vals[0]), uint16(vals[1]), uint32(vals[2]), uint32(vals[3])
	d.RKey, d.VAddr, d.SRQN = uint32(vals[4]), vals[5], uint32(vals[6])
	return d, nil
}

// String formats d as perftest prints an address (BASIC_ADDR_FMT, RDMA_FMT
// and, with out, READ_FMT): "LID 0000 QPN 0x0011 PSN 0x491738 RKey
// 0x000275 VAddr 0x0055bc2e6ea000". It is the part after " local address: ".
func (d Dest) String() string { return d.Format(true, false) }

// Format formats d as perftest does for a test of the given kind: rdma
// (WRITE, READ, atomics) adds the R_Key and address, out (READ, atomics)
// the outstanding reads, which perftest prints before them.
func (d Dest) Format(rdma, out bool) string {
	b := make([]byte, 0, 96)
	b = append(b, "LID "...)
	b = appendAltHex(b, uint64(d.LID), 4)
	b = append(b, " QPN "...)
	b = appendAltHex(b, uint64(d.QPN), 6)
	b = append(b, " PSN "...)
	b = appendAltHex(b, uint64(d.PSN), 6)
	if out {
		b = append(b, " OUT "...)
		b = appendAltHex(b, uint64(d.OutReads), 4)
	}
	if rdma {
		b = append(b, " RKey "...)
		b = appendAltHex(b, uint64(d.RKey), 8)
		b = append(b, " VAddr "...)
		b = appendAltHex(b, d.VAddr, 16)
	}
	return string(b)
}

// appendAltHex appends v as C's printf("%#0<width>x") does: the "0x" counts
// in the width, and zero has no prefix.
func appendAltHex(b []byte, v uint64, width int) []byte {
	digits := strconv.FormatUint(v, 16)
	if v != 0 {
		b = append(b, "0x"...)
		width -= 2
	}
	for i := len(digits); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, digits...)
}

// FormatGID formats a GID as perftest prints it (PERF_GID_FMT): 16 bytes in
// decimal, two digits at least, colon-separated.
func FormatGID(g verbs.GID) string {
	b := make([]byte, 0, 64)
	for i, c := range g {
		if i > 0 {
			b = append(b, ':')
		}
		if c < 10 {
			b = append(b, '0')
		}
		b = strconv.AppendUint(b, uint64(c), 10)
	}
	return string(b)
}

// Report is a bandwidth report as xchg_bw_reports exchanges it (struct
// bw_report_data): message size, iterations, peak and average bandwidth in
// the unit of the table (MB/sec, or Gb/sec with --report_gbits) and the
// message rate in Mpps.
type Report struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64
	BWAvg   float64
	MsgRate float64
}

// Conn is one side of the exchange: over a stream connection (NewConn,
// Dial, Accept) or, as perftest's -R, over an RC connection made through
// rdma_cm (DialCM, AcceptCM).
type Conn struct {
	c      net.Conn
	cm     *cmLink
	client bool
	buf    [KeyMsgLen]byte
	rbuf   [KeyMsgLen]byte
}

// NewConn wraps c; client says whether this side is perftest's client (it
// writes first in every step).
func NewConn(c net.Conn, client bool) *Conn { return &Conn{c: c, client: client} }

// Dial connects to a perftest server at host:port, retrying until ctx ends
// while the server is not listening yet.
func Dial(ctx context.Context, host string, port int) (*Conn, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return NewConn(c, true), nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("perftest: couldn't connect to %s: %w", addr, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Accept accepts one client on ln and closes ln, as perftest's server does.
func Accept(ctx context.Context, ln net.Listener) (*Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		ln.Close()
		if r.err != nil {
			return nil, fmt.Errorf("perftest: accept: %w", r.err)
		}
		return NewConn(r.c, false), nil
	case <-ctx.Done():
		ln.Close()
		if r := <-ch; r.c != nil {
			r.c.Close()
		}
		return nil, fmt.Errorf("perftest: waiting for a client: %w", ctx.Err())
	}
}

// Client reports whether this side writes first.
func (c *Conn) Client() bool { return c.client }

// SetDeadline sets the deadline of the underlying connection.
func (c *Conn) SetDeadline(t time.Time) error {
	if c.cm != nil {
		c.cm.setDeadline(t)
		return nil
	}
	return c.c.SetDeadline(t)
}

// Close closes the connection (under -R: disconnects, waiting a few
// seconds at most for the peer's DREP, and releases the QP).
func (c *Conn) Close() error {
	if c.cm != nil {
		return c.cm.close()
	}
	return c.c.Close()
}

// RemoteAddr returns the peer's address (under -R its IP address and
// rdma_cm port, as a *net.TCPAddr).
func (c *Conn) RemoteAddr() net.Addr {
	if c.cm != nil {
		return net.TCPAddrFromAddrPort(c.cm.peer)
	}
	return c.c.RemoteAddr()
}

// Exchange sends mine and reads len(theirs) bytes into theirs, in the order
// of perftest's ctx_xchg_data: the client writes first. The two must have the
// same length, as in every step of the exchange.
func (c *Conn) Exchange(mine, theirs []byte) error {
	if len(mine) != len(theirs) {
		return fmt.Errorf("perftest: exchange of %d bytes against %d", len(mine), len(theirs))
	}
	write := func() error {
		if c.cm != nil {
			return c.cm.send(mine)
		}
		if _, err := c.c.Write(mine); err != nil {
			return fmt.Errorf("perftest: couldn't send %d bytes: %w", len(mine), err)
		}
		return nil
	}
	read := func() error {
		if c.cm != nil {
			return c.cm.recv(theirs)
		}
		if _, err := io.ReadFull(c.c, theirs); err != nil {
			return fmt.Errorf("perftest: couldn't read %d bytes: %w", len(theirs), err)
		}
		return nil
	}
	if c.client {
		if err := write(); err != nil {
			return err
		}
		return read()
	}
	if err := read(); err != nil {
		return err
	}
	return write()
}

// ExchangeVersions sends version (NUL-padded to VersionLen) and returns the
// peer's version string and its number. A peer below MinVersion is an error
// matching ErrVersion.
func (c *Conn) ExchangeVersions(version string) (string, float64, error) {
	if len(version) >= VersionLen {
		return "", 0, fmt.Errorf("%w: version %q longer than %d bytes", ErrRange, version, VersionLen-1)
	}
	var mine, theirs [VersionLen]byte
	copy(mine[:], version)
	if err := c.Exchange(mine[:], theirs[:]); err != nil {
		return "", 0, err
	}
	s := string(theirs[:])
	if i := bytes.IndexByte(theirs[:], 0); i >= 0 {
		s = s[:i]
	}
	v := atof(s)
	if v < MinVersion {
		return s, v, fmt.Errorf("%w: the peer is perftest %q; versions older than %.2f are not supported", ErrVersion, s, MinVersion)
	}
	return s, v, nil
}

// atof reads the leading decimal number of s, as C's atof (0 when there is
// none).
func atof(s string) float64 {
	end := 0
	dot := false
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !dot) {
		dot = dot || s[end] == '.'
		end++
	}
	v, err := strconv.ParseFloat(s[:end], 64)
	if err != nil {
		return 0
	}
	return v
}

// ExchangeSysData exchanges cycle_buffer and cache_line_size (two 4-byte
// big-endian steps, check_sys_data) and returns the larger of each side's.
func (c *Conn) ExchangeSysData(cycleBuffer, cacheLine int) (int, int, error) {
	if cycleBuffer <= 0 || cacheLine <= 0 || cycleBuffer > math.MaxInt32 || cacheLine > math.MaxInt32 {
		return 0, 0, fmt.Errorf("%w: cycle buffer %d, cache line %d", ErrRange, cycleBuffer, cacheLine)
	}
	vals := [2]int{cycleBuffer, cacheLine}
	for i, v := range vals {
		var mine, theirs [4]byte
		binary.BigEndian.PutUint32(mine[:], uint32(v))
		if err := c.Exchange(mine[:], theirs[:]); err != nil {
			return 0, 0, err
		}
		r := int(int32(binary.BigEndian.Uint32(theirs[:])))
		if r <= 0 {
			return 0, 0, fmt.Errorf("%w: the peer's %s is %d", ErrMessage, [2]string{"cycle buffer", "cache line size"}[i], r)
		}
		vals[i] = max(v, r)
	}
	return vals[0], vals[1], nil
}

// ExchangeMTU exchanges the path MTU enum (check_mtu) and returns the MTU to
// use: the smaller of the two.
func (c *Conn) ExchangeMTU(mtu verbs.MTU) (verbs.MTU, error) {
	if mtu.Bytes() == 0 {
		return 0, fmt.Errorf("%w: MTU %d", ErrRange, mtu)
	}
	mine := [mtuLen]byte{'0' + byte(mtu), 0}
	var theirs [mtuLen]byte
	if err := c.Exchange(mine[:], theirs[:]); err != nil {
		return 0, err
	}
	if theirs[1] != 0 || theirs[0] < '1' || theirs[0] > '5' {
		return 0, fmt.Errorf("%w: MTU message %q: want an MTU enum 1..5 and its NUL", ErrMessage, theirs[:])
	}
	return min(mtu, verbs.MTU(theirs[0]-'0')), nil
}

// HandShake exchanges key messages (ctx_hand_shake): perftest uses it both
// to tell a QP's address and as a sync point. Under -R the messages are
// binary (AppendCMKeyMsg).
func (c *Conn) HandShake(mine Dest) (Dest, error) {
	if c.cm != nil {
		return c.handShakeCM(mine)
	}
	b, err := mine.AppendKeyMsg(c.buf[:0])
	if err != nil {
		return Dest{}, err
	}
	if err := c.Exchange(b, c.rbuf[:]); err != nil {
		return Dest{}, err
	}
	return ParseKeyMsg(c.rbuf[:])
}

// ExchangeReports exchanges bandwidth reports (xchg_bw_reports with a peer
// of version 5.33 or later): size, iterations, peak, average and message
// rate, one 8-byte big-endian step each.
func (c *Conn) ExchangeReports(mine Report) (Report, error) {
	out := [5]uint64{mine.Size, mine.Iters, math.Float64bits(mine.BWPeak), math.Float64bits(mine.BWAvg), math.Float64bits(mine.MsgRate)}
	var in [5]uint64
	for i, v := range out {
		var m, t [ReportLen]byte
		binary.BigEndian.PutUint64(m[:], v)
		if err := c.Exchange(m[:], t[:]); err != nil {
			return Report{}, err
		}
		in[i] = binary.BigEndian.Uint64(t[:])
	}
	return Report{Size: in[0], Iters: in[1], BWPeak: math.Float64frombits(in[2]), BWAvg: math.Float64frombits(in[3]), MsgRate: math.Float64frombits(in[4])}, nil
}

// Finish ends the exchange as ctx_close_connection does: a last handshake,
// then "done" and its NUL. perftest never reads the peer's "done"; Finish
// reads it for at most linger (the peer may already have closed) so that
// closing does not reset a connection the peer still writes to, and then
// closes the connection. Under -R, as ctx_close_connection there, Finish
// is the handshake alone and leaves the connection to Close.
func (c *Conn) Finish(mine Dest, linger time.Duration) error {
	if c.cm != nil {
		_, err := c.HandShake(mine)
		return err
	}
	defer c.c.Close()
	if _, err := c.HandShake(mine); err != nil {
		return err
	}
	if _, err := io.WriteString(c.c, Done); err != nil {
		return fmt.Errorf("perftest: couldn't send done: %w", err)
	}
	c.c.SetReadDeadline(time.Now().Add(linger))
	var b [len(Done)]byte
	io.ReadFull(c.c, b[:]) // best effort: perftest may close without waiting
	return nil
}
