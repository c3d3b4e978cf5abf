package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"

	"github.com/goroce/goroce/internal/demo"
	"github.com/goroce/goroce/packetio/fault"
	"github.com/goroce/goroce/verbs"
)

// runDemo is `goroce demo`: two soft devices on loopback, every operation.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := fs.String("a", "127.0.0.1", "address of the first device")
	b := fs.String("b", "127.0.0.2", "address of the second device")
	mtu := fs.Int("mtu", 1024, "path MTU (256, 512, 1024, 2048, 4096)")
	size := fs.Int("size", 2500, "message size in bytes")
	port := fs.Int("port", 4791, "UDP port")
	pcap := fs.String("pcap", "", "write every packet to this pcap file")
	loss := fs.Float64("loss", 0, "drop this fraction of the packets each device sends (e.g. 0.05)")
	dup := fs.Float64("dup", 0, "duplicate this fraction of packets")
	reorder := fs.Float64("reorder", 0, "hold back this fraction of packets behind later ones")
	corrupt := fs.Float64("corrupt", 0, "flip a bit in this fraction of packets")
	seed := fs.Uint64("seed", 1, "seed of the fault generator")
	path := fs.String("path", "auto", "packet path: udp, uring, afxdp or auto (the fastest that works on these addresses)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goroce demo [flags]\n\nTwo soft RDMA devices in this process, on two loopback addresses, perform\nSEND/RECV, RDMA WRITE, RDMA READ, compare-swap, fetch-add, WRITE WITH\nIMMEDIATE and a deliberate error; each with its packets and completions.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	o := demo.Options{Out: stdout, Size: *size, Port: *port, Pcap: *pcap, MTU: verbs.MTUFromBytes(*mtu), Path: *path,
		Faults: fault.Options{Seed: *seed, Drop: *loss, Duplicate: *dup, Reorder: *reorder, Corrupt: *corrupt}}
	var err error
	if o.A, err = netip.ParseAddr(*a); err != nil {
		fmt.Fprintln(stderr, "goroce demo: -a:", err)
		return 2
	}
	if o.B, err = netip.ParseAddr(*b); err != nil {
		fmt.Fprintln(stderr, "goroce demo: -b:", err)
		return 2
	}
	if o.MTU == 0 {
		fmt.Fprintf(stderr, "goroce demo: -mtu %d is not an InfiniBand MTU\n", *mtu)
		return 2
	}
	if err := demo.Run(o); err != nil {
		fmt.Fprintln(stderr, "goroce demo:", err)
		return 1
	}
	return 0
}
