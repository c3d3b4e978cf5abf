package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/goroce/goroce/cm/perftest"
	"github.com/goroce/goroce/internal/bench"
	"github.com/goroce/goroce/internal/cliflag"
	"github.com/goroce/goroce/internal/devinfo"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// benchConfig holds `goroce bench`'s flags, named as perftest names them.
type benchConfig struct {
	opts      bench.Options
	host      string
	port      int
	devName   string
	ibPort    int
	mtu       int
	duration  int
	qpTimeout int // -u
	sl        int // -S: accepted, no effect on RoCEv2
	atomic    string
	conn      string
	json      bool
	loopback  bool
	baseline  bool
	rdmaCM    bool
	events    bool // -e: wait on completion channels, not busily
	timeout   time.Duration
	cpuProf   string // --cpuprofile: write a CPU profile of the run here
	soft      devinfo.Soft
	stderr    io.Writer
}

func benchUsage(w io.Writer) {
	fmt.Fprintf(w, `usage: goroce bench TEST [flags]          start a server and wait for a client
       goroce bench TEST [flags] HOST     run the test against the server at HOST
       goroce bench TEST --loopback [flags]   both sides in this process, two soft devices

TEST is one of %s.
perftest's ib_<TEST> over goroce's soft device: the same flags where they
apply, out-of-band exchange (TCP port 18515) and result table, so that either
side may be perftest. Run "goroce bench write_bw -h" for the flags.
`, strings.Join(bench.Tests, " "))
}

// runBench is `goroce bench TEST`: perftest's ib_<TEST> on the device -d
// names (default the soft device), or its raw-UDP baseline.
func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		benchUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		benchUsage(stdout)
		return 0
	}
	test, err := bench.ParseTest(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "goroce bench:", err)
		benchUsage(stderr)
		return 2
	}
	c := benchConfig{opts: bench.Options{Test: test}, stderr: stderr}
	name := "bench " + args[0]
	fs := c.flagSet(name)
	host, code, ok := cliflag.ParseHost(fs, args[1:])
	if !ok {
		return code
	}
	c.host = host
	if err := c.check(fs); err != nil {
		fmt.Fprintf(stderr, "goroce %s: %v\n", name, err)
		return 2
	}
	return c.run(name, stdout)
}

// flagSet returns the flag set of `goroce bench TEST`, name being
// "bench TEST", with its flags bound to c and its usage going to c.stderr.
func (c *benchConfig) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	registerSoft(fs, &c.soft)
	c.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "usage: goroce %s [flags]         start a server and wait for a client\n       goroce %s [flags] HOST    run against the server at HOST\n\nflags:\n", name, name)
		fs.PrintDefaults()
	}
	return fs
}

// register registers perftest's flags, under perftest's short and long
// names, and goroce's own (--loopback, --baseline, --json, ...) on fs.
func (c *benchConfig) register(fs *flag.FlagSet) {
	o := &c.opts
	intAlias(fs, "p", "port", perftest.Port, "listen on/connect to TCP port `port`", &c.port)
	fs.StringVar(&c.devName, "d", "", "use device `dev` (default: the first device found, "+softName+")")
	fs.StringVar(&c.devName, "ib-dev", "", "same as -d")
	intAlias(fs, "i", "ib-port", 1, "use `port` of the device", &c.ibPort)
	intAlias(fs, "x", "gid-index", verbs.DefaultGIDIndex, "local port GID `index` (soft devices, as rdma_rxe: 0 the link-local IPv6 GID, 1 the IPv4-mapped address, then the interface's IPv6 addresses: 2 for RoCEv2 over IPv6 from --addr on an interface with one IPv4 address)", &o.GIDIndex)
	intAlias(fs, "s", "size", 0, "size of message to exchange (default: 65536 for bandwidth, 2 for latency, 8 for atomics)", &o.Size)
	fs.BoolVar(&o.All, "a", false, "run sizes from 2 till 2^23")
	intAlias(fs, "I", "inline_size", 0, "max `size` of message to be sent inline (SEND and WRITE; 0..912, UD 884)", &o.Inline)
	intAlias(fs, "l", "post_list", 1, "post lists of `n` work requests (bandwidth tests; -n a multiple of it; -Q defaults to it)", &o.PostList)
	fs.BoolVar(&o.NoPeak, "N", false, "don't measure peak bandwidth (it prints as 0)")
	fs.BoolVar(&o.NoPeak, "noPeak", false, "same as -N")
	intAlias(fs, "u", "qp-timeout", bench.DefaultQPTimeout, "QP `timeout` code: the ACK timeout is 4.096 µs * 2^timeout (1..31)", &c.qpTimeout)
	intAlias(fs, "S", "sl", 0, "service `level` (accepted; RoCEv2 packets carry none, and rdma_rxe ignores it too)", &c.sl)
	fs.BoolVar(&o.Duplex, "b", false, "measure bidirectional bandwidth (bandwidth tests, RC; both sides must give it): each side reports the sum of both directions")
	fs.BoolVar(&o.Duplex, "bidirectional", false, "same as -b")
	fs.BoolVar(&o.All, "all", false, "same as -a")
	intAlias(fs, "n", "iters", bench.DefaultIters, "number of exchanges (at least 5)", &o.Iters)
	intAlias(fs, "D", "duration", 0, "run the test for a customized period of `seconds` (RC)", &c.duration)
	intAlias(fs, "q", "qp", 1, "num of QPs running in the process (bandwidth tests)", &o.QPs)
	intAlias(fs, "t", "tx-depth", 0, "size of tx queue (default: 128 for bandwidth, 1 for latency)", &o.TxDepth)
	intAlias(fs, "r", "rx-depth", bench.DefaultRxDepthSend, "rx queue size (SEND tests; with -c UD default: a receive for every message, -n, up to 16000)", &o.RxDepth)
	intAlias(fs, "Q", "cq-mod", bench.DefaultCQMod, "generate a CQE every `n` requests (bandwidth tests)", &o.CQMod)
	intAlias(fs, "m", "mtu", 0, "path MTU in bytes (256..4096; default: the port's active MTU)", &c.mtu)
	intAlias(fs, "o", "outs", 0, "num of outstanding reads/atomics (default: the device's max for READ and atomic tests)", &o.OutReads)
	var cpuFreq bool
	fs.BoolVar(&cpuFreq, "F", false, "do not fail on a CPU frequency warning (accepted; goroce reads an invariant TSC calibrated against the monotonic clock, or the monotonic clock)")
	fs.BoolVar(&cpuFreq, "CPU-freq", false, "same as -F")
	fs.BoolVar(&o.Gbits, "report_gbits", false, "report bandwidth in Gb/sec instead of MB/sec")
	fs.BoolVar(&o.WarmUp, "perform_warm_up", false, "perform a window of iterations before measuring, to warm up caches (write_bw, read_bw, atomic_bw)")
	fs.StringVar(&c.atomic, "A", "FETCH_AND_ADD", "atomic `type`: CMP_AND_SWAP or FETCH_AND_ADD")
	fs.StringVar(&c.atomic, "atomic_type", "FETCH_AND_ADD", "same as -A")
	fs.StringVar(&c.conn, "c", "RC", "connection `type`: RC, or UD for send_bw and send_lat (messages of one packet: -s is cut to the path MTU)")
	fs.StringVar(&c.conn, "connection", "RC", "same as -c")
	fs.BoolVar(&c.json, "json", false, "print the results as JSON instead of the table")
	fs.BoolVar(&c.loopback, "loopback", false, "run both sides in this process on two soft devices: --addr (default 127.0.0.1) and the next address")
	fs.BoolVar(&c.baseline, "baseline", false, "run the raw-UDP equivalent of the test instead (send/write/read_bw, send/write_lat): the same packet sizes and window as plain datagrams on the same UDP path, for comparison")
	fs.BoolVar(&o.BaseACK, "baseline-ack", false, "with --baseline on a latency test: each side follows its message with a 16-byte ACK datagram in a send of its own, as an RC responder's ACK follows its reply (the floor of a transport that acknowledges every message)")
	fs.BoolVar(&c.rdmaCM, "R", false, "connect through rdma_cm (perftest's -R): the exchange over an RC connection to rdma_cm port -p, then one rdma_cm connection per QP")
	fs.BoolVar(&c.rdmaCM, "rdma_cm", false, "same as -R")
	fs.BoolVar(&o.Verify, "verify", false, "check the data of SEND, WRITE and READ tests (goroce on both sides)")
	fs.DurationVar(&c.timeout, "timeout", 0, "give up after this long (default: never, as perftest)")
	fs.BoolVar(&c.events, "e", false, "sleep on CQ events: latency tests then arm the CQ and wait on its completion channel after 50 µs without a completion, and the soft device's driver blocks when idle (default for latency tests: poll busily, a processor per side, as perftest)")
	fs.BoolVar(&c.events, "events", false, "same as -e")
	fs.StringVar(&c.cpuProf, "cpuprofile", "", "write a CPU profile of this side's run to `file` (go tool pprof reads it; scripts/pgo-profile.sh merges such profiles into the build's default.pgo)")
}

// check checks the parsed flags and sets the options they stand for in
// c.opts. Its error, a usage error, is the message to print after
// "goroce bench TEST: ".
func (c *benchConfig) check(fs *flag.FlagSet) error {
	if err := c.checkNumbers(fs); err != nil {
		return err
	}
	if err := c.checkTypes(fs); err != nil {
		return err
	}
	return c.checkCombination()
}

// checkNumbers checks the ranges of the numeric flags that bench.Options
// does not check itself (ports, MTU, QP timeout, service level, duration)
// and converts them into c.opts. With a post list (-l) and no -Q, it asks
// for a completion a list (CQMod 0), as perftest does.
func (c *benchConfig) checkNumbers(fs *flag.FlagSet) error {
	o := &c.opts
	if c.port < 0 || c.port > 65535 {
		return fmt.Errorf("port %d out of range", c.port)
	}
	if c.ibPort < 1 || c.ibPort > 255 {
		return fmt.Errorf("IB port %d out of range", c.ibPort)
	}
	o.Port = uint8(c.ibPort)
	if c.mtu != 0 {
		if o.MTU = verbs.MTUFromBytes(c.mtu); o.MTU == 0 {
			return fmt.Errorf("MTU %d: want 256, 512, 1024, 2048 or 4096", c.mtu)
		}
	}
	if o.PostList > 1 && !cliflag.Given(fs, "Q", "cq-mod") {
		o.CQMod = 0 // perftest's: a completion a list
	}
	if c.qpTimeout < 1 || c.qpTimeout > 31 {
		return fmt.Errorf("QP timeout %d: want 1..31 (0, no retransmission timer, is not supported)", c.qpTimeout)
	}
	o.QPTimeout = uint8(c.qpTimeout)
	if c.sl < 0 || c.sl > 15 {
		return fmt.Errorf("service level %d: want 0..15", c.sl)
	}
	if c.duration < 0 || c.duration == 0 && cliflag.Given(fs, "D", "duration") {
		// As perftest: -D takes seconds above 0; without it the run is
		// counted in iterations.
		return fmt.Errorf("duration %d: want seconds above 0", c.duration)
	}
	o.Duration = time.Duration(c.duration) * time.Second
	return nil
}

// checkTypes parses the atomic type (-A) and the connection type (-c)
// into c.opts. UD, for SEND tests only, posts a receive for every message
// unless -r says otherwise.
func (c *benchConfig) checkTypes(fs *flag.FlagSet) error {
	o := &c.opts
	switch strings.ToUpper(c.atomic) {
	case "FETCH_AND_ADD":
		o.Atomic = verbs.WRAtomicFetchAndAdd
	case "CMP_AND_SWAP":
		o.Atomic = verbs.WRAtomicCmpAndSwp
	default:
		return fmt.Errorf("atomic type %q: want CMP_AND_SWAP or FETCH_AND_ADD", c.atomic)
	}
	switch strings.ToUpper(c.conn) {
	case "RC":
	case "UD":
		if o.Test.Verb != bench.Send {
			return errors.New("UD connection only possible in SEND tests (send_bw, send_lat)")
		}
		o.UD = true
		if !cliflag.Given(fs, "r", "rx-depth") {
			o.RxDepth = 0 // bench's UD default: a receive for every message (Options.UD)
		}
	case "UC", "XRC", "DC", "SRD":
		return fmt.Errorf("connection type %s is not supported: goroce bench runs RC and UD", c.conn)
	default:
		return fmt.Errorf("unknown connection type %q", c.conn)
	}
	return nil
}

// checkCombination refuses the modes that do not go together (--loopback,
// --baseline, --baseline-ack, -c UD, -R, a HOST) and then the options
// bench.Options.Check refuses.
func (c *benchConfig) checkCombination() error {
	o := &c.opts
	if c.loopback && c.host != "" {
		return errors.New("--loopback takes no HOST")
	}
	if c.baseline && c.loopback {
		return errors.New("--baseline runs between two hosts (or namespaces), not with --loopback")
	}
	if o.BaseACK && !c.baseline {
		return errors.New("--baseline-ack goes with --baseline")
	}
	if o.BaseACK && !o.Test.Lat {
		return errors.New("--baseline-ack is for latency tests (send_lat, write_lat): a bandwidth baseline acknowledges as RoCE does already")
	}
	if o.UD && (c.rdmaCM || c.baseline) {
		return errors.New("-c UD runs over the Ethernet exchange on the soft device: not with -R or --baseline")
	}
	if c.rdmaCM && c.baseline {
		return errors.New("--baseline runs over TCP and UDP, not rdma_cm (-R)")
	}
	if chk := c.opts; chk.Check() != nil {
		return fmt.Errorf("%v", chk.Check())
	}
	return nil
}

// tune sets how the run waits and spins: progress to c.stderr, busy
// polling for latency tests without -e, and no driver spin where the
// test's own loop drives the packet path.
func (c *benchConfig) tune() {
	o := &c.opts
	o.Progress = c.stderr
	o.Busy = o.Test.Lat && !c.events // perftest polls unless -e; its bandwidth tests here always may sleep
	c.soft.Busy = o.Busy
	passive := c.host == "" && !c.loopback && o.Test.Verb != bench.Send
	if !o.Test.Lat && !passive {
		// Bandwidth tests: the test's own posts and polls drive the packet
		// path (inline); a driver polling beside them takes the processor
		// they need where there are few (2.2x the 64 B message rate on 2).
		// The server of a WRITE, READ or atomic test runs no loop: its
		// driver keeps its spin, taking the next packets without a
		// wake-up (1.15x the 64 B WRITE rate).
		c.soft.Spin = -1
	}
}

// run runs the checked configuration: this side, or both with --loopback,
// on one thread unless GOMAXPROCS is set, under the CPU profile
// --cpuprofile asks for. It prints the error, if any, after
// "goroce bench TEST: " and returns the exit code: 2 for a usage error the
// run reports (bench.ErrUsage), such as settings the baseline does not
// cover, 1 for any other error.
func (c *benchConfig) run(name string, stdout io.Writer) int {
	c.tune()
	if os.Getenv("GOMAXPROCS") == "" {
		// One thread per side, as perftest's. In a latency test the
		// device's driver and the test's poll loop take turns
		// (runtime.Gosched) instead of spinning on two processors, which on
		// a machine without two free ones time-slices them into
		// milliseconds-long stalls. In a bandwidth test the hand-offs
		// between the test's goroutine and the driver are goroutine
		// switches instead of thread wake-ups (futex): 2x the 64-byte
		// message rate between two namespaces on 2 processors, 1.3x at
		// 64 KiB.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	if c.cpuProf != "" {
		stop, err := startCPUProfile(c.cpuProf)
		if err != nil {
			fmt.Fprintf(c.stderr, "goroce %s: %v\n", name, err)
			return 1
		}
		defer stop()
	}
	var err error
	if c.loopback {
		err = runBenchLoopback(c, stdout)
	} else {
		err = runBenchSide(c, stdout)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "goroce %s: %v\n", name, err)
		if errors.Is(err, bench.ErrUsage) {
			return 2
		}
		return 1
	}
	return 0
}

// startCPUProfile starts writing a CPU profile to path and returns what
// stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func (c *benchConfig) context() (context.Context, context.CancelFunc) {
	if c.timeout > 0 {
		return context.WithTimeout(context.Background(), c.timeout)
	}
	return context.WithCancel(context.Background())
}

// side is how this side connects and reports.
func (c *benchConfig) side(stdout io.Writer) bench.Side {
	return bench.Side{Host: c.host, Port: c.port, CM: c.rdmaCM, JSON: c.json, Out: stdout, Log: c.stderr}
}

// runBenchSide runs one side (bench.RunSide) on the device -d names, or the
// raw-UDP baseline (bench.RunBaselineSide) on the UDP path of --addr.
func runBenchSide(c *benchConfig, stdout io.Writer) error {
	ctx, cancel := c.context()
	defer cancel()
	if c.baseline {
		// No device: the raw-UDP baseline uses the packet path alone.
		addr, ifMTU, err := c.soft.Resolve()
		if err != nil {
			return err
		}
		ucon, err := udp.Listen(addr, udp.Options{})
		if err != nil {
			return err
		}
		defer ucon.Close()
		if c.opts.MTU == 0 {
			c.opts.MTU = soft.PortMTU(ifMTU) // the path MTU a soft device there would use
		}
		return bench.RunBaselineSide(ctx, ucon, c.opts, c.side(stdout))
	}
	dev, _, closeDev, err := c.soft.OpenDevice(c.devName)
	if err != nil {
		return err
	}
	defer closeDev()
	return bench.RunSide(ctx, dev, c.opts, c.side(stdout))
}

// runBenchLoopback runs both sides in this process (bench.RunLoopback), on
// two soft devices (devinfo.Soft.OpenPair): the server on --addr (default
// 127.0.0.1), the client on the next address. The client's report is printed.
func runBenchLoopback(c *benchConfig, stdout io.Writer) error {
	ctx, cancel := c.context()
	defer cancel()
	srvDev, cliDev, a, err := c.soft.OpenPair()
	if err != nil {
		return err
	}
	defer srvDev.Close()
	defer cliDev.Close()
	return bench.RunLoopback(ctx, srvDev, cliDev, a, c.opts, c.side(stdout))
}
