package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/goroce/goroce/preload"
	"github.com/goroce/goroce/provider/soft"
)

// runRun is `goroce run`: an unmodified libibverbs program on soft devices,
// through libgoroce-verbs.so in LD_PRELOAD.
func runRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o preload.Options
	var addrs, names string
	fs.StringVar(&addrs, "addr", "", "local address(es) of the soft device(s), separated by commas: one device each (default: the first non-loopback IPv4 address of an interface that is up)")
	fs.StringVar(&o.Path, "path", "auto", "packet path of the devices: udp, uring, afxdp or auto")
	fs.StringVar(&names, "name", "", "device name(s), separated by commas (default soft0, soft1, ...)")
	fs.StringVar(&o.Pcap, "pcap", "", "write every packet the devices send and receive to this pcap `file`")
	fs.StringVar(&o.Lib, "lib", "", "the library (default: $"+preload.EnvLib+", else "+preload.LibName+" beside goroce or in ../lib)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goroce run [--addr A] [--path P] [flags] -- PROGRAM ARGS...\n\nRuns an unmodified program linked against libibverbs on goroce's soft\ndevices: "+preload.LibName+" in LD_PRELOAD serves its verbs, and\n"+preload.EnvAddr+", "+preload.EnvPath+", "+preload.EnvDevice+" and "+preload.EnvPcap+" describe the devices\n(set them yourself to launch programs another way).\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	for _, a := range strings.Split(addrs, ",") {
		ip, err := soft.ResolveAddr(strings.TrimSpace(a))
		if err != nil {
			fmt.Fprintf(stderr, "goroce run: %v\n", err)
			return 2
		}
		o.Addrs = append(o.Addrs, ip.String())
	}
	if names != "" {
		o.Names = strings.Split(names, ",")
	}
	if o.Lib == "" {
		p, err := preload.Find()
		if err != nil {
			fmt.Fprintf(stderr, "goroce run: %v\n", err)
			return 1
		}
		o.Lib = p
	}
	return runProgram(fs.Args(), preload.Env(os.Environ(), o), stdout, stderr)
}

// runProgram runs argv with env, passing on SIGINT and SIGTERM, and returns
// its exit status (128+n when signal n ended it, 127 when it cannot start).
func runProgram(argv, env []string, stdout, stderr io.Writer) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "goroce run: %v\n", err)
		return 127
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sig:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(stderr, "goroce run: %v\n", err)
		return 1
	}
	return 0
}
