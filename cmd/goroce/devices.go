package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/goroce/goroce/cm"
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
	dev, ch, err := soft.Open(soft.OpenOptions{Name: softName, Addr: c.addr, Path: c.path, Pcap: c.pcap, Inspect: !traffic})
	if err != nil {
		return nil, err
	}
	c.chosen = ch
	return dev, nil
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
		if err := printDevinfo(stdout, hw, uint8(port), verbose); err != nil {
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
		if err := printDevinfo(stdout, d, uint8(port), verbose); err != nil {
			fmt.Fprintln(stderr, "goroce devinfo:", err)
			return 1
		}
	}
	return 0
}

// printDevinfo prints a device as ibv_devinfo's print_hca_cap does, with the
// attributes a soft device has.
func printDevinfo(w io.Writer, dev verbs.Device, port uint8, verbose bool) error {
	ctx, err := dev.Open()
	if err != nil {
		return err
	}
	defer ctx.Close()
	da, err := ctx.QueryDevice()
	if err != nil {
		return err
	}
	if port != 0 && int(port) > da.PhysPortCnt {
		return fmt.Errorf("invalid port %d requested for device %s", port, dev.Name())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "hca_id:\t%s\n", dev.Name())
	fmt.Fprintf(&b, "\ttransport:\t\t\t%s (%d)\n", "InfiniBand", 0)
	if da.FWVer != "" {
		fmt.Fprintf(&b, "\tfw_ver:\t\t\t\t%s\n", da.FWVer)
	}
	fmt.Fprintf(&b, "\tnode_guid:\t\t\t%s\n", guidString(da.NodeGUID))
	fmt.Fprintf(&b, "\tsys_image_guid:\t\t\t%s\n", guidString(da.SysImageGUID))
	fmt.Fprintf(&b, "\tvendor_id:\t\t\t0x%04x\n", da.VendorID)
	fmt.Fprintf(&b, "\tvendor_part_id:\t\t\t%d\n", da.VendorPartID)
	fmt.Fprintf(&b, "\thw_ver:\t\t\t\t0x%X\n", da.HWVer)
	fmt.Fprintf(&b, "\tphys_port_cnt:\t\t\t%d\n", da.PhysPortCnt)
	if sd, ok := dev.(*soft.Device); ok && sd.Path() != "" {
		fmt.Fprintf(&b, "\tpacket_path:\t\t\t%s\n", sd.Path())
	}
	if verbose {
		fmt.Fprintf(&b, "\tmax_mr_size:\t\t\t0x%x\n", da.MaxMRSize)
		fmt.Fprintf(&b, "\tmax_qp:\t\t\t\t%d\n", da.MaxQP)
		fmt.Fprintf(&b, "\tmax_qp_wr:\t\t\t%d\n", da.MaxQPWR)
		fmt.Fprintf(&b, "\tmax_sge:\t\t\t%d\n", da.MaxSGE)
		fmt.Fprintf(&b, "\tmax_cq:\t\t\t\t%d\n", da.MaxCQ)
		fmt.Fprintf(&b, "\tmax_cqe:\t\t\t%d\n", da.MaxCQE)
		fmt.Fprintf(&b, "\tmax_mr:\t\t\t\t%d\n", da.MaxMR)
		fmt.Fprintf(&b, "\tmax_pd:\t\t\t\t%d\n", da.MaxPD)
		fmt.Fprintf(&b, "\tmax_qp_rd_atom:\t\t\t%d\n", da.MaxQPRdAtom)
		fmt.Fprintf(&b, "\tmax_qp_init_rd_atom:\t\t%d\n", da.MaxQPInitRdAtom)
		fmt.Fprintf(&b, "\tatomic_cap:\t\t\t%s (%d)\n", atomicCapString(da.AtomicCap), da.AtomicCap)
		fmt.Fprintf(&b, "\tmax_srq:\t\t\t%d\n", da.MaxSRQ)
		if da.MaxSRQ != 0 {
			fmt.Fprintf(&b, "\tmax_srq_wr:\t\t\t%d\n", da.MaxSRQWR)
		}
	}
	for p := 1; p <= da.PhysPortCnt; p++ {
		if port != 0 && p != int(port) {
			continue
		}
		pa, err := ctx.QueryPort(uint8(p))
		if err != nil {
			return fmt.Errorf("failed to query port %d props: %w", p, err)
		}
		fmt.Fprintf(&b, "\t\tport:\t%d\n", p)
		fmt.Fprintf(&b, "\t\t\tstate:\t\t\t%s (%d)\n", pa.State, pa.State)
		fmt.Fprintf(&b, "\t\t\tmax_mtu:\t\t%s (%d)\n", mtuString(pa.MaxMTU), pa.MaxMTU)
		fmt.Fprintf(&b, "\t\t\tactive_mtu:\t\t%s (%d)\n", mtuString(pa.ActiveMTU), pa.ActiveMTU)
		fmt.Fprintf(&b, "\t\t\tsm_lid:\t\t\t%d\n", 0)
		fmt.Fprintf(&b, "\t\t\tport_lid:\t\t%d\n", pa.LID)
		fmt.Fprintf(&b, "\t\t\tport_lmc:\t\t0x%02x\n", 0)
		fmt.Fprintf(&b, "\t\t\tlink_layer:\t\t%s\n", pa.LinkLayer)
		if verbose {
			fmt.Fprintf(&b, "\t\t\tpkey_tbl_len:\t\t%d\n", pa.PKeyTblLen)
			fmt.Fprintf(&b, "\t\t\tgid_tbl_len:\t\t%d\n", pa.GIDTblLen)
			for i := 0; i < pa.GIDTblLen; i++ {
				g, err := ctx.QueryGID(uint8(p), i)
				if err != nil {
					return fmt.Errorf("failed to query gid to port %d, index %d: %w", p, i, err)
				}
				var zero [8]byte
				if [8]byte(g[8:]) == zero {
					continue // ibv_devinfo skips null GIDs
				}
				fmt.Fprintf(&b, "\t\t\tGID[%3d]:\t\t%s, %s\n", i, cm.FormatGID(g), gidType(ctx, uint8(p), i))
			}
		}
		b.WriteString("\n")
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// guidString formats a GUID as ibv_devinfo does: four groups of four hex
// digits.
func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

func mtuString(m verbs.MTU) string {
	if m.Bytes() == 0 {
		return "invalid MTU"
	}
	return m.String()
}

func atomicCapString(c int) string {
	switch c {
	case 0:
		return "ATOMIC_NONE"
	case 1:
		return "ATOMIC_HCA"
	case 2:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
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
