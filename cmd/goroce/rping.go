package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/goroce/goroce/internal/cliflag"
	"github.com/goroce/goroce/internal/devinfo"
	"github.com/goroce/goroce/internal/rping"
	"github.com/goroce/goroce/verbs"
)

// runRping is `goroce rping`: librdmacm's rping over the soft device, with
// rping's flags, so that either side may be rdma-core's rping.
func runRping(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rping", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c              rping.Config
		server, client bool
		src            string
		selfQP         bool
		soft           devinfo.Soft
		hwName         string
	)
	registerSoft(fs, &soft)
	fs.StringVar(&hwName, "ibdev", "", "libibverbs `device` to run on (an RNIC or rdma_rxe, built with -tags ibverbs: rdma_cm through librdmacm); default the soft device")
	fs.BoolVar(&server, "s", false, "server side")
	fs.BoolVar(&client, "c", false, "client side")
	fs.StringVar(&c.Addr, "a", "", "`addr`ess: the server's (client), the one to bind (server; default any)")
	fs.StringVar(&src, "I", "", "source `addr`ess of the client (the soft device's address unless --addr)")
	fs.IntVar(&c.Port, "p", rping.DefaultPort, "`port`")
	fs.IntVar(&c.Size, "S", rping.DefaultSize, "ping data `size`")
	fs.IntVar(&c.Count, "C", 0, "ping `count` times (0: forever)")
	fs.BoolVar(&c.Verbose, "v", false, "display ping data to stdout")
	fs.BoolVar(&c.Validate, "V", false, "validate ping data")
	fs.BoolVar(&c.Debug, "d", false, "debug printfs")
	fs.BoolVar(&c.Persistent, "P", false, "persistent server mode allowing multiple connections")
	fs.BoolVar(&selfQP, "q", false, "use self-created, self-modified QP (goroce always does)")
	fs.DurationVar(&c.Timeout, "timeout", 0, "give up on a peer silent this long (default: never, as rping)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goroce rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port] [-P]\n       goroce rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n\nlibrdmacm's rping over goroce's soft device: rdma_cm (the IB CM on QP 1)\nthen RDMA READ, WRITE and SEND, so that either side may be rdma-core's rping.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := cliflag.Parse(fs, cliflag.SplitShort(args, "scvVdPq")); !ok {
		return code
	}
	if fs.NArg() != 0 || server == client {
		fs.Usage()
		return 2
	}
	c.Server = server
	var dev verbs.Device
	if hw, ok := devinfo.OpenHW(hwName); ok { // an RNIC or rdma_rxe: rdma_cm through librdmacm
		dev = hw
	} else if hwName != "" && hwName != devinfo.SoftName {
		fmt.Fprintf(stderr, "goroce rping: no device %q in this build\n", hwName)
		return 1
	} else {
		if soft.Addr == "" {
			soft.Addr = c.DeviceAddr(src)
		}
		sd, err := soft.Open(true)
		if err != nil {
			fmt.Fprintf(stderr, "goroce rping: %v\n", err)
			return 1
		}
		defer sd.Close()
		if c.Debug {
			fmt.Fprintf(stderr, "goroce rping: device %s on %v, packet path %s\n", sd.Name(), sd.Addr(), sd.Path())
		}
		dev = sd
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := rping.Run(ctx, dev, c, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "goroce rping: %v\n", err)
		return 1
	}
	return 0
}
