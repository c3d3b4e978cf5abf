package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"

	"github.com/goroce/goroce/internal/devinfo"
	"github.com/goroce/goroce/packetio/paths"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// softName is the name of the soft device the commands open.
const softName = "soft0"

// softConfig says which soft device a command opens: the local IPv4 address
// it is bound to (default: the machine's first non-loopback IPv4 address on
// an interface that is up).
type softConfig struct {
	addr   string
	path   string       // packet path: udp, uring, afxdp or auto
	pcap   string       // if set, record every packet sent and received here
	chosen paths.Chosen // the path open took
	busy   bool         // the driver polls without blocking (soft.OpenOptions.Busy)
}

func (c *softConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "", "local IPv4 address of the soft device "+softName+" (default: the first non-loopback IPv4 address of an interface that is up)")
	fs.StringVar(&c.pcap, "pcap", "", "write every packet the soft device sends and receives to this pcap `file` (AF_XDP's frames bypass tcpdump)")
	fs.StringVar(&c.path, "path", paths.Auto, "packet path of the soft device: udp (recvmmsg/sendmmsg), uring (io_uring), afxdp (AF_XDP) or auto (the fastest that works; devinfo shows which)")
}

// resolve returns the device address and the MTU of its interface (0 when no
// interface holds it).
func (c *softConfig) resolve() (netip.Addr, int, error) {
	a, err := soft.ResolveAddr(c.addr)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("--addr: %w", err)
	}
	mtu, _ := soft.LinkMTU(a)
	return a, mtu, nil
}

// open creates the soft device (soft.Open) on the packet path --path names.
// For traffic it listens on UDP port 4791 of the address; for inspection
// only (devices, devinfo) on a port the kernel chooses.
func (c *softConfig) open(traffic bool) (*soft.Device, error) {
	dev, ch, err := soft.Open(soft.OpenOptions{Name: softName, Addr: c.addr, Path: c.path, Pcap: c.pcap, Inspect: !traffic, Busy: c.busy && traffic})
	if err != nil {
		return nil, err
	}
	c.chosen = ch
	return dev, nil
}

// openDevice opens the device -d names: a libibverbs device (in an ibverbs
// build), else c's soft device, whose name "" also names. It returns the
// device, its provider's name and what closes it.
func (c *softConfig) openDevice(name string) (verbs.Device, string, func(), error) {
	if hw, ok := openHW(name); ok {
		return hw, "ibverbs", func() {}, nil
	}
	sdev, err := c.open(true)
	if err != nil {
		return nil, "", nil, err
	}
	if name != "" && name != sdev.Name() {
		sdev.Close()
		return nil, "", nil, fmt.Errorf("IB device %s not found", name)
	}
	return sdev, "soft", func() { sdev.Close() }, nil
}

// hwRegistry is a registry of this build's providers other than the soft
// one (libibverbs' with -tags ibverbs).
func hwRegistry() *verbs.Registry {
	r := &verbs.Registry{}
	for _, p := range hwProviders() {
		r.Register(p)
	}
	return r
}

// hwDevices lists the devices of this build's providers other than soft.
func hwDevices() ([]verbs.Device, error) { return hwRegistry().Devices() }

// openHW returns the device called name when a provider other than soft
// has it (name "" and the soft device's name are the soft device's).
func openHW(name string) (verbs.Device, bool) {
	if name == "" || name == softName {
		return nil, false
	}
	d, _, err := hwRegistry().Lookup(name)
	if err != nil {
		return nil, false
	}
	return d, true
}

// runDevices is `goroce devices`, as ibv_devices.
func runDevices(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sc softConfig
	sc.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goroce devices [--addr A]\n\nLists the RDMA devices, as ibv_devices: goroce's soft device "+softName+",\nbound to a local IPv4 address, and its node GUID.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	hw, hwErr := hwDevices()
	var devs []verbs.Device
	dev, err := sc.open(false)
	if err != nil {
		if len(hw) == 0 {
			fmt.Fprintln(stderr, "goroce devices:", err)
			return 1
		}
	} else {
		defer dev.Close()
		devs = append(devs, dev)
	}
	devs = append(devs, hw...)
	fmt.Fprintf(stdout, "    %-16s\t   node GUID\n", "device")
	fmt.Fprintf(stdout, "    %-16s\t----------------\n", "------")
	for _, d := range devs {
		fmt.Fprintf(stdout, "    %-16s\t%016x\n", d.Name(), d.GUID())
	}
	if hwErr != nil {
		fmt.Fprintln(stderr, "goroce devices:", hwErr)
	}
	return 0
}

// runDevinfo is `goroce devinfo`, as ibv_devinfo.
func runDevinfo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devinfo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sc softConfig
	sc.register(fs)
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
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || port < 0 {
		fs.Usage()
		return 2
	}
	if hw, ok := openHW(devName); ok {
		if err := devinfo.Write(stdout, hw, uint8(port), verbose, gidType); err != nil {
			fmt.Fprintln(stderr, "goroce devinfo:", err)
			return 1
		}
		return 0
	}
	var devs []verbs.Device
	hw, _ := hwDevices()
	dev, err := sc.open(false)
	if err != nil {
		if len(hw) == 0 || devName != "" {
			fmt.Fprintln(stderr, "goroce devinfo:", err)
			return 1
		}
	} else {
		defer dev.Close()
		devs = append(devs, dev)
	}
	if devName == "" {
		devs = append(devs, hw...)
	}
	if list {
		if len(devs) == 1 {
			fmt.Fprintf(stdout, "1 HCA found:\n")
		} else {
			fmt.Fprintf(stdout, "%d HCAs found:\n", len(devs))
		}
		for _, d := range devs {
			fmt.Fprintf(stdout, "\t%s\n", d.Name())
		}
		fmt.Fprintln(stdout)
		return 0
	}
	if devName != "" && (dev == nil || devName != dev.Name()) {
		fmt.Fprintf(stderr, "IB device '%s' wasn't found\n", devName)
		return 1
	}
	for _, d := range devs {
		if err := devinfo.Write(stdout, d, uint8(port), verbose, gidType); err != nil {
			fmt.Fprintln(stderr, "goroce devinfo:", err)
			return 1
		}
	}
	return 0
}

// parseFlags parses args, allowing operands between flags as getopt does
// (ibv_rc_pingpong HOST -n 10). Parsed operands are left in fs.Args(). ok is
// false when the command must end with code.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return 0, false
			}
			return 2, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			operands = append(operands, rest...) // after "--": operands only
			break
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
	fs.Parse(append([]string{"--"}, operands...))
	return 0, true
}
