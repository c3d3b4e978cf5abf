package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// Work request IDs, as the pingpong examples use them: also bits of
// pingpong.pending.
const (
	recvWRID = 1
	sendWRID = 2
)

// UDQKey is the Q_Key ibv_ud_pingpong uses on both sides.
const UDQKey = 0x11111111

// grh is the room for the GRH at the start of every UD receive buffer.
const grh = 40

// Config holds a run's settings, named after ibv_rc_pingpong's and
// ibv_ud_pingpong's flags.
type Config struct {
	Type     verbs.QPType  // verbs.QPTRC or verbs.QPTUD
	Host     string        // the server to connect to; empty: be the server
	Port     int           // TCP port of the exchange (-p, cm.PingpongPort)
	IBPort   int           // the device's port (-i, 1)
	Size     int           // message size (-s: 4096 for RC, 1024 for UD)
	MTU      int           // RC path MTU in bytes (-m, 1024)
	RxDepth  int           // receives posted at a time (-r, 500)
	Iters    int           // exchanges (-n, 1000)
	Events   bool          // sleep on CQ events (-e)
	GIDIndex int           // local GID index (-g)
	Check    bool          // UD: validate the received buffer (-c)
	Timeout  time.Duration // give up after this long (0: never)
}

// quieter is a device that can wait until its link is quiet (the soft
// device).
type quieter interface {
	WaitQuiet(quiet, limit time.Duration) bool
}

// pingpong is one side of a pingpong run.
type pingpong struct {
	c      *Config
	out    io.Writer
	dev    verbs.Device
	vctx   verbs.Context
	ch     verbs.CompChannel
	pd     verbs.PD
	mr     verbs.MR
	cq     verbs.CQ
	qp     verbs.QP
	ah     verbs.AH
	buf    []byte
	local  cm.Dest
	remote cm.Dest

	routs   int
	pending int
	scnt    int
	rcnt    int
	send    [1]verbs.SendWR
	recv    [1]verbs.RecvWR
}

// Run runs ibv_rc_pingpong's or ibv_ud_pingpong's main with c on dev (a
// device not yet opened; Run opens and closes its context), printing
// rdma-core's report to out. It is the client when c.Host is set, else the
// server. ctx (and c.Timeout) bound the whole run.
func Run(ctx context.Context, c *Config, dev verbs.Device, out io.Writer) (err error) {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	p := &pingpong{c: c, out: out, dev: dev}
	defer func() {
		if cerr := p.close(err == nil); err == nil {
			err = cerr
		}
	}()
	if err := p.init(); err != nil {
		return err
	}
	if p.routs = p.postRecv(c.RxDepth); p.routs < c.RxDepth {
		return fmt.Errorf("couldn't post receive (%d)", p.routs)
	}
	if c.Events {
		if err := p.cq.ReqNotify(false); err != nil {
			return fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	pa, err := p.vctx.QueryPort(uint8(c.IBPort))
	if err != nil {
		return fmt.Errorf("couldn't get port info: %w", err)
	}
	p.local.LID = pa.LID
	if c.GIDIndex == 0 {
		c.GIDIndex = verbs.DefaultGIDIndex
	}
	if c.GIDIndex < 0 {
		return errors.New("RoCE needs a GID: use -g 1 (the IPv4-mapped GID of soft devices and rdma_rxe)")
	}
	if p.local.GID, err = p.vctx.QueryGID(uint8(c.IBPort), c.GIDIndex); err != nil {
		return fmt.Errorf("can't read sgid of index %d: %w", c.GIDIndex, err)
	}
	p.local.QPN = p.qp.Num()
	p.local.PSN = rand.Uint32() & 0xffffff

	sep := ","
	if c.Type == verbs.QPTUD {
		sep = ":" // ud_pingpong prints "PSN 0x%06x: GID %s"
	}
	printLocal := func() {
		fmt.Fprintf(p.out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
			p.local.LID, p.local.QPN, p.local.PSN, sep, cm.FormatGID(p.local.GID))
	}
	if c.Host != "" {
		printLocal()
		if p.remote, err = cm.Dial(ctx, c.Host, c.Port, p.local); err != nil {
			return err
		}
	} else {
		ln, err := cm.Listen(c.Port)
		if err != nil {
			return err
		}
		printLocal() // once listening, so that a client started on this line finds the port open
		p.remote, err = cm.Accept(ctx, ln, p.local, p.connect)
		ln.Close()
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(p.out, "  remote address: %s\n", p.remote)
	if c.Host != "" {
		if err := p.connect(p.remote); err != nil {
			return err
		}
	}

	p.pending = recvWRID
	if c.Host != "" {
		if c.Check {
			pageSize := 4096
			for i := 0; i < c.Size; i += pageSize {
				p.buf[grh+i] = 0 // i / page_size % sizeof(char), as ud_pingpong writes it
			}
		}
		if err := p.postSend(); err != nil {
			return err
		}
		p.pending |= sendWRID
	}
	start := time.Now()
	if err := p.loop(ctx); err != nil {
		return err
	}
	end := time.Now()

	usec := float32(end.Sub(start).Microseconds())
	bytes := int64(c.Size) * int64(c.Iters) * 2
	fmt.Fprintf(p.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, float64(usec)/1e6, float64(bytes)*8/float64(usec))
	fmt.Fprintf(p.out, "%d iters in %.2f seconds = %.2f usec/iter\n", c.Iters, float64(usec)/1e6, float64(usec/float32(c.Iters)))
	if c.Type == verbs.QPTUD && c.Check && c.Host != "" {
		for i := 0; i < c.Size; i += 4096 {
			if p.buf[grh+i] != 0 {
				fmt.Fprintf(p.out, "invalid data in page %d\n", i/4096)
			}
		}
	}
	return nil
}

// init creates the objects: pp_init_ctx.
func (p *pingpong) init() (err error) {
	c := p.c
	if p.vctx, err = p.dev.Open(); err != nil {
		return fmt.Errorf("couldn't get context for %s: %w", p.dev.Name(), err)
	}
	bufLen := c.Size
	if c.Type == verbs.QPTUD {
		pa, err := p.vctx.QueryPort(uint8(c.IBPort))
		if err != nil {
			return fmt.Errorf("unable to query port info for port %d: %w", c.IBPort, err)
		}
		if mtu := pa.ActiveMTU.Bytes(); c.Size > mtu {
			return fmt.Errorf("requested size larger than port MTU (%d)", mtu)
		}
		bufLen += grh
	}
	// The channel also serves the polling loop when it has been idle for a
	// while (see loop).
	{
		if p.ch, err = p.vctx.CreateCompChannel(); err != nil {
			return fmt.Errorf("couldn't create completion channel: %w", err)
		}
	}
	if p.pd, err = p.vctx.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %w", err)
	}
	p.buf = make([]byte, bufLen)
	for i := range p.buf {
		p.buf[i] = 0x7b
	}
	if p.mr, err = p.pd.RegMR(p.buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	if p.cq, err = p.vctx.CreateCQ(c.RxDepth+1, p.ch); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	p.qp, err = p.pd.CreateQP(&verbs.QPInitAttr{SendCQ: p.cq, RecvCQ: p.cq, QPType: c.Type,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(c.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("couldn't create QP: %w", err)
	}
	init := verbs.QPAttr{State: verbs.QPSInit, PKeyIndex: 0, PortNum: uint8(c.IBPort)}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if c.Type == verbs.QPTRC {
		mask |= verbs.AttrAccessFlags // qp_access_flags 0
	} else {
		init.QKey = UDQKey
		mask |= verbs.AttrQKey
	}
	if err := p.qp.Modify(&init, mask); err != nil {
		return fmt.Errorf("failed to modify QP to INIT: %w", err)
	}

	sendOff := 0
	if c.Type == verbs.QPTUD {
		sendOff = grh
	}
	p.recv[0] = verbs.RecvWR{WRID: recvWRID, SGList: []verbs.SGE{{Addr: p.mr.Addr(), Length: uint32(bufLen), LKey: p.mr.LKey()}}}
	p.send[0] = verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: p.mr.Addr() + uint64(sendOff), Length: uint32(c.Size), LKey: p.mr.LKey()}}}
	return nil
}

// connect aims the QP at remote: pp_connect_ctx.
func (p *pingpong) connect(remote cm.Dest) error {
	c := p.c
	if !remote.HasGID() {
		return fmt.Errorf("the remote side sent no GID (%s): RoCE needs one; run it with -g (on rdma_rxe over IPv4, the IPv4-mapped GID's index, often 1)", cm.FormatGID(remote.GID))
	}
	ah := verbs.AHAttr{DGID: remote.GID, SGIDIndex: uint8(c.GIDIndex), HopLimit: 1, PortNum: uint8(c.IBPort)}
	if c.Type == verbs.QPTRC {
		rtr := verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTUFromBytes(c.MTU), DestQPN: remote.QPN, RQPSN: remote.PSN,
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AHAttr: ah}
		if err := p.qp.Modify(&rtr, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|
			verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
			return fmt.Errorf("failed to modify QP to RTR: %w", err)
		}
		rts := verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: p.local.PSN, MaxRdAtomic: 1}
		if err := p.qp.Modify(&rts, verbs.AttrState|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|
			verbs.AttrSQPSN|verbs.AttrMaxQPRdAtomic); err != nil {
			return fmt.Errorf("failed to modify QP to RTS: %w", err)
		}
		return nil
	}
	if err := p.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState); err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	if err := p.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: p.local.PSN}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	var err error
	if p.ah, err = p.pd.CreateAH(&ah); err != nil {
		return fmt.Errorf("failed to create AH: %w", err)
	}
	p.send[0].AH, p.send[0].RemoteQPN, p.send[0].RemoteQKey = p.ah, remote.QPN, UDQKey
	return nil
}

// postRecv posts up to n receives of the whole buffer and returns how many
// were posted.
func (p *pingpong) postRecv(n int) int {
	for i := 0; i < n; i++ {
		if k, _ := p.qp.PostRecv(p.recv[:]); k != 1 {
			return i
		}
	}
	return n
}

func (p *pingpong) postSend() error {
	if _, err := p.qp.PostSend(p.send[:]); err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// loop runs the exchanges: the main loop of the pingpong examples.
func (p *pingpong) loop(ctx context.Context) error {
	c := p.c
	wc := make([]verbs.WC, 2)
	var idleSince time.Time
	for p.rcnt < c.Iters || p.scnt < c.Iters {
		if c.Events {
			ev, err := p.ch.Wait(ctx)
			if err != nil {
				return p.stalled(fmt.Errorf("failed to get cq_event: %w", err))
			}
			if ev != p.cq {
				return errors.New("CQ event for an unknown CQ")
			}
			if err := p.cq.ReqNotify(false); err != nil {
				return fmt.Errorf("couldn't request CQ notification: %w", err)
			}
			for {
				n := p.cq.Poll(wc)
				if n == 0 {
					break
				}
				if err := p.handle(wc[:n]); err != nil {
					return err
				}
			}
			continue
		}
		n := p.cq.Poll(wc)
		if n == 0 {
			// Poll as the examples do, but only for a moment: a soft
			// device's driver shares the cores with this loop (and, in
			// tests, with the peer), and a loop that never blocks starves
			// it. After 50 µs without a completion, arm the CQ and sleep
			// on the completion channel until the next one.
			now := time.Now()
			if idleSince.IsZero() {
				idleSince = now
			} else if now.Sub(idleSince) > 50*time.Microsecond {
				if err := p.cq.ReqNotify(false); err != nil {
					return fmt.Errorf("couldn't request CQ notification: %w", err)
				}
				// A completion that arrived before the CQ was armed
				// raises no event: poll once more before sleeping.
				if n := p.cq.Poll(wc); n > 0 {
					idleSince = time.Time{}
					if err := p.handle(wc[:n]); err != nil {
						return err
					}
					continue
				}
				if _, err := p.ch.Wait(ctx); err != nil {
					return p.stalled(err)
				}
				idleSince = time.Time{}
				continue
			}
			runtime.Gosched()
			continue
		}
		idleSince = time.Time{}
		if err := p.handle(wc[:n]); err != nil {
			return err
		}
	}
	return nil
}

func (p *pingpong) stalled(err error) error {
	return fmt.Errorf("%w after %d of %d sends and %d of %d receives completed", err, p.scnt, p.c.Iters, p.rcnt, p.c.Iters)
}

// handle processes completions: parse_single_wc.
func (p *pingpong) handle(wcs []verbs.WC) error {
	c := p.c
	for i := range wcs {
		w := &wcs[i]
		if w.Status != verbs.WCSuccess {
			return fmt.Errorf("failed status %s (%d) for wr_id %d", w.Status, w.Status, w.WRID)
		}
		switch w.WRID {
		case sendWRID:
			p.scnt++
		case recvWRID:
			p.routs--
			if p.routs <= 1 {
				p.routs += p.postRecv(c.RxDepth - p.routs)
				if p.routs < c.RxDepth {
					return fmt.Errorf("couldn't post receive (%d)", p.routs)
				}
			}
			p.rcnt++
		default:
			return fmt.Errorf("completion for unknown wr_id %d", w.WRID)
		}
		p.pending &^= int(w.WRID)
		if p.scnt < c.Iters && p.pending == 0 {
			if err := p.postSend(); err != nil {
				return err
			}
			p.pending = recvWRID | sendWRID
		}
	}
	return nil
}

// close releases everything: pp_close_ctx. After a run, an RC device first
// stays up until the link has been quiet for a moment: the ACK of the last
// message received must leave (and be sent again if the peer retransmits)
// before the QP is gone, or the peer's last send never completes.
func (p *pingpong) close(ran bool) error {
	if q, ok := p.dev.(quieter); ok && ran && p.c.Type == verbs.QPTRC {
		q.WaitQuiet(20*time.Millisecond, time.Second)
	}
	var errs []error
	if p.qp != nil {
		errs = append(errs, p.qp.Destroy())
	}
	if p.cq != nil {
		errs = append(errs, p.cq.Destroy())
	}
	if p.mr != nil {
		errs = append(errs, p.mr.Dereg())
	}
	if p.ah != nil {
		errs = append(errs, p.ah.Destroy())
	}
	if p.pd != nil {
		errs = append(errs, p.pd.Dealloc())
	}
	if p.ch != nil {
		errs = append(errs, p.ch.Destroy())
	}
	if p.vctx != nil {
		errs = append(errs, p.vctx.Close())
	}
	return errors.Join(errs...)
}
