package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/goroce/goroce/internal/cliflag"
	"github.com/goroce/goroce/internal/devinfo"
	"github.com/goroce/goroce/packetio/paths"
)

// softName is the name of the soft device the commands open.
const softName = devinfo.SoftName

// registerSoft registers the flags that say which soft device a command
// opens (devinfo.Soft): its address, packet path and pcap file, the path's
// offloads and the congestion control.
func registerSoft(fs *flag.FlagSet, s *devinfo.Soft) {
	fs.StringVar(&s.Addr, "addr", "", "local IPv4 or IPv6 address of the soft device "+softName+" (IPv6: RoCEv2 over IPv6, from that address's GID; default: the first non-loopback IPv4 address of an interface that is up)")
	fs.StringVar(&s.Pcap, "pcap", "", "write every packet the soft device sends and receives to this pcap `file` (AF_XDP's frames bypass tcpdump; with bench --loopback, the server's device, which sees both directions)")
	fs.StringVar(&s.Path, "path", paths.Auto, "packet path of the soft device: udp (recvmmsg/sendmmsg), uring (io_uring), afxdp (AF_XDP) or auto (the fastest that works; devinfo shows which)")
	fs.Var(cliflag.Off{Off: &s.NoGSO}, "gso", "udp path: send runs of equal-sized packets as one UDP GSO message when the kernel offers it (default true; --gso=false: one datagram per packet)")
	fs.Var(cliflag.Off{Off: &s.NoGather}, "gather", "udp and uring paths: send payloads of 1 KiB or more from the memory region they lie in, the kernel gathering each packet's pieces, instead of copying them into the packet (default true)")
	fs.Var(cliflag.Off{Off: &s.NoGRO}, "gro", "udp path: receive with UDP GRO when the kernel offers it (default true; --gro=false: one datagram per buffer)")
	fs.Var(cliflag.CC{Mode: &s.Congestion}, "cc", "congestion control `mode` of the soft device's RC QPs: off (a window per QP, as rdma_rxe), loss (a window shared per peer, cut on loss) or ecn (loss, also cut on CNPs, and CNPs sent for CE-marked packets and receive drops)")
	fs.Var(cliflag.Target{Delay: &s.TargetDelay}, "cc-target", "how far a congested path's standing round trip may rise above its least before the soft device's window falls (`duration`, e.g. 25us, or off: every loss cuts, no delay response; default 100us, which tolerates a busy host's jitter; smaller keeps a bottleneck's queue shorter where the hosts are quiet)")
	fs.Var(tosFlag{&s.TOS}, "tos", "IPv4 TOS `byte` (DSCP << 2 | ECN, e.g. 0x68 or 104) of the packets the soft device sends; an ECN field left 0 sends ECT(0), as RoCE NICs do (default 0: DSCP 0, ECT(0))")
	fs.Var(cliflag.Off{Off: &s.NoECN}, "ecn", "send packets ECN-capable, ECT(0), so that congested switches mark them CE instead of dropping them (default true; --ecn=false: not-ECT, for a network that mishandles ECN)")
}

// intAlias registers the int flag -short and its long spelling -long, both
// setting *p, as perftest and rdma-core's programs take either. The long
// one's usage only points to the short one, so that the help says it once.
func intAlias(fs *flag.FlagSet, short, long string, def int, usage string, p *int) {
	fs.IntVar(p, short, def, usage)
	fs.IntVar(p, long, def, "same as -"+short)
}

// runDevices is `goroce devices`, as ibv_devices.
func runDevices(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sc devinfo.Soft
	registerSoft(fs, &sc)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goroce devices [--addr A]\n\nLists the RDMA devices, as ibv_devices: goroce's soft device "+softName+",\nbound to a local IPv4 address, and its node GUID.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := cliflag.Parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	l, err := sc.List(false)
	if err != nil {
		fmt.Fprintln(stderr, "goroce devices:", err)
		return 1
	}
	defer l.Close()
	devinfo.WriteDevices(stdout, l.Devices)
	if l.HWErr != nil {
		fmt.Fprintln(stderr, "goroce devices:", l.HWErr)
	}
	return 0
}

// runDevinfo is `goroce devinfo`, as ibv_devinfo.
func runDevinfo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devinfo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sc devinfo.Soft
	registerSoft(fs, &sc)
	var devName string
	var port int
	var list, verbose bool
	fs.StringVar(&devName, "d", "", "use device `dev` (default: the first device found)")
	fs.StringVar(&devName, "ib-dev", "", "same as -d")
	fs.IntVar(&port, "i", 0, "show port `port` only (default: all ports)")
	fs.IntVar(&port, "ib-port", 0, "same as -i")
	fs.BoolVar(&list, "l", false, "print only the device names")
	fs.BoolVar(&list, "list", false, "same as -l")
	fs.BoolVar(&verbose, "v", false, "print all the attributes of the device, the GID table included")
	fs.BoolVar(&verbose, "verbose", false, "same as -v")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goroce devinfo [-d dev] [-i port] [-l] [-v] [--addr A]\n\nPrints the attributes of the RDMA devices and their ports, as ibv_devinfo.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := cliflag.Parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || port < 0 {
		fs.Usage()
		return 2
	}
	if hw, ok := devinfo.OpenHW(devName); ok {
		if err := devinfo.Write(stdout, hw, uint8(port), verbose, devinfo.GIDType); err != nil {
			fmt.Fprintln(stderr, "goroce devinfo:", err)
			return 1
		}
		return 0
	}
	l, err := sc.List(devName != "")
	if err != nil {
		fmt.Fprintln(stderr, "goroce devinfo:", err)
		return 1
	}
	defer l.Close()
	if list {
		devinfo.WriteNames(stdout, l.Devices)
		return 0
	}
	if devName != "" && devName != l.Soft.Name() { // List(true) has the soft device alone
		fmt.Fprintf(stderr, "IB device '%s' wasn't found\n", devName)
		return 1
	}
	for _, d := range l.Devices {
		if err := devinfo.Write(stdout, d, uint8(port), verbose, devinfo.GIDType); err != nil {
			fmt.Fprintln(stderr, "goroce devinfo:", err)
			return 1
		}
	}
	return 0
}

// tosFlag is --tos: a TOS byte, decimal or 0x-prefixed hexadecimal.
type tosFlag struct{ v *uint8 }

// String returns the byte in hexadecimal.
func (f tosFlag) String() string {
	if f.v == nil {
		return "0x00"
	}
	return fmt.Sprintf("0x%02x", *f.v)
}

// Set parses a byte.
func (f tosFlag) Set(s string) error {
	n, err := strconv.ParseUint(s, 0, 8)
	if err != nil {
		return errors.New("want a byte, 0 to 255 (0x68)")
	}
	*f.v = uint8(n)
	return nil
}
