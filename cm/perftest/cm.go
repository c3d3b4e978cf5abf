package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// Sizes of a key message under -R: perftest's struct pingpong_dest as it
// lies in memory on x86-64 (and every other LP64 ABI). perftest 4.5-0.17
// as Debian builds it sends CMKeyMsgLen bytes (lid .. srqn and the
// padding); builds whose struct ends with a gid_index send
// CMKeyMsgLenGIDIndex. perftest receives into a buffer of its own size, so
// a side sends the shorter form until the peer's first key message tells
// its size, and that size thereafter.
const (
	CMKeyMsgLen         = 56
	CMKeyMsgLenGIDIndex = 64
)

// cmMsgLen is the size of the control QP's receives: the largest message.
const cmMsgLen = CMKeyMsgLenGIDIndex

// AppendCMKeyMsg appends d as rdma_write_keys sends it: struct
// pingpong_dest with its integers big endian (htobe32, the address htobe64)
// and the GID raw, CMKeyMsgLen bytes. Offsets: 0 lid, 4 out_reads, 8 qpn,
// 12 psn, 16 rkey, 24 vaddr, 32 gid, 48 srqn; the padding (20-23, 52-55)
// is zero. (The longer form adds gid_index at 52, which perftest never
// reads, and padding: zeros.)
func (d Dest) AppendCMKeyMsg(b []byte) []byte {
	var m [CMKeyMsgLen]byte
	binary.BigEndian.PutUint32(m[0:], uint32(d.LID))
	binary.BigEndian.PutUint32(m[4:], uint32(d.OutReads))
	binary.BigEndian.PutUint32(m[8:], d.QPN)
	binary.BigEndian.PutUint32(m[12:], d.PSN)
	binary.BigEndian.PutUint32(m[16:], d.RKey)
	binary.BigEndian.PutUint64(m[24:], d.VAddr)
	copy(m[32:48], d.GID[:])
	binary.BigEndian.PutUint32(m[48:], d.SRQN)
	return append(b, m[:]...)
}

// ParseCMKeyMsg parses a key message of the -R exchange (see
// AppendCMKeyMsg). rdma_read_keys reads lid, out_reads, qpn, psn, rkey,
// vaddr and the GID; so does ParseCMKeyMsg, and the SRQ number. A message
// of another size than CMKeyMsgLen or CMKeyMsgLenGIDIndex, a LID or out_reads wider than 16 bits, a QPN or PSN
// wider than 24 is an error matching ErrMessage.
func ParseCMKeyMsg(b []byte) (Dest, error) {
	var d Dest
	if len(b) != CMKeyMsgLen && len(b) != CMKeyMsgLenGIDIndex {
		return d, fmt.Errorf("%w: key message of %d bytes, want %d or %d", ErrMessage, len(b), CMKeyMsgLen, CMKeyMsgLenGIDIndex)
	}
	lid, out := binary.BigEndian.Uint32(b[0:]), binary.BigEndian.Uint32(b[4:])
	qpn, psn := binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])
	if lid > 0xFFFF || out > 0xFFFF || qpn > 0xFFFFFF || psn > 0xFFFFFF {
		return d, fmt.Errorf("%w: key message: LID %#x, out_reads %#x, QPN %#x, PSN %#x out of range", ErrMessage, lid, out, qpn, psn)
	}
	d.LID, d.OutReads, d.QPN, d.PSN = uint16(lid), uint16(out), qpn, psn
	d.RKey = binary.BigEndian.Uint32(b[16:])
	d.VAddr = binary.BigEndian.Uint64(b[24:])
	copy(d.GID[:], b[32:48])
	d.SRQN = binary.BigEndian.Uint32(b[48:])
	return d, nil
}

// cmLink carries the exchange under -R: one RC QP connected through
// rdma_cm, every message a SEND into the peer's single posted receive.
type cmLink struct {
	dev  rdmacm.Device
	peer netip.AddrPort // the peer's address and rdma_cm port
	port uint16         // the test's rdma_cm port (the server's)

	vctx verbs.Context
	pd   verbs.PD
	cq   verbs.CQ
	mr   verbs.MR
	qp   verbs.QP
	buf  []byte // [send | recv 0 | recv 1]
	conn *rdmacm.Conn

	mu       sync.Mutex
	deadline time.Time

	keyLen    int // the size of the key messages this side sends (0: CMKeyMsgLen)
	sendsDone int
	recvs     []recvDone // receive completions not yet read
	wc        [4]verbs.WC
	closeOnce sync.Once
}

type recvDone struct {
	slot int
	n    int
}

// cmSlots is how many receives the control QP keeps posted: the peer sends
// one message at a time, and the next only after this side answered.
const cmSlots = 2

func newCMLink(dev rdmacm.Device) (*cmLink, error) {
	l := &cmLink{dev: dev, buf: make([]byte, (1+cmSlots)*cmMsgLen)}
	var err error
	if l.vctx, err = dev.Open(); err != nil {
		return nil, fmt.Errorf("perftest: couldn't open %s: %w", dev.Name(), err)
	}
	fail := func(what string, err error) (*cmLink, error) {
		l.release()
		return nil, fmt.Errorf("perftest: rdma_cm control QP: couldn't %s: %w", what, err)
	}
	if l.pd, err = l.vctx.AllocPD(); err != nil {
		return fail("allocate a PD", err)
	}
	if l.cq, err = l.vctx.CreateCQ(2*cmSlots+2, nil); err != nil {
		return fail("create a CQ", err)
	}
	if l.mr, err = l.pd.RegMR(l.buf, verbs.AccessLocalWrite); err != nil {
		return fail("register memory", err)
	}
	if l.qp, err = l.pd.CreateQP(&verbs.QPInitAttr{SendCQ: l.cq, RecvCQ: l.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: cmSlots, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fail("create a QP", err)
	}
	if err := rdmacm.InitQP(l.qp); err != nil {
		return fail("initialize the QP", err)
	}
	for i := 0; i < cmSlots; i++ {
		if err := l.postRecv(i); err != nil {
			return fail("post a receive", err)
		}
	}
	return l, nil
}

func (l *cmLink) postRecv(slot int) error {
	off := (1 + slot) * cmMsgLen
	sge := [1]verbs.SGE{{Addr: l.mr.Addr() + uint64(off), Length: cmMsgLen, LKey: l.mr.LKey()}}
	wr := [1]verbs.RecvWR{{WRID: uint64(slot), SGList: sge[:]}}
	_, err := l.qp.PostRecv(wr[:])
	return err
}

// DialCM connects to a perftest server started with -R (rdma_cm) at
// host:port over dev: the exchange's RC connection. A server not listening
// yet (REJ, no listener) is retried every 100 ms until ctx ends.
func DialCM(ctx context.Context, dev rdmacm.Device, host string, port int) (*Conn, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ap, err := rdmacm.ParseAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("perftest: %w", err)
	}
	for {
		l, err := newCMLink(dev)
		if err != nil {
			return nil, err
		}
		l.conn, err = rdmacm.Attach(dev, rdmacm.MachineConfig{}).Dial(ctx, ap.String(), l.qp,
			// No READs (the exchange's verb is SEND); retry and RNR retry
			// 7, as create_comm_struct's.
			rdmacm.DialOptions{ResponderResources: -1, InitiatorDepth: -1, RetryCount: 7, RNRRetryCount: 7})
		if err == nil {
			l.peer, l.port = l.conn.RemoteAddr(), ap.Port()
			return &Conn{cm: l, client: true}, nil
		}
		l.release()
		var rej *rdmacm.RejectError
		if !errors.As(err, &rej) || ctx.Err() != nil {
			return nil, fmt.Errorf("perftest: couldn't connect to %s through rdma_cm: %w", ap, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("perftest: couldn't connect to %s through rdma_cm: %w (%w)", ap, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// AcceptCM waits on dev for one perftest client started with -R on the
// rdma_cm port (TCP port space) and stops listening, as perftest's server
// does.
func AcceptCM(ctx context.Context, dev rdmacm.Device, port int) (*Conn, error) {
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("%w: port %d", ErrRange, port)
	}
	ln, err := rdmacm.Attach(dev, rdmacm.MachineConfig{}).Listen(ctx, ":"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("perftest: %w", err)
	}
	defer ln.Close()
	req, err := ln.Accept(ctx)
	if err != nil {
		return nil, fmt.Errorf("perftest: waiting for a client: %w", err)
	}
	l, err := newCMLink(dev)
	if err != nil {
		_ = req.Reject(nil)
		return nil, err
	}
	l.conn, err = req.Accept(ctx, l.qp, rdmacm.AcceptOptions{ResponderResources: -1, InitiatorDepth: -1, RNRRetryCount: 7})
	if err != nil {
		l.release()
		return nil, fmt.Errorf("perftest: accepting %v: %w", req.Peer(), err)
	}
	l.peer, l.port = l.conn.RemoteAddr(), uint16(port)
	return &Conn{cm: l}, nil
}

// CMInfo describes the rdma_cm side of a connection made by DialCM or
// AcceptCM: the device, the peer's address and the test's rdma_cm port
// (the server's), through which the data QPs connect.
type CMInfo struct {
	Device rdmacm.Device
	Peer   netip.Addr
	Port   uint16
}

// CM returns the connection's rdma_cm side; ok is false for a TCP
// exchange.
func (c *Conn) CM() (info CMInfo, ok bool) {
	if c.cm == nil {
		return CMInfo{}, false
	}
	return CMInfo{Device: c.cm.dev, Peer: c.cm.peer.Addr(), Port: c.cm.port}, true
}

func (l *cmLink) setDeadline(t time.Time) {
	l.mu.Lock()
	l.deadline = t
	l.mu.Unlock()
}

// poll collects completions until cond holds, the deadline passes or the
// connection ends.
func (l *cmLink) poll(what string, cond func() bool) error {
	wait := time.Microsecond
	ended := false
	for !cond() {
		n := l.cq.Poll(l.wc[:])
		for i := 0; i < n; i++ {
			w := &l.wc[i]
			if w.Status != verbs.WCSuccess {
				if w.Status == verbs.WCWRFlushErr {
					return fmt.Errorf("perftest: couldn't %s: the rdma_cm connection is closed", what)
				}
				return fmt.Errorf("perftest: couldn't %s: completion with error %v", what, w.Status)
			}
			if w.Opcode == verbs.WCRecv {
				l.recvs = append(l.recvs, recvDone{slot: int(w.WRID), n: int(w.ByteLen)})
			} else {
				l.sendsDone++
			}
		}
		if n > 0 {
			wait = time.Microsecond
			continue
		}
		l.mu.Lock()
		dl := l.deadline
		l.mu.Unlock()
		if !dl.IsZero() && time.Now().After(dl) {
			return fmt.Errorf("perftest: couldn't %s: %w", what, errDeadline)
		}
		if ended {
			return fmt.Errorf("perftest: couldn't %s: %w", what, l.conn.Err())
		}
		select {
		case <-l.conn.Done():
			ended = true // one more look at what came before the disconnect
			continue
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Millisecond)
	}
	return nil
}

var errDeadline = errors.New("i/o timeout")

func (l *cmLink) send(b []byte) error {
	if len(b) > cmMsgLen {
		return fmt.Errorf("%w: a message of %d bytes (the peer receives %d)", ErrRange, len(b), cmMsgLen)
	}
	copy(l.buf, b)
	sge := [1]verbs.SGE{{Addr: l.mr.Addr(), Length: uint32(len(b)), LKey: l.mr.LKey()}}
	wr := [1]verbs.SendWR{{WRID: 5, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sge[:]}} // SYNC_SPEC_ID
	want := l.sendsDone + 1
	if _, err := l.qp.PostSend(wr[:]); err != nil {
		return fmt.Errorf("perftest: couldn't send %d bytes: %w", len(b), err)
	}
	return l.poll(fmt.Sprintf("send %d bytes", len(b)), func() bool { return l.sendsDone >= want })
}

func (l *cmLink) recv(b []byte) error {
	n, err := l.recvAny(b)
	if err == nil && n != len(b) {
		err = fmt.Errorf("%w: a message of %d bytes, want %d", ErrMessage, n, len(b))
	}
	return err
}

// recvAny reads the next message into b (at least cmMsgLen bytes) and
// returns its length.
func (l *cmLink) recvAny(b []byte) (int, error) {
	if err := l.poll("read a message", func() bool { return len(l.recvs) > 0 }); err != nil {
		return 0, err
	}
	r := l.recvs[0]
	l.recvs = l.recvs[1:]
	off := (1 + r.slot) * cmMsgLen
	n := copy(b, l.buf[off:off+r.n])
	if err := l.postRecv(r.slot); err != nil {
		return 0, fmt.Errorf("perftest: couldn't post a receive: %w", err)
	}
	return n, nil
}

// handShakeCM is HandShake under -R.
func (c *Conn) handShakeCM(mine Dest) (Dest, error) {
	l := c.cm
	if l.keyLen == 0 {
		l.keyLen = CMKeyMsgLen
	}
	var out [CMKeyMsgLenGIDIndex]byte
	mine.AppendCMKeyMsg(out[:0])
	var in [cmMsgLen]byte
	var n int
	recv := func() error {
		var err error
		if n, err = l.recvAny(in[:]); err != nil {
			return err
		}
		if n != CMKeyMsgLen && n != CMKeyMsgLenGIDIndex {
			return fmt.Errorf("%w: key message of %d bytes, want %d or %d", ErrMessage, n, CMKeyMsgLen, CMKeyMsgLenGIDIndex)
		}
		l.keyLen = n // the peer's struct pingpong_dest: answer in its size
		return nil
	}
	send := func() error { return l.send(out[:l.keyLen]) }
	first, second := send, recv
	if !c.client {
		first, second = recv, send
	}
	if err := first(); err != nil {
		return Dest{}, err
	}
	if err := second(); err != nil {
		return Dest{}, err
	}
	return ParseCMKeyMsg(in[:n])
}

// close disconnects (DREQ, a bounded wait for the DREP while the DREQ is
// resent: a minute, several of Linux's 6.4 s resend intervals, since a
// perftest peer that never gets a DREQ waits for it forever) and releases
// the QP and its resources.
func (l *cmLink) close() error {
	l.closeOnce.Do(func() {
		if l.conn != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_ = l.conn.CloseContext(ctx)
			cancel()
		}
		l.release()
	})
	return nil
}

func (l *cmLink) release() {
	if l.qp != nil {
		l.qp.Destroy()
	}
	if l.mr != nil {
		l.mr.Dereg()
	}
	if l.cq != nil {
		l.cq.Destroy()
	}
	if l.pd != nil {
		l.pd.Dealloc()
	}
	if l.vctx != nil {
		l.vctx.Close()
	}
}
