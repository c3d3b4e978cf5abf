package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"

	"github.com/goroce/goroce/cm/perftest"
	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/verbs"
)

// Verb is the operation a test measures.
type Verb int

// The verbs, as perftest's VerbType.
const (
	Send Verb = iota
	Write
	Read
	Atomic
)

var verbNames = [...]string{"send", "write", "read", "atomic"}

func (v Verb) String() string {
	if v < 0 || int(v) >= len(verbNames) {
		return fmt.Sprintf("Verb(%d)", int(v))
	}
	return verbNames[v]
}

// Test is one of the eight perftest programs.
type Test struct {
	Verb Verb
	Lat  bool // a latency test (ib_*_lat); otherwise bandwidth (ib_*_bw)
}

// Tests lists the tests by name, as `goroce bench` takes them.
var Tests = []string{"send_bw", "write_bw", "read_bw", "atomic_bw", "send_lat", "write_lat", "read_lat", "atomic_lat"}

// ErrUsage is matched by errors about options that do not go together or
// are out of range.
var ErrUsage = errors.New("bench: invalid options")

// ErrUDLoss is matched by the error of a UD test whose messages stopped
// coming before all had arrived: UD does not resend what is lost.
var ErrUDLoss = errors.New("bench: UD messages lost")

// UDQuiet is how long a UD test waits, once its messages have begun, for
// the next before it takes the rest as lost. perftest's receiver waits 60
// to 120 seconds; on a path where consecutive messages are microseconds
// apart, a few seconds of silence already means loss.
const UDQuiet = 3 * time.Second

// ErrVerify is matched by errors from data verification.
var ErrVerify = errors.New("bench: data verification failed")

// ParseTest parses a test name: send_bw, write_lat, ...
func ParseTest(name string) (Test, error) {
	verb, kind, ok := strings.Cut(name, "_")
	if ok && (kind == "bw" || kind == "lat") {
		for i, n := range verbNames {
			if n == verb {
				return Test{Verb: Verb(i), Lat: kind == "lat"}, nil
			}
		}
	}
	return Test{}, fmt.Errorf("%w: unknown test %q (want one of %s)", ErrUsage, name, strings.Join(Tests, ", "))
}

func (t Test) String() string {
	if t.Lat {
		return t.Verb.String() + "_lat"
	}
	return t.Verb.String() + "_bw"
}

// Defaults, as perftest's.
const (
	DefaultSizeBW      = 65536
	DefaultSizeLat     = 2
	DefaultSizeAtomic  = 8
	DefaultIters       = 1000
	DefaultTxDepthBW   = 128
	DefaultTxDepthLat  = 1
	DefaultRxDepthSend = 512
	DefaultCQMod       = 100
	CycleBuffer        = 4096 // perftest's default: the page size
	CacheLine          = 64
	MaxSize            = 1 << 23 // perftest's largest size (-a goes up to it)
	// UDQKey is the Q_Key of perftest's UD QPs (DEF_QKEY), on both sides.
	UDQKey = 0x11111111
	// UDMaxRx is perftest's UC_MAX_RX: a UD receiver posts a receive for
	// every message of a run (-n), up to this many, since nothing resends
	// what finds no receive.
	UDMaxRx = 16000
	// grhRoom is the room a UD receive leaves for the GRH before the
	// message (UD_ADDITION): the verbs write the GRH there (for RoCEv2
	// over IPv4, the IPv4 header in its last 20 bytes).
	grhRoom = 40
	// MaxInline and MaxInlineUD bound -I, as perftest's MAX_INLINE and
	// MAX_INLINE_UD.
	MaxInline   = 912
	MaxInlineUD = 884
	// DefaultQPTimeout is perftest's qp_timeout (-u).
	DefaultQPTimeout = 14
)

// Options configure one side of a test. Zero values take perftest's
// defaults (see Defaults).
type Options struct {
	Test   Test
	Client bool // the side that runs the traffic (perftest's client)
	// UD runs the test over UD QPs (-c UD), as perftest: SEND tests only,
	// each message at most one packet (a larger -s is cut to the path
	// MTU), Q_Key UDQKey, and a receiver with a receive posted for every
	// message (RxDepth 0: Iters, up to UDMaxRx). UD does not resend: the
	// server of send_bw reports what arrived and fails when a message is
	// missing (see UDQuiet).
	UD bool
	// Inline sends SEND and WRITE messages of up to this many bytes inline
	// (-I, at most MaxInline; UD at most MaxInlineUD): the QPs take that
	// much inline data, and the data is copied at post time. READ and
	// atomic tests take none, as perftest's.
	Inline int
	// PostList posts the messages of a bandwidth test in lists of this
	// many work requests, one PostSend each (-l; 0: 1). As perftest's,
	// it takes -n a multiple of it, and CQMod 0 becomes it (a completion a
	// list); a CQMod that is set must divide it.
	PostList int
	// NoPeak leaves the peak bandwidth unmeasured, 0 (-N).
	NoPeak bool
	// QPTimeout is the RC QPs' local ACK timeout code (-u: 4.096 µs ×
	// 2^QPTimeout, 1..31); 0: perftest's 14.
	QPTimeout uint8
	// Duplex runs a bandwidth test both ways at once (-b), as perftest:
	// both sides post, and each reports the sum of its rate and the
	// peer's (both sides must set it). RC only.
	Duplex bool
	// Size of each message (-s); 0: 65536 for bandwidth, 2 for latency, 8
	// for atomics (always 8).
	Size int
	// All runs every size from 2 to 2^23 (-a).
	All bool
	// Iters is the number of messages per QP (-n); 0: 1000.
	Iters int
	// Duration runs for this long instead of Iters (-D; RC). The server of
	// send_bw, as perftest's, counts what arrives for as long from the
	// first message on, and keeps its receives posted; each side of
	// send_lat and write_lat runs its own clock from its first message.
	Duration time.Duration
	QPs      int // -q; 0: 1
	TxDepth  int // -t: sends outstanding per QP; 0: 128 (bandwidth), 1 (latency)
	RxDepth  int // -r: receives posted per QP (SEND tests); 0: 512
	CQMod    int // -Q: a completion every CQMod sends (bandwidth); 0: 100
	// MTU is the path MTU to offer (-m); 0: the port's active MTU. The two
	// sides use the smaller.
	MTU verbs.MTU
	// OutReads is the READs and atomics accepted outstanding (-o); 0: the
	// device's max_qp_rd_atom for READ and atomic tests, 1 otherwise.
	OutReads int
	// Atomic is the atomic operation (-A): WRAtomicFetchAndAdd (default) or
	// WRAtomicCmpAndSwp.
	Atomic   verbs.WROpcode
	Port     uint8 // -i; 0: 1
	GIDIndex int   // -x; 0: verbs.DefaultGIDIndex (1, the IPv4-mapped GID of soft devices and rdma_rxe)
	Gbits    bool  // --report_gbits: bandwidth in Gb/sec
	// WarmUp runs perftest's --perform_warm_up before a WRITE, READ or
	// atomic bandwidth test: on each QP a window (TxDepth) of signaled
	// messages, all completed, before the clock starts. It warms what a
	// first window finds cold (caches, the kernel's socket memory, the
	// peer's wake-up), as ucx_perftest's warm-up iterations (-w) do. The
	// raw-UDP baseline (Baseline) takes none: its clock starts at its
	// first datagram.
	WarmUp bool
	// Verify checks the data of SEND, WRITE and READ tests (goroce against
	// goroce only: perftest writes no pattern).
	Verify bool
	// Progress, when set, receives a line a second while a test runs.
	Progress io.Writer
	// Busy polls for completions without ever sleeping: the CQ (or, in
	// write_lat, the memory the peer writes) is polled in a loop that only
	// yields the processor (runtime.Gosched), as perftest's latency tests
	// poll unless given -e. Otherwise a side that found nothing for 50 µs
	// arms the CQ and sleeps on its completion channel (write_lat naps a
	// microsecond between looks). The raw-UDP baseline's ping-pong polls
	// its socket the same way. Pair it with a soft device whose driver
	// polls too (soft.Options.Busy): that is what `goroce bench` does for
	// latency tests unless -e.
	Busy bool
	// BaseACK makes the raw-UDP baseline of a latency test acknowledge
	// every message, as RC does: each side follows its message with a
	// baseAckLen-byte ACK datagram for the one it last received, in a
	// Transmit of its own, as the soft device sends the ACK it held for a
	// message after the reply (soft's ackAside). It is the floor of a
	// transport that acknowledges every message on this path.
	BaseACK bool
}

// Result is one row of the report.
type Result struct {
	Size  int
	Iters uint64
	// Bandwidth tests.
	BWPeak, BWAvg float64 // MB/sec (2^20 bytes) or Gb/sec (Options.Gbits)
	MsgRate       float64 // Mpps
	Remote        bool    // the peer's report (the server of WRITE, READ, atomics)
	// Latency tests, in microseconds.
	// Max is perftest's t_max (the largest after the two dropped); MaxAll
	// the largest of all.
	Min, Max, Typical, Avg, Stdev, P50, P99, P999, MaxAll float64
	// Duration-mode latency: transactions per second.
	TPS float64
	// Verified is set when the run's data was checked and found right.
	Verified bool
}

// Outcome is what Run did.
type Outcome struct {
	Local, Remote []perftest.Dest // per QP
	MTU           verbs.MTU       // the path MTU used
	PeerVersion   string
	RDMACM        bool // the exchange and the data QPs went through rdma_cm (-R)
	Results       []Result
	// Congestion is what the soft device's congestion control did during
	// the run; nil for other devices.
	Congestion *Congestion
}

// Check fills in the defaults and checks o; its errors match ErrUsage. Run
// calls it.
func (o *Options) Check() error { return o.normalize() }

// normalize fills in the defaults and checks o. The steps go in a fixed
// order: of two bad options, the same one is always reported, and a
// default is in place before the checks that use it.
func (o *Options) normalize() error {
	t := o.Test
	if t.Verb < Send || t.Verb > Atomic {
		return fmt.Errorf("%w: test %v", ErrUsage, t)
	}
	if err := o.normalizeSize(); err != nil {
		return err
	}
	if err := o.normalizeRun(); err != nil {
		return err
	}
	if err := o.normalizeTransport(); err != nil {
		return err
	}
	if err := o.normalizeModeration(); err != nil {
		return err
	}
	if err := o.normalizePort(); err != nil {
		return err
	}
	if o.WarmUp && (t.Lat || t.Verb == Send) {
		return fmt.Errorf("%w: --perform_warm_up is valid in WRITE, READ and atomic bandwidth tests", ErrUsage)
	}
	if o.Verify && (o.Duration > 0 || o.All || t.Verb == Atomic) {
		return fmt.Errorf("%w: --verify applies to SEND, WRITE and READ tests with -n", ErrUsage)
	}
	return nil
}

// normalizeSize fills in and checks the message size, and for atomics the
// operation: an atomic is always 8 bytes.
func (o *Options) normalizeSize() error {
	t := o.Test
	if o.Size == 0 {
		o.Size = DefaultSizeBW
		if t.Lat {
			o.Size = DefaultSizeLat
		}
	}
	if t.Verb == Atomic {
		if o.Size != DefaultSizeBW && o.Size != DefaultSizeLat && o.Size != DefaultSizeAtomic {
			return fmt.Errorf("%w: atomics are 8 bytes (-s %d)", ErrUsage, o.Size)
		}
		o.Size = DefaultSizeAtomic
		if o.All {
			return fmt.Errorf("%w: -a does not apply to atomics", ErrUsage)
		}
		switch o.Atomic {
		case 0:
			o.Atomic = verbs.WRAtomicFetchAndAdd
		case verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp:
		default:
			return fmt.Errorf("%w: atomic operation %v", ErrUsage, o.Atomic)
		}
	}
	if o.Size < 1 || o.Size > MaxSize {
		return fmt.Errorf("%w: size %d not in 1..%d", ErrUsage, o.Size, MaxSize)
	}
	return nil
}

// normalizeRun fills in and checks how long the test runs (iterations or
// duration), the QPs and the sends outstanding on each.
func (o *Options) normalizeRun() error {
	t := o.Test
	if o.Iters == 0 {
		o.Iters = DefaultIters
	}
	if o.Iters < 5 || o.Iters > 100_000_000 {
		return fmt.Errorf("%w: iterations %d not in 5..100000000", ErrUsage, o.Iters)
	}
	if o.Duration < 0 {
		return fmt.Errorf("%w: negative duration", ErrUsage)
	}
	if o.Duration > 0 && o.UD {
		return fmt.Errorf("%w: -D runs RC tests", ErrUsage)
	}
	if o.Duration > 0 && o.All {
		return fmt.Errorf("%w: -D and -a together", ErrUsage)
	}
	if o.QPs == 0 {
		o.QPs = 1
	}
	if o.QPs < 1 || o.QPs > 1024 || t.Lat && o.QPs != 1 {
		return fmt.Errorf("%w: %d QPs (latency tests use one; bandwidth tests 1..1024)", ErrUsage, o.QPs)
	}
	if o.TxDepth == 0 {
		o.TxDepth = DefaultTxDepthBW
		if t.Lat {
			o.TxDepth = DefaultTxDepthLat
		}
	}
	if o.TxDepth < 1 || o.TxDepth > 15000 {
		return fmt.Errorf("%w: tx depth %d not in 1..15000", ErrUsage, o.TxDepth)
	}
	return nil
}

// normalizeTransport fills in and checks what the QPs are made with: UD or
// RC, the inline size, the ACK timeout, both directions (-b) and the
// receives posted.
func (o *Options) normalizeTransport() error {
	t := o.Test
	if o.UD && t.Verb != Send {
		return fmt.Errorf("%w: UD connection only possible in SEND tests (send_bw, send_lat)", ErrUsage)
	}
	if o.Inline < 0 || o.Inline > MaxInline {
		return fmt.Errorf("%w: inline size %d not in 0..%d", ErrUsage, o.Inline, MaxInline)
	}
	if t.Verb == Read || t.Verb == Atomic {
		o.Inline = 0 // perftest's rule: nothing to send inline
	}
	if o.UD {
		o.Inline = min(o.Inline, MaxInlineUD)
	}
	if o.QPTimeout == 0 {
		o.QPTimeout = DefaultQPTimeout
	}
	if o.QPTimeout > 31 {
		return fmt.Errorf("%w: QP timeout %d not in 1..31", ErrUsage, o.QPTimeout)
	}
	if o.Duplex && (t.Lat || o.UD || o.Duration > 0 || o.Verify) {
		return fmt.Errorf("%w: -b (bidirectional) runs RC bandwidth tests with -n: not latency tests, UD, -D or --verify", ErrUsage)
	}
	if o.RxDepth == 0 {
		o.RxDepth = DefaultRxDepthSend
		if o.UD {
			o.RxDepth = min(o.Iters, UDMaxRx)
		}
	}
	if o.RxDepth < 1 || o.RxDepth > 16384 {
		return fmt.Errorf("%w: rx depth %d not in 1..16384", ErrUsage, o.RxDepth)
	}
	return nil
}

// normalizeModeration fills in and checks the post list and the CQ
// moderation, which the post list's length sets by default and must be a
// multiple of; neither may exceed the tx depth.
func (o *Options) normalizeModeration() error {
	if o.PostList < 0 || o.PostList > 1024 {
		return fmt.Errorf("%w: post list %d not in 1..1024", ErrUsage, o.PostList)
	}
	if o.PostList > 1 {
		if o.Test.Lat {
			return fmt.Errorf("%w: post list is supported in bandwidth tests only", ErrUsage)
		}
		if o.Duration == 0 && o.Iters%o.PostList != 0 {
			return fmt.Errorf("%w: number of iterations (%d) must be a multiple of post list size (%d)", ErrUsage, o.Iters, o.PostList)
		}
		if o.CQMod == 0 {
			o.CQMod = o.PostList
		} else if o.PostList%o.CQMod != 0 {
			return fmt.Errorf("%w: post list size (%d) must be a multiple of CQ moderation (%d)", ErrUsage, o.PostList, o.CQMod)
		}
	}
	if o.CQMod == 0 {
		o.CQMod = DefaultCQMod
	}
	if o.CQMod < 1 || o.CQMod > 1024 {
		return fmt.Errorf("%w: cq moderation %d not in 1..1024", ErrUsage, o.CQMod)
	}
	if o.CQMod > o.TxDepth {
		o.CQMod = o.TxDepth // perftest does the same
	}
	if o.PostList > o.TxDepth {
		return fmt.Errorf("%w: post list %d longer than the tx depth %d", ErrUsage, o.PostList, o.TxDepth)
	}
	return nil
}

// normalizePort fills in and checks the path's settings: the MTU offered,
// the outstanding reads accepted, the port and the GID index.
func (o *Options) normalizePort() error {
	if o.MTU != 0 && o.MTU.Bytes() == 0 {
		return fmt.Errorf("%w: MTU %d", ErrUsage, o.MTU)
	}
	if o.OutReads < 0 || o.OutReads > 0xFFFF {
		return fmt.Errorf("%w: outstanding reads %d", ErrUsage, o.OutReads)
	}
	if o.Port == 0 {
		o.Port = 1
	}
	if o.GIDIndex == 0 {
		o.GIDIndex = verbs.DefaultGIDIndex
	}
	if o.GIDIndex < 0 {
		return fmt.Errorf("%w: GID index %d (RoCE needs a GID)", ErrUsage, o.GIDIndex)
	}
	return nil
}

// sizes is the list of message sizes of the run.
func (o *Options) sizes() []int {
	if !o.All {
		return []int{o.Size}
	}
	var s []int
	for i := 1; i < 24; i++ {
		s = append(s, 1<<i)
	}
	return s
}

// buffSize is perftest's BUFF_SIZE: a slot of the buffer.
func buffSize(size, cycle int) int { return max(size, cycle) }

// inc is perftest's INC: how far consecutive messages are apart.
func inc(size, cacheLine int) int {
	if size > cacheLine {
		return (size + cacheLine - 1) / cacheLine * cacheLine
	}
	return cacheLine
}

// slotCursor walks slotOffset's offsets for messages 0, 1, 2, ... by
// addition, as perftest steps its addresses: slotOffset's two divisions
// and the signaling test's modulo cost a bandwidth test's post loop 5 ns a
// message.
type slotCursor struct {
	off, step, limit int
}

func newSlotCursor(size, cycle, cacheLine int) slotCursor {
	if size > cycle/2 {
		return slotCursor{}
	}
	in := inc(size, cacheLine)
	return slotCursor{step: in, limit: cycle / in * in}
}

// next returns the offset of the next message.
func (c *slotCursor) next() int {
	off := c.off
	if c.off += c.step; c.off >= c.limit {
		c.off = 0
	}
	return off
}

// slotOffset is where the n-th message of a QP starts within its slot:
// messages no larger than half the cycle buffer advance through it.
func slotOffset(n uint64, size, cycle, cacheLine int) int {
	if size > cycle/2 {
		return 0
	}
	in := inc(size, cacheLine)
	return int(n%uint64(cycle/in)) * in
}

// Run performs one side of the test over vctx's device, with conn to the
// peer, and returns what it measured. ctx bounds the whole test.
func Run(ctx context.Context, vctx verbs.Context, conn *perftest.Conn, o Options) (*Outcome, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	if conn.Client() != o.Client {
		return nil, fmt.Errorf("%w: the connection's side and Options.Client differ", ErrUsage)
	}
	// The exchange blocks in reads and writes: end it when ctx ends.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	s := &session{o: o, vctx: vctx, conn: conn, out: &Outcome{}}
	s.ccStart()
	defer s.close()
	err := s.run(ctx)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	return s.out, err
}

// session is one side of a test.
type session struct {
	o    Options
	vctx verbs.Context
	conn *perftest.Conn
	out  *Outcome

	cycle, cacheLine int
	mtu              verbs.MTU
	maxSize          int
	buff             int // BUFF_SIZE for the largest size

	ch   verbs.CompChannel
	pd   verbs.PD
	cq   verbs.CQ
	mr   verbs.MR
	buf  []byte
	qps  []verbs.QP
	vbuf []byte // verification receive slots (SEND with Verify)
	vmr  verbs.MR
	sq   int // the send queue's depth

	// UD (Options.UD): an AH per QP aimed at the peer's, the largest
	// message (the path MTU), the room a receive leaves for the GRH
	// before its message (grhRoom; 0 for RC), and the room before the
	// receive region that the first receive's GRH takes.
	ahs    []verbs.AH
	udMax  int
	grh    int
	rxHead int

	cmConns []*rdmacm.Conn // the data connections under -R

	rposted []uint64 // receives posted per QP
	rsge    [1]verbs.SGE
	rwr     [1]verbs.RecvWR

	wc [16]verbs.WC

	ccDev  statser      // the device, when it counts what its engine did
	ccFrom engine.Stats // its counters at the start
}

func (s *session) run(ctx context.Context) error {
	o := &s.o
	peer, _, err := s.conn.ExchangeVersions(perftest.Version)
	s.out.PeerVersion = peer
	if err != nil {
		return err
	}
	if s.cycle, s.cacheLine, err = s.conn.ExchangeSysData(CycleBuffer, CacheLine); err != nil {
		return err
	}
	if s.cycle > 1<<20 || s.cacheLine > s.cycle || s.cycle%s.cacheLine != 0 {
		return fmt.Errorf("%w: the peer's cycle buffer %d and cache line %d", perftest.ErrMessage, s.cycle, s.cacheLine)
	}
	pa, err := s.vctx.QueryPort(o.Port)
	if err != nil {
		return fmt.Errorf("couldn't query port %d: %w", o.Port, err)
	}
	mtu := o.MTU
	if mtu == 0 || mtu > pa.ActiveMTU && pa.ActiveMTU != 0 {
		mtu = pa.ActiveMTU
	}
	if mtu.Bytes() == 0 {
		mtu = verbs.MTU1024
	}
	if s.mtu, err = s.conn.ExchangeMTU(mtu); err != nil {
		return err
	}
	s.out.MTU = s.mtu
	if o.UD {
		if _, ok := s.conn.CM(); ok {
			return fmt.Errorf("%w: goroce bench runs UD over the Ethernet exchange, not rdma_cm (-R)", ErrUsage)
		}
		// A UD message is one packet: perftest cuts a larger -s to the
		// MTU, and -a stops there.
		s.udMax = s.mtu.Bytes()
		o.Size = min(o.Size, s.udMax)
	}
	if err := s.setup(pa); err != nil {
		return err
	}
	if info, ok := s.conn.CM(); ok {
		s.out.RDMACM = true
		if err := s.cmConnect(ctx, info); err != nil {
			return err
		}
	}
	return s.script(ctx)
}

// setup creates the resources: ctx_init and set_up_connection.
func (s *session) setup(pa verbs.PortAttr) (err error) {
	o := &s.o
	da, err := s.vctx.QueryDevice()
	if err != nil {
		return fmt.Errorf("couldn't query the device: %w", err)
	}
	gid, err := s.vctx.QueryGID(o.Port, o.GIDIndex)
	if err != nil {
		return fmt.Errorf("couldn't read GID index %d: %w", o.GIDIndex, err)
	}
	s.maxSize = o.Size
	if o.All {
		s.maxSize = MaxSize
		if o.UD {
			s.maxSize = s.udMax
		}
	}
	s.buff = buffSize(s.maxSize, s.cycle)
	qpt := verbs.QPTRC
	if o.UD {
		// A cache line before the receive region (perftest adds one to
		// its buffer too): the GRH room of its first slot.
		qpt, s.grh, s.rxHead = verbs.QPTUD, grhRoom, s.cacheLine
	}
	if s.ch, err = s.vctx.CreateCompChannel(); err != nil {
		return fmt.Errorf("couldn't create a completion channel: %w", err)
	}
	if s.pd, err = s.vctx.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate a PD: %w", err)
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	rx, err := s.regBuffers(access)
	if err != nil {
		return err
	}
	q := o.QPs
	if s.cq, err = s.vctx.CreateCQ(q*(max(o.TxDepth, 16)+rx)+1, s.ch); err != nil {
		return fmt.Errorf("couldn't create a CQ: %w", err)
	}
	s.sq = o.TxDepth
	if o.Test.Lat {
		s.sq = max(o.TxDepth, 16)
	}
	return s.createQPs(pa, gid, qpt, access, rx, s.outReads(da))
}

// regBuffers allocates and registers the buffer, a slot per QP for its
// messages out and one for those in, and with Verify in SEND tests the
// receive slots the messages are checked in. It returns the receives each
// QP takes: RxDepth in SEND tests, otherwise 1.
func (s *session) regBuffers(access verbs.AccessFlags) (rx int, err error) {
	o := &s.o
	q := o.QPs
	s.buf = make([]byte, 2*q*s.buff+s.rxHead)
	packetio.Prefault(s.buf) // the peer's first WRITEs or READ responses then take no page faults
	if s.mr, err = s.pd.RegMR(s.buf, access); err != nil {
		return 0, fmt.Errorf("couldn't register the buffer: %w", err)
	}
	rx = 1
	if o.Test.Verb == Send {
		rx = o.RxDepth
		if o.Verify {
			s.vbuf = make([]byte, q*rx*inc(s.maxSize+s.grh, s.cacheLine))
			packetio.Prefault(s.vbuf)
			if s.vmr, err = s.pd.RegMR(s.vbuf, verbs.AccessLocalWrite); err != nil {
				return 0, fmt.Errorf("couldn't register the receive slots: %w", err)
			}
		}
	}
	return rx, nil
}

// outReads is the READs and atomics each QP accepts outstanding, as this
// side offers it to the peer: Options.OutReads, by default the device's
// max_qp_rd_atom for READ and atomic tests and 1 for the others, at most
// the device's.
func (s *session) outReads(da verbs.DeviceAttr) int {
	outReads := s.o.OutReads
	if outReads == 0 {
		outReads = 1
		if s.o.Test.Verb == Read || s.o.Test.Verb == Atomic {
			outReads = da.MaxQPRdAtom
		}
	}
	return min(outReads, da.MaxQPRdAtom, 0xFFFF)
}

// createQPs creates the QPs of type qpt, with rx receives each, brings
// them to INIT and records each one's keys for the peer (Outcome.Local):
// its number, a random PSN, the buffer's R_Key and the address of its
// slot for the peer's messages, with the port's LID, the GID and
// outReads.
func (s *session) createQPs(pa verbs.PortAttr, gid verbs.GID, qpt verbs.QPType, access verbs.AccessFlags, rx, outReads int) error {
	o := &s.o
	q := o.QPs
	for i := 0; i < q; i++ {
		qp, err := s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: qpt,
			Cap: verbs.QPCap{MaxSendWR: uint32(s.sq), MaxRecvWR: uint32(rx), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: uint32(o.Inline)}})
		if err != nil {
			return fmt.Errorf("couldn't create QP %d: %w", i, err)
		}
		s.qps = append(s.qps, qp)
		init := verbs.QPAttr{State: verbs.QPSInit, PKeyIndex: 0, PortNum: o.Port, AccessFlags: access}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
		if o.UD {
			init.AccessFlags, init.QKey = 0, UDQKey
			mask = mask&^verbs.AttrAccessFlags | verbs.AttrQKey
		}
		if err := qp.Modify(&init, mask); err != nil {
			return fmt.Errorf("failed to modify QP %d to INIT: %w", i, err)
		}
		s.out.Local = append(s.out.Local, perftest.Dest{LID: pa.LID, OutReads: uint16(outReads), QPN: qp.Num(),
			PSN: rand.Uint32() & 0xFFFFFF, RKey: s.mr.RKey(), VAddr: s.mr.Addr() + uint64((q+i)*s.buff), GID: gid})
	}
	s.out.Remote = make([]perftest.Dest, q)
	return nil
}

// hand exchanges keys for QP i; record keeps what the peer sent.
func (s *session) hand(i int) error {
	d, err := s.conn.HandShake(s.out.Local[i])
	if err != nil {
		return err
	}
	s.out.Remote[i] = d
	return nil
}

// connect brings every QP to RTS aimed at the peer's: ctx_connect.
func (s *session) connect() error {
	o := &s.o
	if len(s.cmConns) > 0 {
		return nil // rdma_cm connected them
	}
	da, err := s.vctx.QueryDevice()
	if err != nil {
		return err
	}
	for i, qp := range s.qps {
		l, r := s.out.Local[i], s.out.Remote[i]
		if l.GID.Addr().Is4() != r.GID.Addr().Is4() {
			return fmt.Errorf("the peer's GID %v and ours %v are not of the same IP version", r.GID, l.GID)
		}
		var zero [8]byte
		if [8]byte(r.GID[8:]) == zero {
			return fmt.Errorf("the peer sent no GID (%v): RoCE needs one; give it a GID index (-x; on rdma_rxe over IPv4 the IPv4-mapped GID's index, often 1)", r.GID)
		}
		ah := verbs.AHAttr{DGID: r.GID, SGIDIndex: uint8(o.GIDIndex), HopLimit: 0xFF, PortNum: o.Port}
		if o.UD {
			if err := s.connectUD(i, qp, &ah); err != nil {
				return err
			}
			continue
		}
		rtr := verbs.QPAttr{State: verbs.QPSRTR, PathMTU: s.mtu, DestQPN: r.QPN, RQPSN: r.PSN,
			MaxDestRdAtomic: uint8(min(int(l.OutReads), 255)), MinRNRTimer: 12, AHAttr: ah}
		if err := qp.Modify(&rtr, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|
			verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
			return fmt.Errorf("failed to modify QP %d to RTR: %w", i, err)
		}
		rd := max(1, min(int(r.OutReads), da.MaxQPInitRdAtom, 255))
		rts := verbs.QPAttr{State: verbs.QPSRTS, Timeout: o.QPTimeout, RetryCnt: 7, RNRRetry: 7, SQPSN: l.PSN, MaxRdAtomic: uint8(rd)}
		if err := qp.Modify(&rts, verbs.AttrState|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|
			verbs.AttrSQPSN|verbs.AttrMaxQPRdAtomic); err != nil {
			return fmt.Errorf("failed to modify QP %d to RTS: %w", i, err)
		}
	}
	return nil
}

// connectUD brings UD QP i to RTS and makes the AH its sends go to, as
// perftest's ctx_modify_qp_to_rtr/rts for UD: RTR and RTS with nothing but
// the send PSN, the peer's address in the AH.
func (s *session) connectUD(i int, qp verbs.QP, ah *verbs.AHAttr) error {
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState); err != nil {
		return fmt.Errorf("failed to modify QP %d to RTR: %w", i, err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: s.out.Local[i].PSN}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
		return fmt.Errorf("failed to modify QP %d to RTS: %w", i, err)
	}
	a, err := s.pd.CreateAH(ah)
	if err != nil {
		return fmt.Errorf("failed to create AH %d: %w", i, err)
	}
	s.ahs = append(s.ahs, a)
	return nil
}

// sizes is the list of message sizes of the run: Options.sizes, up to the
// path MTU under UD.
func (s *session) sizes() []int {
	all := s.o.sizes()
	if s.udMax == 0 {
		return all
	}
	var r []int
	for _, n := range all {
		if n <= s.udMax {
			r = append(r, n)
		}
	}
	return r
}

// script runs the program's sequence of handshakes, traffic and reports:
// each perftest program has its own (see its main).
func (s *session) script(ctx context.Context) error {
	if err := s.handshakes(); err != nil {
		return err
	}
	o, t := &s.o, s.o.Test
	switch {
	case o.Duplex && t.Verb != Send: // write_bw, read_bw, atomic_bw -b
		return s.scriptDuplex(ctx)
	case !t.Lat && t.Verb != Send:
		return s.scriptBW(ctx)
	case t.Verb == Send:
		return s.scriptSend(ctx)
	case t.Verb == Write: // write_lat: no exchange after the test
		for _, size := range s.sizes() {
			r, err := s.runWriteLat(ctx, size)
			if err != nil {
				return err
			}
			s.out.Results = append(s.out.Results, r)
		}
		return nil
	default: // read_lat, atomic_lat: the server only waits
		if !o.Client {
			return s.finish()
		}
		for _, size := range s.sizes() {
			r, err := s.runReadAtomicLat(ctx, size)
			if err != nil {
				return err
			}
			s.out.Results = append(s.out.Results, r)
		}
		return s.finish()
	}
}

// handshakes runs the program's handshakes before its traffic, the QPs'
// connection among them, in the program's order. The data goes in place
// before the peer can reach it: a READ may start as soon as the last
// handshake is through.
func (s *session) handshakes() error {
	o := &s.o
	var seq []func() error
	switch {
	case !o.Test.Lat && o.Test.Verb != Send: // write_bw, read_bw, atomic_bw
		seq = []func() error{s.handEach, s.connect, s.handEach, s.handOne}
	case o.Test.Verb == Send: // send_bw, send_lat
		seq = []func() error{s.handEach, s.connect, s.handOne, s.handEach}
	default: // write_lat, read_lat, atomic_lat
		seq = []func() error{s.handOne, s.handEach, s.connect, s.handEach, s.handOne}
	}
	s.fill()
	for i, f := range seq {
		if i == len(seq)-1 {
			// The test starts after this handshake: collect now what
			// the setup left, so that no garbage collection (tens of
			// milliseconds here, over the tables' globals) runs during it.
			runtime.GC()
		}
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// handEach exchanges the keys of every QP, a handshake each.
func (s *session) handEach() error {
	for i := 0; i < s.o.QPs; i++ {
		if err := s.hand(i); err != nil {
			return err
		}
	}
	return nil
}

// handOne is a handshake with the first QP's keys alone: the programs'
// way of keeping the two sides in step.
func (s *session) handOne() error { return s.hand(0) }

// finish ends the exchange with the peer (perftest.Conn.Finish), waiting
// up to 2 seconds for the peer's end.
func (s *session) finish() error { return s.conn.Finish(s.out.Local[0], 2*time.Second) }

// scriptDuplex is write_bw's, read_bw's and atomic_bw's sequence with -b:
// both sides run each size, after a handshake, and exchange their reports
// (addPeer).
func (s *session) scriptDuplex(ctx context.Context) error {
	for _, size := range s.sizes() {
		if err := s.handOne(); err != nil {
			return err
		}
		r, err := s.runBW(ctx, size)
		if err != nil {
			return err
		}
		if s.o.All {
			// perftest 4.6 and later sync after each size of -a too
			// (its version, 6.06, is what the peer compares).
			if err := s.handOne(); err != nil {
				return err
			}
		}
		if err := s.addPeer(&r); err != nil {
			return err
		}
	}
	return s.finish()
}

// scriptBW is write_bw's, read_bw's and atomic_bw's sequence: the client
// runs every size, then a handshake and the exchange of reports, in which
// it sends the last size's figures; the server waits for the handshake,
// checks what was written, and reports the client's row as its own.
func (s *session) scriptBW(ctx context.Context) error {
	o := &s.o
	if !o.Client {
		// The client runs; its sync comes when it is done.
		if err := s.handOne(); err != nil {
			return err
		}
		if err := s.checkTargets(); err != nil {
			return err
		}
		rep, err := s.conn.ExchangeReports(perftest.Report{})
		if err != nil {
			return err
		}
		s.out.Results = append(s.out.Results, Result{Size: int(rep.Size), Iters: rep.Iters, BWPeak: rep.BWPeak,
			BWAvg: rep.BWAvg, MsgRate: rep.MsgRate, Remote: true, Verified: o.Verify})
		return s.finish()
	}
	var last Result
	for _, size := range s.sizes() {
		r, err := s.runBW(ctx, size)
		if err != nil {
			return err
		}
		s.out.Results = append(s.out.Results, r)
		last = r
	}
	if err := s.handOne(); err != nil {
		return err
	}
	if _, err := s.conn.ExchangeReports(perftest.Report{Size: uint64(last.Size), Iters: last.Iters,
		BWPeak: last.BWPeak, BWAvg: last.BWAvg, MsgRate: last.MsgRate}); err != nil {
		return err
	}
	return s.finish()
}

// scriptSend is send_bw's and send_lat's sequence: for each size the
// receives are posted where messages come in, a handshake, the run, and
// under -a (bandwidth) another handshake.
func (s *session) scriptSend(ctx context.Context) error {
	o, t := &s.o, s.o.Test
	sizes := s.sizes()
	for k, size := range sizes {
		if !o.Client || t.Lat || o.Duplex {
			if err := s.postRecvs(size); err != nil {
				return err
			}
		}
		if err := s.handOne(); err != nil {
			return err
		}
		r, err := s.runSend(ctx, size)
		if errors.Is(err, ErrUDLoss) && !t.Lat {
			// The server of send_bw reports what arrived and ends the
			// exchange as after any run: the client, whose sends all
			// completed, cannot know of the loss, and ends cleanly.
			s.out.Results = append(s.out.Results, r)
			if ferr := s.finish(); ferr != nil {
				return fmt.Errorf("%w; then: %w", err, ferr)
			}
			return err
		}
		if err != nil {
			return err
		}
		if o.Duplex {
			if err := s.addPeer(&r); err != nil {
				return err
			}
		} else {
			s.out.Results = append(s.out.Results, r)
		}
		if o.All && !t.Lat && k < len(sizes) {
			if err := s.handOne(); err != nil {
				return err
			}
		}
	}
	return s.finish()
}

// runSend runs a SEND test's size on this side: send_lat's ping-pong,
// send_bw's client (with -b, both sides), or send_bw's server.
func (s *session) runSend(ctx context.Context, size int) (Result, error) {
	switch {
	case s.o.Test.Lat:
		return s.runSendLat(ctx, size)
	case s.o.Client || s.o.Duplex:
		return s.runBW(ctx, size)
	default:
		return s.runSendServer(ctx, size)
	}
}

// addPeer completes a bidirectional run's row (print_full_bw_report with
// the peer's report): the two sides' reports are exchanged, and the row is
// the sum of both directions' rates, with this side's iterations.
func (s *session) addPeer(r *Result) error {
	rem, err := s.conn.ExchangeReports(perftest.Report{Size: uint64(r.Size), Iters: r.Iters,
		BWPeak: r.BWPeak, BWAvg: r.BWAvg, MsgRate: r.MsgRate})
	if err != nil {
		return err
	}
	if rem.Size != uint64(r.Size) {
		return fmt.Errorf("%w: the peer reports %d-byte messages, this side ran %d", perftest.ErrMessage, rem.Size, r.Size)
	}
	r.BWPeak += rem.BWPeak
	r.BWAvg += rem.BWAvg
	r.MsgRate += rem.MsgRate
	s.out.Results = append(s.out.Results, *r)
	return nil
}

// close releases everything, the QPs first; an RC side first lets the link
// go quiet so that the last ACKs leave before the QPs are gone.
func (s *session) close() {
	s.cmClose()
	if len(s.qps) > 0 {
		s.drain()
	}
	s.ccEnd()
	for _, qp := range s.qps {
		qp.Destroy()
	}
	for _, a := range s.ahs {
		a.Destroy()
	}
	if s.cq != nil {
		s.cq.Destroy()
	}
	if s.mr != nil {
		s.mr.Dereg()
	}
	if s.vmr != nil {
		s.vmr.Dereg()
	}
	if s.pd != nil {
		s.pd.Dealloc()
	}
	if s.ch != nil {
		s.ch.Destroy()
	}
}
