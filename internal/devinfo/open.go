package devinfo

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// SoftName is the name of the soft device the commands open.
const SoftName = "soft0"

// Soft says which soft device a command opens.
type Soft struct {
	// Addr is the local IPv4 address the device is bound to; "" is the
	// machine's first non-loopback IPv4 address on an interface that is up
	// (soft.ResolveAddr).
	Addr string
	// Path is the packet path: udp, uring, afxdp or auto (the default).
	Path string
	// Pcap, if set, is a file that records every packet the device sends
	// and receives.
	Pcap string
	// NoGSO and NoGRO turn the udp path's UDP segmentation and receive
	// offloads off (soft.OpenOptions); both are on by default.
	NoGSO, NoGRO bool
	// NoGather copies every payload into its packet
	// (soft.OpenOptions.NoGather); by default the udp path sends large
	// ones from where they lie.
	NoGather bool
	// Busy makes the driver of a device opened for traffic poll without
	// blocking (soft.OpenOptions.Busy).
	Busy bool
	// Spin is soft.OpenOptions.Spin (0: the default; negative: the driver
	// never polls after activity, it blocks at once).
	Spin time.Duration
	// Congestion is the device's congestion control
	// (soft.OpenOptions.Congestion; the zero value is ecn).
	Congestion engine.CCMode
	// TargetDelay is soft.OpenOptions.TargetDelay (0: the default;
	// negative: off).
	TargetDelay time.Duration
	// TOS and NoECN are soft.OpenOptions.TOS and NoECN: the TOS byte of
	// the packets sent (ECT(0) unless its ECN field is set), and not-ECT.
	TOS   uint8
	NoECN bool
}

// Resolve returns the device address and the MTU of its interface (0 when
// no interface holds it).
func (s Soft) Resolve() (netip.Addr, int, error) {
	a, err := soft.ResolveAddr(s.Addr)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("--addr: %w", err)
	}
	mtu, _ := soft.LinkMTU(a)
	return a, mtu, nil
}

// Open creates the soft device SoftName (soft.Open) on the packet path
// s.Path. For traffic it listens on UDP port 4791 of the address; for
// inspection only (devices, devinfo) on a port the kernel chooses.
func (s Soft) Open(traffic bool) (*soft.Device, error) {
	dev, _, err := soft.Open(soft.OpenOptions{Name: SoftName, Addr: s.Addr, Path: s.Path, Pcap: s.Pcap, Inspect: !traffic, NoGSO: s.NoGSO, NoGRO: s.NoGRO, NoGather: s.NoGather, Busy: s.Busy && traffic, Spin: s.Spin, Congestion: s.Congestion, TargetDelay: s.TargetDelay, TOS: s.TOS, NoECN: s.NoECN})
	return dev, err
}

// OpenDevice opens the device a command's -d names: a libibverbs device (in
// an ibverbs build), else s's soft device, whose name "" also names. It
// returns the device, its provider's name ("ibverbs" or "soft") and what
// closes it.
func (s Soft) OpenDevice(name string) (verbs.Device, string, func(), error) {
	if hw, ok := OpenHW(name); ok {
		return hw, "ibverbs", func() {}, nil
	}
	sdev, err := s.Open(true)
	if err != nil {
		return nil, "", nil, err
	}
	if name != "" && name != sdev.Name() {
		sdev.Close()
		return nil, "", nil, fmt.Errorf("IB device %s not found", name)
	}
	return sdev, "soft", func() { sdev.Close() }, nil
}

// Opened is a device opened by Soft.OpenContext, with its context.
type Opened struct {
	// Device is the device, and Context its open context.
	Device  verbs.Device
	Context verbs.Context
	// Name is the device's name.
	Name string
	// Provider is the device's provider: "ibverbs" or "soft".
	Provider string

	closeDev func()
}

// Close closes the context and the device.
func (o *Opened) Close() {
	o.Context.Close()
	o.closeDev()
}

// OpenContext opens the device name names (as OpenDevice) and a context on
// it.
func (s Soft) OpenContext(name string) (*Opened, error) {
	dev, provider, closeDev, err := s.OpenDevice(name)
	if err != nil {
		return nil, err
	}
	ctx, err := dev.Open()
	if err != nil {
		closeDev()
		return nil, fmt.Errorf("couldn't get context for %s: %w", dev.Name(), err)
	}
	return &Opened{Device: dev, Context: ctx, Name: dev.Name(), Provider: provider, closeDev: closeDev}, nil
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

// HWDevices lists the devices of this build's providers other than soft
// (none without -tags ibverbs).
func HWDevices() ([]verbs.Device, error) { return hwRegistry().Devices() }

// OpenHW returns the device called name when a provider other than soft
// has it (name "" and SoftName are the soft device's).
func OpenHW(name string) (verbs.Device, bool) {
	if name == "" || name == SoftName {
		return nil, false
	}
	d, _, err := hwRegistry().Lookup(name)
	if err != nil {
		return nil, false
	}
	return d, true
}

// WriteDevices prints devs as ibv_devices does: each name and node GUID
// under a header.
func WriteDevices(w io.Writer, devs []verbs.Device) {
	fmt.Fprintf(w, "    %-16s\t   node GUID\n", "device")
	fmt.Fprintf(w, "    %-16s\t----------------\n", "------")
	for _, d := range devs {
		fmt.Fprintf(w, "    %-16s\t%016x\n", d.Name(), d.GUID())
	}
}

// WriteNames prints the names of devs as ibv_devinfo -l does.
func WriteNames(w io.Writer, devs []verbs.Device) {
	if len(devs) == 1 {
		fmt.Fprintf(w, "1 HCA found:\n")
	} else {
		fmt.Fprintf(w, "%d HCAs found:\n", len(devs))
	}
	for _, d := range devs {
		fmt.Fprintf(w, "\t%s\n", d.Name())
	}
	fmt.Fprintln(w)
}

// Listing is what a listing command (goroce devices, goroce devinfo) shows:
// the soft device, opened for inspection, then this build's other devices.
type Listing struct {
	// Devices are the devices listed, the soft device first.
	Devices []verbs.Device
	// Soft is the soft device; nil when it could not be opened.
	Soft *soft.Device
	// HWErr is the error listing the other devices (HWDevices), if any.
	HWErr error
}

// Close closes the soft device.
func (l *Listing) Close() {
	if l.Soft != nil {
		l.Soft.Close()
	}
}

// List opens s's soft device for inspection and lists it with this build's
// other devices, or alone when softOnly is set. The soft device's error is
// returned when nothing would be listed without it: softOnly is set, or
// there is no other device.
func (s Soft) List(softOnly bool) (*Listing, error) {
	l := &Listing{}
	var hw []verbs.Device
	if !softOnly {
		hw, l.HWErr = HWDevices()
	}
	dev, err := s.Open(false)
	if err != nil {
		if softOnly || len(hw) == 0 {
			return nil, err
		}
	} else {
		l.Soft = dev
		l.Devices = append(l.Devices, dev)
	}
	l.Devices = append(l.Devices, hw...)
	return l, nil
}

// OpenPair opens two soft devices for traffic, for both sides of a test in
// one process (goroce bench --loopback): the first on s.Addr (default
// 127.0.0.1), which must be an IPv4 address, the second on the next
// address, both on the packet path s.Path. The first records to s.Pcap:
// what it sends and receives is the whole of the traffic between the two.
// It returns the first device's address.
func (s Soft) OpenPair() (first, second *soft.Device, addr netip.Addr, err error) {
	if s.Addr == "" {
		s.Addr = "127.0.0.1"
	}
	a, err := netip.ParseAddr(s.Addr)
	if err != nil || !a.Is4() {
		return nil, nil, netip.Addr{}, fmt.Errorf("--addr %q: want an IPv4 address", s.Addr)
	}
	// Both take every setting of s: the first its address, the second the
	// next one and no pcap.
	one, two := s, s
	one.Addr, two.Addr, two.Pcap = a.String(), a.Next().String(), ""
	if first, err = one.Open(true); err != nil {
		return nil, nil, netip.Addr{}, err
	}
	if second, err = two.Open(true); err != nil {
		first.Close()
		return nil, nil, netip.Addr{}, err
	}
	return first, second, a, nil
}
