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

// MaxSRQQPs is the most QPs ibv_srq_pingpong runs (one less than its
// MAX_QP).
const MaxSRQQPs = cm.SRQMessages - 1

// Config holds a run's settings, named after ibv_rc_pingpong's,
// ibv_ud_pingpong's and ibv_srq_pingpong's flags.
type Config struct {
	Type     verbs.QPType  // verbs.QPTRC or verbs.QPTUD
	SRQ      bool          // ibv_srq_pingpong: NumQP RC QPs sharing a receive queue
	NumQP    int           // SRQ: the QPs (-q, 16)
	Host     string        // the server to connect to; empty: be the server
	Port     int           // TCP port of the exchange (-p, cm.PingpongPort)
	IBPort   int           // the device's port (-i, 1)
	Size     int           // message size (-s: 4096 for RC, 1024 for UD)
	MTU      int           // RC path MTU in bytes (-m, 1024)
	RxDepth  int           // receives posted at a time (-r, 500)
	Iters    int           // exchanges (-n, 1000)
	Events   bool          // sleep on CQ events (-e)
	GIDIndex int           // local GID index (-g)
	Check    bool          // UD and SRQ: validate the received buffer (-c)
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
	qps    []verbs.QP // one, or NumQP with an SRQ
	srq    verbs.SRQ
	ah     verbs.AH
	buf    []byte
	local  []cm.Dest // a QP's each
	remote []cm.Dest

	routs   int
	pending []int // a QP's each: the completions it waits for (recvWRID, sendWRID)
	scnt    int   // sends completed, on all QPs
	rcnt    int   // receives completed, on all QPs
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
	if err := checkSRQ(c); err != nil {
		return err
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
	if err := p.localDests(); err != nil {
		return err
	}
	if err := p.exchange(ctx); err != nil {
		return err
	}
	if err := p.start(); err != nil {
		return err
	}
	start := time.Now()
	if err := p.loop(ctx); err != nil {
		return err
	}
	end := time.Now()

	p.report(end.Sub(start))
	return nil
}

// checkSRQ refuses the settings ibv_srq_pingpong refuses: QPs other than
// RC, fewer receives than QPs, and more QPs than it runs. Without c.SRQ
// everything passes.
func checkSRQ(c *Config) error {
	if !c.SRQ {
		return nil
	}
	if c.Type != verbs.QPTRC {
		return errors.New("srq: the QPs are RC")
	}
	if c.NumQP > c.RxDepth {
		return fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", c.RxDepth, c.NumQP)
	}
	if c.NumQP < 1 || c.NumQP > MaxSRQQPs {
		return fmt.Errorf("num_qp %d must be 1 to %d", c.NumQP, MaxSRQQPs)
	}
	return nil
}

// localDests fills p.local, a QP's each, with the port's LID, the QP's
// number, a random PSN and the GID of c.GIDIndex (verbs.DefaultGIDIndex
// when zero; a negative index, no GID, is refused).
func (p *pingpong) localDests() error {
	c := p.c
	pa, err := p.vctx.QueryPort(uint8(c.IBPort))
	if err != nil {
		return fmt.Errorf("couldn't get port info: %w", err)
	}
	if c.GIDIndex == 0 {
		c.GIDIndex = verbs.DefaultGIDIndex
	}
	if c.GIDIndex < 0 {
		return errors.New("RoCE needs a GID: use -g 1 (the IPv4-mapped GID of soft devices and rdma_rxe)")
	}
	gid, err := p.vctx.QueryGID(uint8(c.IBPort), c.GIDIndex)
	if err != nil {
		return fmt.Errorf("can't read sgid of index %d: %w", c.GIDIndex, err)
	}
	for _, qp := range p.qps {
		p.local = append(p.local, cm.Dest{LID: pa.LID, QPN: qp.Num(), PSN: rand.Uint32() & 0xffffff, GID: gid})
	}
	return nil
}

// printLocal prints the local addresses as the examples do.
func (p *pingpong) printLocal() {
	sep := ","
	if p.c.Type == verbs.QPTUD {
		sep = ":" // ud_pingpong prints "PSN 0x%06x: GID %s"
	}
	for _, l := range p.local {
		fmt.Fprintf(p.out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
			l.LID, l.QPN, l.PSN, sep, cm.FormatGID(l.GID))
	}
}

// exchange trades addresses with the other side over TCP, the client
// dialling and the server accepting, prints both sides' and connects the
// QPs to the remote ones. The server connects them while it answers (as
// pp_server_exch_dest does), so that they are ready when the client, which
// connects its own once it has the answer, sends.
func (p *pingpong) exchange(ctx context.Context) (err error) {
	c := p.c
	if c.Host != "" {
		p.printLocal()
		if c.SRQ {
			p.remote, err = cm.DialSRQ(ctx, c.Host, c.Port, p.local)
		} else {
			var r cm.Dest
			r, err = cm.Dial(ctx, c.Host, c.Port, p.local[0])
			p.remote = []cm.Dest{r}
		}
		if err != nil {
			return err
		}
	} else if err := p.accept(ctx); err != nil {
		return err
	}
	for _, r := range p.remote {
		fmt.Fprintf(p.out, "  remote address: %s\n", r)
	}
	if c.Host != "" {
		if err := p.connect(p.remote); err != nil {
			return err
		}
	}
	return nil
}

// accept is the server's side of exchange: it listens on c.Port, prints
// the local addresses and takes one client's, connecting the QPs before it
// answers.
func (p *pingpong) accept(ctx context.Context) error {
	c := p.c
	ln, err := cm.Listen(c.Port)
	if err != nil {
		return err
	}
	p.printLocal() // once listening, so that a client started on this line finds the port open
	if c.SRQ {
		p.remote, err = cm.AcceptSRQ(ctx, ln, p.local, p.connect)
	} else {
		var r cm.Dest
		r, err = cm.Accept(ctx, ln, p.local[0], func(r cm.Dest) error { return p.connect([]cm.Dest{r}) })
		p.remote = []cm.Dest{r}
	}
	ln.Close()
	return err
}

// start readies the exchanges: every QP waits for a receive, and the
// client (with c.Check, after zeroing the first byte of each page as the
// examples do) sends first on each.
func (p *pingpong) start() error {
	c := p.c
	p.pending = make([]int, len(p.qps))
	for i := range p.pending {
		p.pending[i] = recvWRID
	}
	if c.Host == "" {
		return nil
	}
	if c.Check {
		off := 0
		if c.Type == verbs.QPTUD {
			off = grh
		}
		pageSize := 4096
		for i := 0; i < c.Size; i += pageSize {
			p.buf[off+i] = 0 // i / page_size % sizeof(char), as the examples write it
		}
	}
	for i := range p.qps {
		if err := p.postSend(i); err != nil {
			return err
		}
		p.pending[i] |= sendWRID
	}
	return nil
}

// report prints the rates of a run whose exchanges took d and, where the
// examples check the data received with -c (ud_pingpong's client,
// srq_pingpong's server), each page whose first byte is not the zero the
// client wrote there.
func (p *pingpong) report(d time.Duration) {
	c := p.c
	usec := float32(d.Microseconds())
	bytes := int64(c.Size) * int64(c.Iters) * 2
	fmt.Fprintf(p.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, float64(usec)/1e6, float64(bytes)*8/float64(usec))
	fmt.Fprintf(p.out, "%d iters in %.2f seconds = %.2f usec/iter\n", c.Iters, float64(usec)/1e6, float64(usec/float32(c.Iters)))
	switch {
	case c.Type == verbs.QPTUD && c.Check && c.Host != "":
		for i := 0; i < c.Size; i += 4096 {
			if p.buf[grh+i] != 0 {
				fmt.Fprintf(p.out, "invalid data in page %d\n", i/4096)
			}
		}
	case c.SRQ && c.Check && c.Host == "": // srq_pingpong's server checks
		for i := 0; i < c.Size; i += 4096 {
			if p.buf[i] != 0 {
				fmt.Fprintf(p.out, "invalid data in page %d\n", i/4096)
			}
		}
	}
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
	if p.ch, err = p.vctx.CreateCompChannel(); err != nil {
		return fmt.Errorf("couldn't create completion channel: %w", err)
	}
	if p.pd, err = p.vctx.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %w", err)
	}
	p.buf = make([]byte, bufLen)
	if !c.SRQ { // srq_pingpong's buffer starts zeroed
		for i := range p.buf {
			p.buf[i] = 0x7b
		}
	}
	if p.mr, err = p.pd.RegMR(p.buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	nqp := 1
	if c.SRQ {
		nqp = c.NumQP
	}
	if p.cq, err = p.vctx.CreateCQ(c.RxDepth+nqp, p.ch); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	if err := p.createQPs(nqp); err != nil {
		return err
	}
	if err := p.modifyToInit(); err != nil {
		return err
	}
	p.initWRs(bufLen)
	return nil
}

// createQPs creates the nqp QPs on p.cq and, with c.SRQ, the SRQ they
// share (then their own receive queues are empty).
func (p *pingpong) createQPs(nqp int) (err error) {
	c := p.c
	attr := verbs.QPInitAttr{SendCQ: p.cq, RecvCQ: p.cq, QPType: c.Type,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(c.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}
	if c.SRQ {
		if p.srq, err = p.pd.CreateSRQ(c.RxDepth, 1); err != nil {
			return fmt.Errorf("couldn't create SRQ: %w", err)
		}
		attr.SRQ, attr.Cap.MaxRecvWR, attr.Cap.MaxRecvSGE = p.srq, 0, 0
	}
	for i := 0; i < nqp; i++ {
		qp, err := p.pd.CreateQP(&attr)
		if err != nil {
			if c.SRQ {
				return fmt.Errorf("couldn't create QP[%d]: %w", i, err)
			}
			return fmt.Errorf("couldn't create QP: %w", err)
		}
		p.qps = append(p.qps, qp)
	}
	return nil
}

// modifyToInit moves the QPs to INIT on c.IBPort: RC ones with no remote
// access, UD ones with UDQKey.
func (p *pingpong) modifyToInit() error {
	c := p.c
	init := verbs.QPAttr{State: verbs.QPSInit, PKeyIndex: 0, PortNum: uint8(c.IBPort)}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if c.Type == verbs.QPTRC {
		mask |= verbs.AttrAccessFlags // qp_access_flags 0
	} else {
		init.QKey = UDQKey
		mask |= verbs.AttrQKey
	}
	for i, qp := range p.qps {
		if err := qp.Modify(&init, mask); err != nil {
			if c.SRQ {
				return fmt.Errorf("failed to modify QP[%d] to INIT: %w", i, err)
			}
			return fmt.Errorf("failed to modify QP to INIT: %w", err)
		}
	}
	return nil
}

// initWRs prepares the work requests every exchange posts again: a receive
// of the whole bufLen-byte buffer and a signaled send of c.Size bytes
// (for UD, from behind the room of the GRH).
func (p *pingpong) initWRs(bufLen int) {
	c := p.c
	sendOff := 0
	if c.Type == verbs.QPTUD {
		sendOff = grh
	}
	p.recv[0] = verbs.RecvWR{WRID: recvWRID, SGList: []verbs.SGE{{Addr: p.mr.Addr(), Length: uint32(bufLen), LKey: p.mr.LKey()}}}
	p.send[0] = verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: p.mr.Addr() + uint64(sendOff), Length: uint32(c.Size), LKey: p.mr.LKey()}}}
}

// connect aims the QPs at remote's, QP i at remote[i]: pp_connect_ctx. As
// there, the first address's GID is every QP's destination.
func (p *pingpong) connect(remote []cm.Dest) error {
	c := p.c
	if !remote[0].HasGID() {
		return fmt.Errorf("the remote side sent no GID (%s): RoCE needs one; run it with -g (on rdma_rxe over IPv4, the IPv4-mapped GID's index, often 1)", cm.FormatGID(remote[0].GID))
	}
	ah := verbs.AHAttr{DGID: remote[0].GID, SGIDIndex: uint8(c.GIDIndex), HopLimit: 1, PortNum: uint8(c.IBPort)}
	qpName := func(i int) string {
		if c.SRQ {
			return fmt.Sprintf("QP[%d]", i)
		}
		return "QP"
	}
	if c.Type == verbs.QPTRC {
		for i, qp := range p.qps {
			rtr := verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTUFromBytes(c.MTU), DestQPN: remote[i].QPN, RQPSN: remote[i].PSN,
				MaxDestRdAtomic: 1, MinRNRTimer: 12, AHAttr: ah}
			if err := qp.Modify(&rtr, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|
				verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
				return fmt.Errorf("failed to modify %s to RTR: %w", qpName(i), err)
			}
			rts := verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: p.local[i].PSN, MaxRdAtomic: 1}
			if err := qp.Modify(&rts, verbs.AttrState|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|
				verbs.AttrSQPSN|verbs.AttrMaxQPRdAtomic); err != nil {
				return fmt.Errorf("failed to modify %s to RTS: %w", qpName(i), err)
			}
		}
		return nil
	}
	qp := p.qps[0]
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState); err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: p.local[0].PSN}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	var err error
	if p.ah, err = p.pd.CreateAH(&ah); err != nil {
		return fmt.Errorf("failed to create AH: %w", err)
	}
	p.send[0].AH, p.send[0].RemoteQPN, p.send[0].RemoteQKey = p.ah, remote[0].QPN, UDQKey
	return nil
}

// postRecv posts up to n receives of the whole buffer and returns how many
// were posted.
func (p *pingpong) postRecv(n int) int {
	for i := 0; i < n; i++ {
		var k int
		if p.srq != nil {
			k, _ = p.srq.PostRecv(p.recv[:])
		} else {
			k, _ = p.qps[0].PostRecv(p.recv[:])
		}
		if k != 1 {
			return i
		}
	}
	return n
}

// postSend sends the buffer on QP i.
func (p *pingpong) postSend(i int) error {
	if _, err := p.qps[i].PostSend(p.send[:]); err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// loop runs the exchanges: the main loop of the pingpong examples.
func (p *pingpong) loop(ctx context.Context) error {
	c := p.c
	wc := make([]verbs.WC, 1+len(p.qps)) // srq_pingpong polls num_qp + rx_depth; what one poll returns matters not
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

// handle processes completions: parse_single_wc (srq_pingpong: its loop's
// body, the QP found by number).
func (p *pingpong) handle(wcs []verbs.WC) error {
	c := p.c
	low := 1 // receives left that trigger a refill
	if c.SRQ {
		low = len(p.qps)
	}
	for i := range wcs {
		w := &wcs[i]
		if w.Status != verbs.WCSuccess {
			return fmt.Errorf("failed status %s (%d) for wr_id %d", w.Status, w.Status, w.WRID)
		}
		q := 0
		if c.SRQ {
			if q = p.findQP(w.QPNum); q < 0 {
				return fmt.Errorf("couldn't find QPN %06x", w.QPNum)
			}
		}
		switch w.WRID {
		case sendWRID:
			p.scnt++
		case recvWRID:
			p.routs--
			if p.routs <= low {
				p.routs += p.postRecv(c.RxDepth - p.routs)
				if p.routs < c.RxDepth {
					return fmt.Errorf("couldn't post receive (%d)", p.routs)
				}
			}
			p.rcnt++
		default:
			return fmt.Errorf("completion for unknown wr_id %d", w.WRID)
		}
		p.pending[q] &^= int(w.WRID)
		if p.scnt < c.Iters && p.pending[q] == 0 {
			if err := p.postSend(q); err != nil {
				return err
			}
			p.pending[q] = recvWRID | sendWRID
		}
	}
	return nil
}

// findQP is the index of the QP numbered qpn, or -1.
func (p *pingpong) findQP(qpn uint32) int {
	for i, qp := range p.qps {
		if qp.Num() == qpn {
			return i
		}
	}
	return -1
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
	for _, qp := range p.qps {
		errs = append(errs, qp.Destroy())
	}
	if p.srq != nil {
		errs = append(errs, p.srq.Destroy())
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
