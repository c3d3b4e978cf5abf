package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// Work request IDs, as the pingpong examples use them: also bits of
// pingpong.pending.
const (
	ppRecvWRID = 1
	ppSendWRID = 2
)

// udQKey is the Q_Key ibv_ud_pingpong uses on both sides.
const udQKey = 0x11111111

// udGRH is the room for the GRH at the start of every UD receive buffer.
const udGRH = 40

// ppConfig holds `goroce pingpong`'s flags, named as ibv_rc_pingpong and
// ibv_ud_pingpong name theirs.
type ppConfig struct {
	typ     verbs.QPType
	host    string // client when set
	port    int    // TCP port of the exchange
	devName string
	ibPort  int
	size    int
	mtu     int
	rxDepth int
	iters   int
	sl      int
	events  bool
	gidx    int
	chk     bool
	timeout time.Duration
	soft    softConfig
	stderr  io.Writer // where the packet path is said (stdout is rdma-core's report)
}

func runPingpong(args []string, stdout, stderr io.Writer) int {
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage: goroce pingpong rc|ud [flags]          start a server and wait for a client\n       goroce pingpong rc|ud [flags] HOST     connect to the server at HOST\n\nibv_rc_pingpong and ibv_ud_pingpong over goroce's soft device: the same\nflags, exchange (TCP port 18515) and report, so that either side may be\nrdma-core's program. Run \"goroce pingpong rc -h\" for the flags.")
	}
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	c := ppConfig{stderr: stderr}
	switch args[0] {
	case "rc":
		c.typ, c.size = verbs.QPTRC, 4096
	case "ud":
		c.typ, c.size = verbs.QPTUD, 1024
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "goroce pingpong: unknown transport %q: want rc or ud\n", args[0])
		usage(stderr)
		return 2
	}
	name := "pingpong " + args[0]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.soft.register(fs)
	alias := func(short, long string, def int, usage string, p *int) {
		fs.IntVar(p, short, def, usage)
		fs.IntVar(p, long, def, "same as -"+short)
	}
	alias("p", "port", cm.PingpongPort, "listen on/connect to TCP port `port`", &c.port)
	fs.StringVar(&c.devName, "d", "", "use device `dev` (default: the first device found, "+softName+")")
	fs.StringVar(&c.devName, "ib-dev", "", "same as -d")
	alias("i", "ib-port", 1, "use `port` of the device", &c.ibPort)
	alias("s", "size", c.size, "size of message to exchange, in bytes", &c.size)
	if c.typ == verbs.QPTRC {
		alias("m", "mtu", 1024, "path MTU in bytes (256, 512, 1024, 2048, 4096)", &c.mtu)
	}
	alias("r", "rx-depth", 500, "number of receives to post at a time", &c.rxDepth)
	alias("n", "iters", 1000, "number of exchanges", &c.iters)
	alias("l", "sl", 0, "service level (accepted; RoCE carries none)", &c.sl)
	fs.BoolVar(&c.events, "e", false, "sleep on CQ events (default: poll)")
	fs.BoolVar(&c.events, "events", false, "same as -e")
	alias("g", "gid-idx", 0, "local port GID `index` (soft devices have GID 0, their IPv4-mapped address)", &c.gidx)
	if c.typ == verbs.QPTUD {
		fs.BoolVar(&c.chk, "c", false, "validate the received buffer")
		fs.BoolVar(&c.chk, "chk", false, "same as -c")
	}
	var odp, ts bool
	if c.typ == verbs.QPTRC {
		fs.BoolVar(&odp, "o", false, "use on-demand paging (not supported)")
		fs.BoolVar(&odp, "odp", false, "same as -o")
		fs.BoolVar(&ts, "t", false, "completion timestamps (not supported)")
		fs.BoolVar(&ts, "ts", false, "same as -t")
	}
	fs.DurationVar(&c.timeout, "timeout", 0, "give up after this long (default: never, as rdma-core)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: goroce %s [flags]         start a server and wait for connection\n       goroce %s [flags] HOST    connect to server at HOST\n\nflags:\n", name, name)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	switch {
	case fs.NArg() > 1:
		fs.Usage()
		return 2
	case fs.NArg() == 1:
		c.host = fs.Arg(0)
	}
	if odp || ts {
		fmt.Fprintf(stderr, "goroce %s: on-demand paging and completion timestamps are not supported\n", name)
		return 1
	}
	if c.port <= 0 || c.port > 65535 || c.ibPort < 1 || c.size < 1 || c.rxDepth < 1 || c.iters < 1 ||
		(c.typ == verbs.QPTRC && verbs.MTUFromBytes(c.mtu) == 0) {
		fs.Usage()
		return 2
	}
	if err := runPP(&c, stdout); err != nil {
		fmt.Fprintf(stderr, "goroce %s: %v\n", name, err)
		return 1
	}
	return 0
}

// pingpong is one side of a pingpong run.
type pingpong struct {
	c      *ppConfig
	out    io.Writer
	dev    verbs.Device
	sdev   *soft.Device // dev when it is the soft device
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

// runPP runs ibv_rc_pingpong's or ibv_ud_pingpong's main with c.
func runPP(c *ppConfig, out io.Writer) (err error) {
	ctx := context.Background()
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	p := &pingpong{c: c, out: out}
	if hw, ok := openHW(c.devName); ok {
		p.dev = hw
	} else {
		if p.sdev, err = c.soft.open(true); err != nil {
			return err
		}
		if c.stderr != nil {
			fmt.Fprintf(c.stderr, "goroce pingpong: packet path: %s\n", p.sdev.Path())
		}
		p.dev = p.sdev
		if c.devName != "" && c.devName != p.dev.Name() {
			p.sdev.Close()
			return fmt.Errorf("IB device %s not found", c.devName)
		}
	}
	defer func() {
		if cerr := p.close(err == nil); err == nil {
			err = cerr
		}
	}()
	if err := p.init(); err != nil {
		return err
	}
	if p.routs = p.postRecv(c.rxDepth); p.routs < c.rxDepth {
		return fmt.Errorf("couldn't post receive (%d)", p.routs)
	}
	if c.events {
		if err := p.cq.ReqNotify(false); err != nil {
			return fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	pa, err := p.vctx.QueryPort(uint8(c.ibPort))
	if err != nil {
		return fmt.Errorf("couldn't get port info: %w", err)
	}
	p.local.LID = pa.LID
	if c.gidx < 0 {
		return errors.New("a soft device needs its GID: use -g 0")
	}
	if p.local.GID, err = p.vctx.QueryGID(uint8(c.ibPort), c.gidx); err != nil {
		return fmt.Errorf("can't read sgid of index %d: %w", c.gidx, err)
	}
	p.local.QPN = p.qp.Num()
	p.local.PSN = rand.Uint32() & 0xffffff

	sep := ","
	if c.typ == verbs.QPTUD {
		sep = ":" // ud_pingpong prints "PSN 0x%06x: GID %s"
	}
	printLocal := func() {
		fmt.Fprintf(p.out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
			p.local.LID, p.local.QPN, p.local.PSN, sep, cm.FormatGID(p.local.GID))
	}
	if c.host != "" {
		printLocal()
		if p.remote, err = cm.Dial(ctx, c.host, c.port, p.local); err != nil {
			return err
		}
	} else {
		ln, err := cm.Listen(c.port)
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
	if c.host != "" {
		if err := p.connect(p.remote); err != nil {
			return err
		}
	}

	p.pending = ppRecvWRID
	if c.host != "" {
		if c.chk {
			pageSize := 4096
			for i := 0; i < c.size; i += pageSize {
				p.buf[udGRH+i] = 0 // i / page_size % sizeof(char), as ud_pingpong writes it
			}
		}
		if err := p.postSend(); err != nil {
			return err
		}
		p.pending |= ppSendWRID
	}
	start := time.Now()
	if err := p.loop(ctx); err != nil {
		return err
	}
	end := time.Now()

	usec := float32(end.Sub(start).Microseconds())
	bytes := int64(c.size) * int64(c.iters) * 2
	fmt.Fprintf(p.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, float64(usec)/1e6, float64(bytes)*8/float64(usec))
	fmt.Fprintf(p.out, "%d iters in %.2f seconds = %.2f usec/iter\n", c.iters, float64(usec)/1e6, float64(usec/float32(c.iters)))
	if c.typ == verbs.QPTUD && c.chk && c.host != "" {
		for i := 0; i < c.size; i += 4096 {
			if p.buf[udGRH+i] != 0 {
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
	bufLen := c.size
	if c.typ == verbs.QPTUD {
		pa, err := p.vctx.QueryPort(uint8(c.ibPort))
		if err != nil {
			return fmt.Errorf("unable to query port info for port %d: %w", c.ibPort, err)
		}
		if mtu := pa.ActiveMTU.Bytes(); c.size > mtu {
			return fmt.Errorf("requested size larger than port MTU (%d)", mtu)
		}
		bufLen += udGRH
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
	if p.cq, err = p.vctx.CreateCQ(c.rxDepth+1, p.ch); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	p.qp, err = p.pd.CreateQP(&verbs.QPInitAttr{SendCQ: p.cq, RecvCQ: p.cq, QPType: c.typ,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(c.rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("couldn't create QP: %w", err)
	}
	init := verbs.QPAttr{State: verbs.QPSInit, PKeyIndex: 0, PortNum: uint8(c.ibPort)}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if c.typ == verbs.QPTRC {
		mask |= verbs.AttrAccessFlags // qp_access_flags 0
	} else {
		init.QKey = udQKey
		mask |= verbs.AttrQKey
	}
	if err := p.qp.Modify(&init, mask); err != nil {
		return fmt.Errorf("failed to modify QP to INIT: %w", err)
	}

	sendOff := 0
	if c.typ == verbs.QPTUD {
		sendOff = udGRH
	}
	p.recv[0] = verbs.RecvWR{WRID: ppRecvWRID, SGList: []verbs.SGE{{Addr: p.mr.Addr(), Length: uint32(bufLen), LKey: p.mr.LKey()}}}
	p.send[0] = verbs.SendWR{WRID: ppSendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: p.mr.Addr() + uint64(sendOff), Length: uint32(c.size), LKey: p.mr.LKey()}}}
	return nil
}

// connect aims the QP at remote: pp_connect_ctx.
func (p *pingpong) connect(remote cm.Dest) error {
	c := p.c
	if !remote.HasGID() {
		return fmt.Errorf("the remote side sent no GID (%s): RoCE needs one; run it with -g (on rdma_rxe over IPv4, the IPv4-mapped GID's index, often 1)", cm.FormatGID(remote.GID))
	}
	ah := verbs.AHAttr{DGID: remote.GID, SGIDIndex: uint8(c.gidx), HopLimit: 1, PortNum: uint8(c.ibPort)}
	if c.typ == verbs.QPTRC {
		rtr := verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTUFromBytes(c.mtu), DestQPN: remote.QPN, RQPSN: remote.PSN,
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
	p.send[0].AH, p.send[0].RemoteQPN, p.send[0].RemoteQKey = p.ah, remote.QPN, udQKey
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
	for p.rcnt < c.iters || p.scnt < c.iters {
		if c.events {
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
	return fmt.Errorf("%w after %d of %d sends and %d of %d receives completed", err, p.scnt, p.c.iters, p.rcnt, p.c.iters)
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
		case ppSendWRID:
			p.scnt++
		case ppRecvWRID:
			p.routs--
			if p.routs <= 1 {
				p.routs += p.postRecv(c.rxDepth - p.routs)
				if p.routs < c.rxDepth {
					return fmt.Errorf("couldn't post receive (%d)", p.routs)
				}
			}
			p.rcnt++
		default:
			return fmt.Errorf("completion for unknown wr_id %d", w.WRID)
		}
		p.pending &^= int(w.WRID)
		if p.scnt < c.iters && p.pending == 0 {
			if err := p.postSend(); err != nil {
				return err
			}
			p.pending = ppRecvWRID | ppSendWRID
		}
	}
	return nil
}

// close releases everything: pp_close_ctx. After a run, an RC device first
// stays up until the link has been quiet for a moment: the ACK of the last
// message received must leave (and be sent again if the peer retransmits)
// before the QP is gone, or the peer's last send never completes.
func (p *pingpong) close(ran bool) error {
	if ran && p.c.typ == verbs.QPTRC && p.sdev != nil {
		linger(p.sdev, 20*time.Millisecond, time.Second)
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
	if p.sdev != nil {
		errs = append(errs, p.sdev.Close())
	}
	return errors.Join(errs...)
}

// linger waits until dev has sent and received nothing for quiet, at most
// for max.
func linger(dev *soft.Device, quiet, max time.Duration) {
	t0 := time.Now()
	last, since := dev.Stats(), t0
	for time.Since(t0) < max {
		time.Sleep(quiet / 4)
		s := dev.Stats()
		if s.TxPackets != last.TxPackets || s.RxPackets != last.RxPackets {
			last, since = s, time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			return
		}
	}
}
