package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/cliflag"
	"github.com/goroce/goroce/internal/devinfo"
	"github.com/goroce/goroce/internal/pingpong"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// ppConfig holds `goroce pingpong`'s flags: the run's settings and where
// its device comes from.
type ppConfig struct {
	pingpong.Config
	devName string
	sl      int
	soft    devinfo.Soft
	stderr  io.Writer // where the packet path is said (stdout is rdma-core's report)
}

func runPingpong(args []string, stdout, stderr io.Writer) int {
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage: goroce pingpong rc|ud|srq [flags]          start a server and wait for a client\n       goroce pingpong rc|ud|srq [flags] HOST     connect to the server at HOST\n\nibv_rc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong over goroce's soft\ndevice: the same flags, exchange (TCP port 18515) and report, so that either\nside may be rdma-core's program. Run \"goroce pingpong rc -h\" for the flags.")
	}
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	c := ppConfig{stderr: stderr}
	switch args[0] {
	case "rc":
		c.Type, c.Size = verbs.QPTRC, 4096
	case "ud":
		c.Type, c.Size = verbs.QPTUD, 1024
	case "srq":
		c.Type, c.Size, c.SRQ = verbs.QPTRC, 4096, true
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "goroce pingpong: unknown transport %q: want rc, ud or srq\n", args[0])
		usage(stderr)
		return 2
	}
	name := "pingpong " + args[0]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	registerSoft(fs, &c.soft)
	alias := func(short, long string, def int, usage string, p *int) {
		fs.IntVar(p, short, def, usage)
		fs.IntVar(p, long, def, "same as -"+short)
	}
	alias("p", "port", cm.PingpongPort, "listen on/connect to TCP port `port`", &c.Port)
	fs.StringVar(&c.devName, "d", "", "use device `dev` (default: the first device found, "+softName+")")
	fs.StringVar(&c.devName, "ib-dev", "", "same as -d")
	alias("i", "ib-port", 1, "use `port` of the device", &c.IBPort)
	alias("s", "size", c.Size, "size of message to exchange, in bytes", &c.Size)
	if c.Type == verbs.QPTRC {
		alias("m", "mtu", 1024, "path MTU in bytes (256, 512, 1024, 2048, 4096)", &c.MTU)
	}
	if c.SRQ {
		alias("q", "num-qp", 16, "number of QPs, sharing one receive queue", &c.NumQP)
	}
	alias("r", "rx-depth", 500, "number of receives to post at a time", &c.RxDepth)
	alias("n", "iters", 1000, "number of exchanges", &c.Iters)
	alias("l", "sl", 0, "service level (accepted; RoCE carries none)", &c.sl)
	fs.BoolVar(&c.Events, "e", false, "sleep on CQ events (default: poll)")
	fs.BoolVar(&c.Events, "events", false, "same as -e")
	alias("g", "gid-idx", verbs.DefaultGIDIndex, "local port GID `index` (soft devices, as rdma_rxe: 0 the link-local IPv6 GID, 1 the IPv4-mapped address, then the interface's IPv6 addresses: 2 for RoCEv2 over IPv6 from --addr on an interface with one IPv4 address)", &c.GIDIndex)
	if c.Type == verbs.QPTUD || c.SRQ {
		fs.BoolVar(&c.Check, "c", false, "validate the received buffer")
		fs.BoolVar(&c.Check, "chk", false, "same as -c")
	}
	var odp, ts bool
	if c.Type == verbs.QPTRC {
		fs.BoolVar(&odp, "o", false, "use on-demand paging (not supported)")
		fs.BoolVar(&odp, "odp", false, "same as -o")
	}
	if c.Type == verbs.QPTRC && !c.SRQ {
		fs.BoolVar(&ts, "t", false, "completion timestamps (not supported)")
		fs.BoolVar(&ts, "ts", false, "same as -t")
	}
	fs.DurationVar(&c.Timeout, "timeout", 0, "give up after this long (default: never, as rdma-core)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: goroce %s [flags]         start a server and wait for connection\n       goroce %s [flags] HOST    connect to server at HOST\n\nflags:\n", name, name)
		fs.PrintDefaults()
	}
	if code, ok := cliflag.Parse(fs, args[1:]); !ok {
		return code
	}
	switch {
	case fs.NArg() > 1:
		fs.Usage()
		return 2
	case fs.NArg() == 1:
		c.Host = fs.Arg(0)
	}
	if odp || ts {
		fmt.Fprintf(stderr, "goroce %s: on-demand paging and completion timestamps are not supported\n", name)
		return 1
	}
	if c.Port <= 0 || c.Port > 65535 || c.IBPort < 1 || c.Size < 1 || c.RxDepth < 1 || c.Iters < 1 ||
		(c.Type == verbs.QPTRC && verbs.MTUFromBytes(c.MTU) == 0) || c.SRQ && (c.NumQP < 1 || c.NumQP > pingpong.MaxSRQQPs) {
		fs.Usage()
		return 2
	}
	if err := runPP(&c, stdout); err != nil {
		fmt.Fprintf(stderr, "goroce %s: %v\n", name, err)
		return 1
	}
	return 0
}

// runPP opens the device c names (a libibverbs device, or the soft device)
// and runs the program on it.
func runPP(c *ppConfig, out io.Writer) error {
	dev, _, closeDev, err := c.soft.OpenDevice(c.devName)
	if err != nil {
		return err
	}
	defer closeDev()
	if sd, ok := dev.(*soft.Device); ok && c.stderr != nil {
		fmt.Fprintf(c.stderr, "goroce pingpong: packet path: %s\n", sd.Path())
	}
	return pingpong.Run(context.Background(), &c.Config, dev, out)
}
