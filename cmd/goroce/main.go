// Command goroce is the goroce command-line tool.
//
// Usage:
//
//	goroce <command> [arguments]
//
// Commands:
//
//	demo      two soft RDMA devices on loopback: every operation, its packets and completions
//	decode    decode RoCEv2 packets in a pcap or pcapng file
//	devices   list RDMA devices (the soft device), as ibv_devices
//	devinfo   show RDMA devices and ports, as ibv_devinfo
//	pingpong  rc|ud ping-pong, as ibv_rc_pingpong / ibv_ud_pingpong
//	rping     librdmacm's rping over rdma_cm (the IB CM on QP 1)
//	bench     perftest's bandwidth and latency tests
//	probe     probe a RoCE fabric: network RTT, host delays and loss over UD
//	run       run an unmodified libibverbs program on soft devices (LD_PRELOAD)
//
// Run "goroce <command> -h" for a command's flags.
package main

import (
	"fmt"
	"io"
	"os"
)

// command is one subcommand: its name, a one-line summary and its entry
// point, which returns the process exit status.
type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
}

var commands = []command{
	{"demo", "two soft RDMA devices on loopback: every operation, its packets and completions", runDemo},
	{"decode", "decode RoCEv2 packets in a pcap or pcapng file", runDecode},
	{"devices", "list RDMA devices (the soft device), as ibv_devices", runDevices},
	{"devinfo", "show RDMA devices and ports, as ibv_devinfo", runDevinfo},
	{"pingpong", "rc|ud ping-pong, as ibv_rc_pingpong / ibv_ud_pingpong, against goroce or rdma-core", runPingpong},
	{"rping", "librdmacm's rping (rdma_cm, RDMA READ/WRITE/SEND), against goroce or rdma-core", runRping},
	{"bench", "perftest's bandwidth and latency tests (ib_write_bw, ib_send_lat, ...), against goroce or perftest", runBench},
	{"probe", "probe a RoCE fabric: network RTT, host delays and loss over UD (once, responder)", runProbe},
	{"run", "run an unmodified libibverbs program (ibv_*, perftest) on soft devices", runRun},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to the subcommand named by args[0] and returns the exit
// status: 2 for a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "goroce: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: goroce <command> [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
}
