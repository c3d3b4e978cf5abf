// Package rping is librdmacm's rping over goroce: the same message
// protocol, connection parameters and output, so that either side can be
// rdma-core's rping (librdmacm/examples/rping.c).
//
// Per ping the client SENDs {address, rkey, size} of its start buffer (16
// bytes, big endian: u64, u32, u32); the server RDMA READs that many bytes,
// SENDs 16 bytes ("go ahead"); the client SENDs {address, rkey, size} of
// its sink buffer; the server RDMA WRITEs the string it read (up to and
// including its NUL) there and SENDs 16 bytes ("done"). The start buffer
// holds "rdma-ping-%d: " and rotating ASCII ('A' to 'z', starting one
// later each ping), NUL-terminated. The client disconnects at the end.
package rping

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"time"

	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// DefaultPort is rping's port.
const DefaultPort = 7174

// Size limits of -S (rping's RPING_MIN_BUFSIZE and RPING_BUFSIZE - 1).
const (
	MinSize     = 26
	MaxSize     = 64*1024 - 1
	DefaultSize = 64
	infoLen     = 16
	sqDepth     = 16
)

// Config is one run: rping's flags.
type Config struct {
	Server     bool
	Addr       string // -a: the server's address (client), the address to bind (server; "" any)
	Port       int    // -p (default 7174)
	Size       int    // -S (default 64)
	Count      int    // -C (0: forever)
	Verbose    bool   // -v: print the ping data
	Validate   bool   // -V: compare what came back
	Persistent bool   // -P: the server serves connections one after another, forever
	// Debug prints the protocol's steps (-d).
	Debug bool
	// Timeout bounds each wait for the peer (default: none, as rping).
	Timeout time.Duration
}

// DeviceAddr is the local address of the device rping runs on when none
// is given: the client's source address src (-I), or the server's bind
// address (-a); "" when the side has none.
func (c Config) DeviceAddr(src string) string {
	if c.Server {
		return c.Addr
	}
	return src
}

// ErrMismatch is the client's -V failure.
var ErrMismatch = errors.New("rping: data mismatch")

// Run runs rping on the device; out gets what rping prints on stdout, errw
// what it prints on stderr.
func Run(ctx context.Context, dev verbs.Device, c Config, out, errw io.Writer) error {
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Size < MinSize || c.Size > MaxSize {
		return fmt.Errorf("rping: invalid size %d (valid range is %d to %d)", c.Size, MinSize, MaxSize+1)
	}
	if c.Count < 0 {
		return fmt.Errorf("rping: invalid count %d", c.Count)
	}
	if c.Server {
		return serve(ctx, dev, &c, out, errw)
	}
	if c.Addr == "" {
		return errors.New("rping: the client needs the server's address (-a)")
	}
	return client(ctx, dev, &c, out)
}

// cb is one connection's resources, as rping's control block.
type cb struct {
	c       *Config
	ctx     verbs.Context
	pd      verbs.PD
	cq      verbs.CQ
	qp      verbs.QP
	mem     verbs.MR // recv info | send info | rdma buffer | start buffer
	recvOff uint64
	sendOff uint64
	rdmaOff uint64
	startOf uint64
	wc      []verbs.WC
	conn    *rdmacm.Conn
}

func newCB(dev verbs.Device, c *Config) (*cb, error) {
	b := &cb{c: c, wc: make([]verbs.WC, 4)}
	var err error
	if b.ctx, err = dev.Open(); err != nil {
		return nil, err
	}
	fail := func(e error) (*cb, error) { b.close(); return nil, e }
	if b.pd, err = b.ctx.AllocPD(); err != nil {
		return fail(err)
	}
	if b.cq, err = b.ctx.CreateCQ(sqDepth*2, nil); err != nil {
		return fail(err)
	}
	b.recvOff, b.sendOff, b.rdmaOff = 0, infoLen, 2*infoLen
	b.startOf = b.rdmaOff + uint64(c.Size)
	if b.mem, err = b.pd.RegMR(make([]byte, int(b.startOf)+c.Size), verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite); err != nil {
		return fail(err)
	}
	if b.qp, err = b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.cq, RecvCQ: b.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fail(err)
	}
	if err := rdmacm.InitQP(b.qp); err != nil {
		return fail(err)
	}
	return b, b.postRecv()
}

func (b *cb) close() {
	if b.qp != nil {
		b.qp.Destroy()
	}
	if b.mem != nil {
		b.mem.Dereg()
	}
	if b.cq != nil {
		b.cq.Destroy()
	}
	if b.pd != nil {
		b.pd.Dealloc()
	}
	b.ctx.Close()
}

func (b *cb) postRecv() error {
	_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{{Addr: b.mem.Addr() + b.recvOff, Length: infoLen, LKey: b.mem.LKey()}}}})
	return err
}

// sendInfo SENDs {addr, rkey, size} of the buffer at off (the client's
// advertisements) or, with adv false, the unchanged send buffer (the
// server's "go ahead").
func (b *cb) sendInfo(off uint64, adv bool) error {
	buf := b.mem.Buf()[b.sendOff : b.sendOff+infoLen]
	if adv {
		binary.BigEndian.PutUint64(buf, b.mem.Addr()+off)
		binary.BigEndian.PutUint32(buf[8:], b.mem.RKey())
		binary.BigEndian.PutUint32(buf[12:], uint32(b.c.Size))
	}
	_, err := b.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: b.mem.Addr() + b.sendOff, Length: infoLen, LKey: b.mem.LKey()}}}})
	return err
}

// errDisconnected ends a wait when the peer disconnected (the QP flushed).
var errDisconnected = errors.New("rping: disconnected")

// wait polls until a completion of the opcode comes (others that succeed
// are passed over); a receive is reposted and checked for its 16 bytes.
func (b *cb) wait(ctx context.Context, want verbs.WCOpcode) error {
	var deadline time.Time
	if b.c.Timeout > 0 {
		deadline = time.Now().Add(b.c.Timeout)
	}
	idle := 0
	var doneAt time.Time
	for {
		n := b.cq.Poll(b.wc)
		for _, wc := range b.wc[:n] {
			if wc.Status == verbs.WCWRFlushErr {
				return errDisconnected
			}
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("cq completion failed status %d (%v)", int(wc.Status), wc.Status)
			}
			if wc.Opcode == verbs.WCRecv {
				if wc.ByteLen != infoLen {
					return fmt.Errorf("Received bogus data, size %d", wc.ByteLen)
				}
				if err := b.postRecv(); err != nil {
					return err
				}
			}
			if wc.Opcode == want {
				return nil
			}
		}
		if n > 0 {
			idle = 0
			continue
		}
		idle++
		if idle%256 == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-b.conn.Done():
				// The QP is going to ERROR: its flush ends the wait, or
				// this, if nothing was posted.
				if doneAt.IsZero() {
					doneAt = time.Now()
				} else if time.Since(doneAt) > 100*time.Millisecond {
					return errDisconnected
				}
			default:
			}
			if !deadline.IsZero() && time.Now().After(deadline) {
				return fmt.Errorf("rping: no completion in %v", b.c.Timeout)
			}
		}
		if idle > 4096 {
			time.Sleep(20 * time.Microsecond)
		} else {
			runtime.Gosched()
		}
	}
}

func (b *cb) debugf(w io.Writer, format string, args ...any) {
	if b.c.Debug {
		fmt.Fprintf(w, format, args...)
	}
}

func client(ctx context.Context, dev verbs.Device, c *Config, out io.Writer) error {
	b, err := newCB(dev, c)
	if err != nil {
		return err
	}
	defer b.close()
	dctx := ctx
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	addr := net.JoinHostPort(c.Addr, strconv.Itoa(c.Port))
	b.conn, err = rdmacm.Dial(dctx, dev, addr, b.qp, rdmacm.DialOptions{ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7})
	if err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	defer func() {
		// A lost DREQ would leave the server waiting: wait out its
		// resends (a DREP usually ends this within a round trip).
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		b.conn.CloseContext(cctx)
		cancel()
	}()
	mem := b.mem.Buf()
	start := mem[b.startOf : b.startOf+uint64(c.Size)]
	sink := mem[b.rdmaOff : b.rdmaOff+uint64(c.Size)]
	ch := byte(65)
	for ping := 0; c.Count == 0 || ping < c.Count; ping++ {
		hdr := fmt.Sprintf("rdma-ping-%d: ", ping)
		n := copy(start, hdr)
		for i, x := n, ch; i < c.Size; i++ {
			start[i] = x
			if x++; x > 122 {
				x = 65
			}
		}
		if ch++; ch > 122 {
			ch = 65
		}
		start[c.Size-1] = 0
		if err := b.sendInfo(b.startOf, true); err != nil {
			return err
		}
		if err := b.wait(ctx, verbs.WCRecv); err != nil {
			return fmt.Errorf("wait for RDMA_WRITE_ADV: %w", err)
		}
		if err := b.sendInfo(b.rdmaOff, true); err != nil {
			return err
		}
		if err := b.wait(ctx, verbs.WCRecv); err != nil {
			return fmt.Errorf("wait for RDMA_WRITE_COMPLETE: %w", err)
		}
		if c.Validate && string(start) != string(sink) {
			return ErrMismatch
		}
		if c.Verbose {
			fmt.Fprintf(out, "ping data: %s\n", cstring(sink))
		}
	}
	return nil
}

func orAny(s string) string {
	if s == "" {
		return "0.0.0.0"
	}
	return s
}

func cstring(b []byte) []byte {
	for i, x := range b {
		if x == 0 {
			return b[:i]
		}
	}
	return b
}

func serve(ctx context.Context, dev verbs.Device, c *Config, out, errw io.Writer) error {
	addr := netip.AddrPortFrom(netip.MustParseAddr(orAny(c.Addr)), uint16(c.Port))
	if c.Addr != "" {
		a, err := netip.ParseAddr(c.Addr)
		if err != nil {
			return fmt.Errorf("rping: -a %q: %w", c.Addr, err)
		}
		addr = netip.AddrPortFrom(a, uint16(c.Port))
	}
	l, err := rdmacm.Listen(ctx, dev, addr.String())
	if err != nil {
		return err
	}
	defer l.Close()
	if c.Debug {
		fmt.Fprintf(errw, "listening on %v\n", l.Addr())
	}
	for {
		req, err := l.Accept(ctx)
		if err != nil {
			return err
		}
		err = serveOne(ctx, dev, c, req, out, errw)
		if !c.Persistent {
			return err
		}
		if err != nil {
			fmt.Fprintf(errw, "rping server failed: %v\n", err)
		}
	}
}

func serveOne(ctx context.Context, dev verbs.Device, c *Config, req *rdmacm.Request, out, errw io.Writer) error {
	b, err := newCB(dev, c)
	if err != nil {
		req.Reject(nil)
		return err
	}
	defer b.close()
	actx := ctx
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	b.conn, err = req.Accept(actx, b.qp, rdmacm.AcceptOptions{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7})
	if err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	defer b.conn.Close()
	mem := b.mem.Buf()
	for {
		// The client's start buffer.
		if err := b.wait(ctx, verbs.WCRecv); err != nil {
			return b.ended(err, errw)
		}
		info := mem[b.recvOff : b.recvOff+infoLen]
		va, rkey, size := binary.BigEndian.Uint64(info), binary.BigEndian.Uint32(info[8:]), binary.BigEndian.Uint32(info[12:])
		b.debugf(errw, "Received rkey %x addr %x len %d from peer\n", rkey, va, size)
		if size > uint32(c.Size) {
			return fmt.Errorf("rping: the client's buffer (%d bytes) is larger than ours (%d): use the same -S", size, c.Size)
		}
		if _, err := b.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: b.mem.Addr() + b.rdmaOff, Length: size, LKey: b.mem.LKey()}}, RemoteAddr: va, RKey: rkey}}); err != nil {
			return err
		}
		if err := b.wait(ctx, verbs.WCRDMARead); err != nil {
			return b.ended(err, errw)
		}
		data := cstring(mem[b.rdmaOff : b.rdmaOff+uint64(c.Size)])
		if c.Verbose {
			fmt.Fprintf(out, "server ping data: %s\n", data)
		}
		if err := b.sendInfo(0, false); err != nil {
			return err
		}
		// The client's sink buffer.
		if err := b.wait(ctx, verbs.WCRecv); err != nil {
			return b.ended(err, errw)
		}
		va, rkey = binary.BigEndian.Uint64(info), binary.BigEndian.Uint32(info[8:])
		n := uint32(len(data) + 1)
		if _, err := b.qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: b.mem.Addr() + b.rdmaOff, Length: n, LKey: b.mem.LKey()}}, RemoteAddr: va, RKey: rkey}}); err != nil {
			return err
		}
		if err := b.wait(ctx, verbs.WCRDMAWrite); err != nil {
			return b.ended(err, errw)
		}
		if err := b.sendInfo(0, false); err != nil {
			return err
		}
	}
}

// ended turns the end of the server's loop into its result: a disconnect
// is the normal end.
func (b *cb) ended(err error, errw io.Writer) error {
	if errors.Is(err, errDisconnected) {
		fmt.Fprintln(errw, "server DISCONNECT EVENT...")
		return nil
	}
	return err
}
