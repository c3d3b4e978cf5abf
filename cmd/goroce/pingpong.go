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
	odp, ts bool // -o and -t: accepted by the flags, refused by the run
	soft    devinfo.Soft
	stderr  io.Writer // where the packet path is said (stdout is rdma-core's report)
}

// pingpongUsage prints the usage of `goroce pingpong` to w.
func pingpongUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: goroce pingpong rc|ud|srq [flags]          start a server and wait for a client\n       goroce pingpong rc|ud|srq [flags] HOST     connect to the server at HOST\n\nibv_rc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong over goroce's soft\ndevice: the same flags, exchange (TCP port 18515) and report, so that either\nside may be rdma-core's program. Run \"goroce pingpong rc -h\" for the flags.")
}

// runPingpong is `goroce pingpong rc|ud|srq`: rdma-core's ibv_rc_pingpong,
// ibv_ud_pingpong or ibv_srq_pingpong.
func runPingpong(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		pingpongUsage(stderr)
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
		pingpongUsage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "goroce pingpong: unknown transport %q: want rc, ud or srq\n", args[0])
		pingpongUsage(stderr)
		return 2
	}
	name := "pingpong " + args[0]
	fs := c.flagSet(name)
	host, code, ok := cliflag.ParseHost(fs, args[1:])
	if !ok {
		return code
	}
	c.Host = host
	if c.odp || c.ts {
		fmt.Fprintf(stderr, "goroce %s: on-demand paging and completion timestamps are not supported\n", name)
		return 1
	}
	if c.outOfRange() {
		fs.Usage()
		return 2
	}
	if err := runPP(&c, stdout); err != nil {
		fmt.Fprintf(stderr, "goroce %s: %v\n", name, err)
		return 1
	}
	return 0
}

// flagSet returns the flag set of `goroce pingpong TRANSPORT`, name being
// "pingpong TRANSPORT", with its flags bound to c and its usage going to
// c.stderr. As rdma-core's programs, each transport takes only its own
// flags (-m and -o for RC, -q for SRQ, -c for UD and SRQ, -t for RC without
// SRQ), so c's transport must be set first; the message size it set is the
// default of -s.
func (c *ppConfig) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	registerSoft(fs, &c.soft)
	intAlias(fs, "p", "port", cm.PingpongPort, "listen on/connect to TCP port `port`", &c.Port)
	fs.StringVar(&c.devName, "d", "", "use device `dev` (default: the first device found, "+softName+")")
	fs.StringVar(&c.devName, "ib-dev", "", "same as -d")
	intAlias(fs, "i", "ib-port", 1, "use `port` of the device", &c.IBPort)
	intAlias(fs, "s", "size", c.Size, "size of message to exchange, in bytes", &c.Size)
	if c.Type == verbs.QPTRC {
		intAlias(fs, "m", "mtu", 1024, "path MTU in bytes (256, 512, 1024, 2048, 4096)", &c.MTU)
	}
	if c.SRQ {
		intAlias(fs, "q", "num-qp", 16, "number of QPs, sharing one receive queue", &c.NumQP)
	}
	intAlias(fs, "r", "rx-depth", 500, "number of receives to post at a time", &c.RxDepth)
	intAlias(fs, "n", "iters", 1000, "number of exchanges", &c.Iters)
	intAlias(fs, "l", "sl", 0, "service level (accepted; RoCE carries none)", &c.sl)
	fs.BoolVar(&c.Events, "e", false, "sleep on CQ events (default: poll)")
	fs.BoolVar(&c.Events, "events", false, "same as -e")
	intAlias(fs, "g", "gid-idx", verbs.DefaultGIDIndex, "local port GID `index` (soft devices, as rdma_rxe: 0 the link-local IPv6 GID, 1 the IPv4-mapped address, then the interface's IPv6 addresses: 2 for RoCEv2 over IPv6 from --addr on an interface with one IPv4 address)", &c.GIDIndex)
	if c.Type == verbs.QPTUD || c.SRQ {
		fs.BoolVar(&c.Check, "c", false, "validate the received buffer")
		fs.BoolVar(&c.Check, "chk", false, "same as -c")
	}
	if c.Type == verbs.QPTRC {
		fs.BoolVar(&c.odp, "o", false, "use on-demand paging (not supported)")
		fs.BoolVar(&c.odp, "odp", false, "same as -o")
	}
	if c.Type == verbs.QPTRC && !c.SRQ {
		fs.BoolVar(&c.ts, "t", false, "completion timestamps (not supported)")
		fs.BoolVar(&c.ts, "ts", false, "same as -t")
	}
	fs.DurationVar(&c.Timeout, "timeout", 0, "give up after this long (default: never, as rdma-core)")
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "usage: goroce %s [flags]         start a server and wait for connection\n       goroce %s [flags] HOST    connect to server at HOST\n\nflags:\n", name, name)
		fs.PrintDefaults()
	}
	return fs
}

// outOfRange reports whether a parsed setting is out of range: the TCP
// port outside 1..65535, an IB port, message size, receive depth or
// iteration count below 1, for RC an MTU verbs does not know, or for SRQ a
// QP count outside 1..pingpong.MaxSRQQPs.
func (c *ppConfig) outOfRange() bool {
	return c.Port <= 0 || c.Port > 65535 || c.IBPort < 1 || c.Size < 1 || c.RxDepth < 1 || c.Iters < 1 ||
		(c.Type == verbs.QPTRC && verbs.MTUFromBytes(c.MTU) == 0) || c.SRQ && (c.NumQP < 1 || c.NumQP > pingpong.MaxSRQQPs)
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
