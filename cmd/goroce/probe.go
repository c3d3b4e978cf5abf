package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/cliflag"
	"github.com/goroce/goroce/internal/devinfo"
	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/ping"
)

// runProbe is `goroce probe`: the fabric prober's subcommands.
func runProbe(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		probeUsage(stderr)
		return 2
	}
	switch args[0] {
	case "once":
		return runProbeOnce(context.Background(), args[1:], stdout, stderr)
	case "responder":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runProbeResponder(ctx, args[1:], stdout, stderr)
	case "agent":
		return runProbeAgent(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		probeUsage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "goroce probe: unknown subcommand %q\n", args[0])
	probeUsage(stderr)
	return 2
}

func probeUsage(w io.Writer) {
	fmt.Fprint(w, `usage: goroce probe once [flags] HOST...   probe responders, print each probe and a summary
       goroce probe responder [flags]      answer probes and serve `+probe.SelfPath+`
       goroce probe agent [flags]          probe a pinglist continuously, export metrics

Probes are RoCEv2 UD SENDs in rpingmesh's v1 format (Q_Key 0x11111111), answered with
two ACKs; each result splits the round trip into the network RTT, the prober's delay and
the responder's. Run "goroce probe SUBCOMMAND -h" for the flags.
`)
}

// deviceFlags selects the device of a probe subcommand: a libibverbs
// device by -d in an ibverbs build, else the soft device on --addr.
type deviceFlags struct {
	dev  string
	soft devinfo.Soft
}

func (d *deviceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.dev, "d", "", "RDMA device `dev` (default: the soft device "+softName+"; a libibverbs device such as rxe0 in an ibverbs build)")
	fs.StringVar(&d.dev, "ib-dev", "", "same as -d")
	registerSoft(fs, &d.soft)
}

// onceConfig holds the flags of goroce probe once.
type onceConfig struct {
	dev      deviceFlags
	count    int
	interval time.Duration
	timeout  time.Duration
	labels   int
	paths    int
	prob     float64
	seed     uint64
	qpn      uint
	httpPort int
	json     bool
}

// runProbeOnce is `goroce probe once`: it probes the responders of the
// hosts args names and prints each probe and a summary per host. It
// returns 1 when a probe was lost or failed, 2 on usage or setup errors.
func runProbeOnce(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c onceConfig
	fs := c.flagSet(stderr)
	if code, ok := cliflag.Parse(fs, args); !ok {
		return code
	}
	hosts := fs.Args()
	if len(hosts) == 0 {
		fs.Usage()
		return 2
	}
	if err := c.check(); err != nil {
		fmt.Fprintln(stderr, "goroce probe once:", err)
		return 2
	}
	labels := ping.Labels(c.labels, c.paths, c.prob, c.seed)
	if !cliflag.Given(fs, "c", "count") {
		c.count = ping.DefaultCount
		if c.paths > 0 || c.labels > 0 {
			c.count = len(labels)
		}
	}
	lossy, err := c.probe(ctx, hosts, labels, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "goroce probe once:", err)
		return 2
	}
	if lossy {
		return 1
	}
	return 0
}

// flagSet returns the flag set of `goroce probe once`, with its flags
// bound to c and its usage going to stderr. It sets the interval and the
// timeout to their default, a second each, before binding them, so that
// the help shows it.
func (c *onceConfig) flagSet(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("probe once", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.dev.register(fs)
	c.interval, c.timeout = time.Second, time.Second
	fs.IntVar(&c.count, "c", 0, "probes per host (default 5, or one per label with --labels or --paths)")
	fs.IntVar(&c.count, "count", 0, "same as -c")
	fs.Var(cliflag.Seconds{D: &c.interval}, "i", "interval between rounds of probes, in seconds or with a unit")
	fs.Var(cliflag.Seconds{D: &c.interval}, "interval", "same as -i")
	fs.Var(cliflag.Seconds{D: &c.timeout}, "W", "time to wait for a probe's ACKs before it is lost, in seconds or with a unit")
	fs.Var(cliflag.Seconds{D: &c.timeout}, "timeout", "same as -W")
	fs.IntVar(&c.labels, "labels", 0, "number of distinct flow labels (UDP source ports, ECMP paths) the probes rotate over (default 1)")
	fs.IntVar(&c.paths, "paths", 0, "number of equal-cost paths to cover: as many labels as cover them with probability --prob")
	fs.Float64Var(&c.prob, "prob", 0.99, "with --paths: the probability that every path is taken")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the flow labels")
	fs.UintVar(&c.qpn, "qpn", 0, "the responders' UD QPN: skip discovery over HTTP (the GID is the IPv4-mapped address of HOST, the Q_Key 0x11111111)")
	fs.IntVar(&c.httpPort, "http-port", probe.DefaultHTTPPort, "TCP port of the responders' "+probe.SelfPath)
	fs.BoolVar(&c.json, "json", false, "print one JSON document (every probe and the summaries) instead of text")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: goroce probe once [-c count] [-i interval] [-W timeout] [-d dev] [--path P] [--addr A]
                        [--labels N | --paths N --prob P] [--qpn Q] [--http-port N] [--json] HOST...

Probes the responder of each HOST (goroce probe responder, goroce probe agent or rpingmesh's),
found at http://HOST:PORT`+probe.SelfPath+` unless --qpn is given (probes rotate over its QPs and
the flow labels); prints a line per probe and a
summary per host. Exit status 1 when a probe was lost or failed, 2 on usage or setup errors.

flags:`)
		fs.PrintDefaults()
	}
	return fs
}

// check checks the parsed flags against each other and their ranges. Its
// error is the message to print after "goroce probe once:".
func (c *onceConfig) check() error {
	switch {
	case c.labels != 0 && c.paths != 0:
		return errors.New("--labels and --paths exclude each other")
	case c.labels < 0 || c.paths < 0 || c.count < 0 || c.qpn > 0xFFFFFF || c.httpPort < 0 || c.httpPort > 0xFFFF:
		return errors.New("a count, label count, path count, QPN or port out of range")
	case c.prob <= 0 || c.prob >= 1:
		return errors.New("--prob must be in (0, 1)")
	case c.timeout <= 0:
		return errors.New("-W must be positive")
	}
	return nil
}

// probe opens the device, finds the responders of hosts (ping.ResolveAll)
// and probes them over labels (ping.Main), printing to stdout a line per
// probe and the summaries, or with --json one document. lossy is whether
// a probe was lost or failed.
func (c *onceConfig) probe(ctx context.Context, hosts []string, labels []uint32, stdout io.Writer) (lossy bool, err error) {
	dev, err := c.dev.soft.OpenContext(c.dev.dev)
	if err != nil {
		return false, err
	}
	defer dev.Close()

	hs, err := ping.ResolveAll(ctx, hosts, uint32(c.qpn), c.httpPort)
	if err != nil {
		return false, err
	}
	var lines io.Writer
	if !c.json {
		lines = stdout
	}
	return ping.Main(ctx, dev.Context, hs, ping.Config{Count: c.count, Interval: c.interval, Timeout: c.timeout, Labels: labels,
		Lines: lines, Device: dev.Name, Provider: dev.Provider, JSON: c.json}, stdout)
}

// runProbeResponder is `goroce probe responder`: it answers probes and
// serves its self document until ctx ends.
func runProbeResponder(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe responder", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var df deviceFlags
	df.register(fs)
	var qps, httpPort int
	fs.IntVar(&qps, "qps", 1, "number of responder UD QPs (several for fabrics that hash on the destination QPN)")
	fs.IntVar(&httpPort, "http-port", probe.DefaultHTTPPort, "TCP port of "+probe.SelfPath+" (0: any free port)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: goroce probe responder [-d dev] [--path P] [--addr A] [--qps N] [--http-port N]

Answers probes (rpingmesh v1, Q_Key 0x11111111) on its UD QPs and serves their GID and QPNs as
JSON at http://ADDR:PORT`+probe.SelfPath+`, until SIGINT or SIGTERM.

flags:`)
		fs.PrintDefaults()
	}
	if code, ok := cliflag.Parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || qps < 1 || qps > 64 || httpPort < 0 || httpPort > 0xFFFF {
		fs.Usage()
		return 2
	}
	dev, err := df.soft.OpenContext(df.dev)
	if err != nil {
		fmt.Fprintln(stderr, "goroce probe responder:", err)
		return 2
	}
	defer dev.Close()
	srv, err := probe.NewSelfServer(dev.Context, probe.SelfServerOptions{QPs: qps, Listen: net.JoinHostPort("", strconv.Itoa(httpPort)),
		Provider: dev.Provider, Device: dev.Name})
	if err != nil {
		fmt.Fprintln(stderr, "goroce probe responder:", err)
		return 2
	}
	defer srv.Close()
	self := srv.Self()
	fmt.Fprintf(stdout, "goroce probe responder: %s (%s) GID %s QPNs %s Q_Key 0x%08x, %s timestamps; self at %s\n",
		dev.Name, dev.Provider, self.GID, probe.FormatQPNs(self.QPNs), probe.QKey, self.Timestamps, srv.URL())
	<-ctx.Done()
	s := srv.Stats()
	fmt.Fprintf(stdout, "goroce probe responder: %d received, %d answered, %d invalid, %d dropped\n", s.Received, s.Answered, s.Invalid, s.Dropped)
	return 0
}
