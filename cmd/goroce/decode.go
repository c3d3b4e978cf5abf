package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/goroce/goroce/capture"
	"github.com/goroce/goroce/wire"
)

const decodeUsage = `usage: goroce decode [-v | --json | --flows | --summary] [--pmtu N] FILE

Decodes the RoCEv2 packets (UDP to port 4791) of a pcap or pcapng file
("-" reads standard input), one line per packet by default. Other packets
are skipped and counted.

Exit status: 0 when every RoCEv2 packet is well formed and passes its ICRC
check, 1 when one is malformed or fails it, 2 on a usage or read error.

flags:
`

// runDecode is "goroce decode".
func runDecode(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("decode", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprint(stderr, decodeUsage)
		fl.PrintDefaults()
	}
	verbose := fl.Bool("v", false, "print every header field of each packet, one per line")
	jsonOut := fl.Bool("json", false, "print one JSON object per packet and line")
	flows := fl.Bool("flows", false, "group packets into messages per queue pair and match them with their responses")
	summary := fl.Bool("summary", false, "print per-queue-pair counts and totals")
	pmtu := fl.Int("pmtu", 0, "path MTU (256, 512, 1024, 2048 or 4096); 0 infers it per flow from the first FIRST/MIDDLE packet")

	// Flags may come before or after the file name.
	var files []string
	for {
		if err := fl.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fl.NArg() == 0 {
			break
		}
		files = append(files, fl.Arg(0))
		args = fl.Args()[1:]
	}
	if len(files) != 1 {
		fmt.Fprintln(stderr, "goroce decode: exactly one FILE is needed")
		fl.Usage()
		return 2
	}
	opt := capture.Options{PMTU: *pmtu}
	n := 0
	for _, m := range []struct {
		set  bool
		mode capture.Mode
	}{{*verbose, capture.ModeVerbose}, {*jsonOut, capture.ModeJSON}, {*flows, capture.ModeFlows}, {*summary, capture.ModeSummary}} {
		if m.set {
			n++
			opt.Mode = m.mode
		}
	}
	if n > 1 {
		fmt.Fprintln(stderr, "goroce decode: -v, --json, --flows and --summary exclude each other")
		return 2
	}
	if *pmtu != 0 && !wire.ValidMTU(*pmtu) {
		fmt.Fprintf(stderr, "goroce decode: --pmtu %d: not an InfiniBand MTU (256, 512, 1024, 2048 or 4096)\n", *pmtu)
		return 2
	}

	tot, err := capture.DumpFile(stdout, files[0], os.Stdin, opt)
	if err != nil {
		fmt.Fprintf(stderr, "goroce decode: %v\n", err)
		return 2
	}
	if tot.Bad > 0 {
		return 1
	}
	return 0
}
