package soft

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/paths"
	"github.com/goroce/goroce/packetio/tee"
)

// OpenOptions says where Open puts a soft device: the one place that
// decides a soft device's address, packet path and capture, for goroce's
// commands and for programs that want the same choices.
type OpenOptions struct {
	// Name of the device (default "soft0").
	Name string
	// Addr is the local IPv4 or IPv6 address (RoCEv2 over IPv6: the
	// device's GID is then that address's, see GIDIndexLinkLocal); ""
	// picks an IPv4 one (see ResolveAddr).
	Addr string
	// Path names the packet path (packetio/paths: udp, uring, afxdp or
	// auto; default auto).
	Path string
	// Pcap, if set, is a file that records every packet the device sends
	// and receives (tee.PcapWriter with Incoming), closed with the device.
	Pcap string
	// Inspect opens the device for inspection only (devices, devinfo): on
	// a port the kernel chooses, so that it works beside a running goroce
	// (auto then never attaches AF_XDP).
	Inspect bool
	// NoGSO and NoGRO turn off UDP segmentation offload (one system call
	// sends a run of equal-sized packets, cut into datagrams by the
	// kernel) and UDP generic receive offload (the kernel hands over runs
	// of datagrams in one buffer) on the udp path, which uses them by
	// default when the kernel offers them (see packetio/udp).
	NoGSO, NoGRO bool
	// TOS is the IPv4 TOS byte (DSCP << 2 | ECN) of the packets the device
	// sends (paths.Options.TOS). Its ECN field left 0 they leave ECT(0),
	// ECN-capable as RoCE NICs send them, so that congested switches mark
	// them CE instead of dropping them (the default: TOS 0x02); set, as
	// given.
	TOS uint8
	// NoECN sends them not-ECT (ECN field 0, TOS's DSCP kept), for a
	// network that mishandles ECN.
	NoECN bool
	// NoGather copies every payload into its packet (Options.NoGather).
	NoGather bool
	// Busy makes the device's driver poll without ever blocking (see
	// Options.Busy): lower latency for a processor kept busy. Default off.
	Busy bool
	// Spin is Options.Spin: how long the driver polls after activity
	// before it blocks (0: the default, 50µs; negative: never).
	Spin time.Duration
	// Congestion is the engine's congestion control (engine.CCMode: off,
	// loss or ecn; the zero value is ecn).
	Congestion engine.CCMode
	// TargetDelay is how far a congested path's standing round trip may
	// rise above its least before the window falls (engine.Config's
	// TargetDelay): 0 is the default, 100µs, which tolerates a busy host's
	// jitter; a smaller one keeps a bottleneck's queue shorter where the
	// hosts are quiet (docs/congestion.md); negative turns the delay
	// response off, and every loss then cuts the window.
	TargetDelay time.Duration
}

// Open resolves the address, opens the packet path and makes the device on
// it; the device takes its active MTU from the link and the path
// (PortMTU). It returns the path the device took.
func Open(o OpenOptions) (*Device, paths.Chosen, error) {
	addr, err := ResolveAddr(o.Addr)
	if err != nil {
		return nil, paths.Chosen{}, err
	}
	if o.Path == "" {
		o.Path = paths.Auto
	}
	if o.Name == "" {
		o.Name = "soft0"
	}
	conn, ch, err := paths.Open(addr, o.Path, paths.Options{Inspect: o.Inspect, NoGSO: o.NoGSO, NoGRO: o.NoGRO,
		TOS: o.TOS, NoECN: o.NoECN})
	if err != nil {
		return nil, ch, err
	}
	if o.Pcap != "" && !o.Inspect {
		if conn, err = recordTo(conn, o.Pcap); err != nil {
			return nil, ch, err
		}
	}
	dev, err := New(Options{Name: o.Name, Conn: conn, Path: ch.String(), Busy: o.Busy, Spin: o.Spin, NoGather: o.NoGather,
		Engine: engine.Config{Congestion: o.Congestion, TargetDelay: int64(o.TargetDelay)}})
	if err != nil {
		conn.Close()
		return nil, ch, err
	}
	return dev, ch, nil
}

// ResolveAddr returns the soft device's address: s when it is an IPv4 or
// IPv6 address (brackets allowed: "[fd99::1]"; no zone: a soft device on a
// link-local address would need one, and sends from a routable one), or,
// when s is empty, the first non-loopback IPv4 address of an interface
// that is up.
func ResolveAddr(s string) (netip.Addr, error) {
	if s != "" {
		if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
			s = s[1 : len(s)-1]
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("soft: address: %w", err)
		}
		a = a.Unmap()
		switch {
		case a.Zone() != "" || a.IsLinkLocalUnicast():
			return netip.Addr{}, fmt.Errorf("soft: address %v: link-local, the device's GID 0 already; give a routable address (RoCEv2 over IPv6 needs one, as rdma_rxe's GID 2)", a)
		case a.IsUnspecified() || a.IsMulticast():
			return netip.Addr{}, fmt.Errorf("soft: address %v: not a unicast address", a)
		}
		return a, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("soft: listing network interfaces: %w", err)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		as, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap().Is4() && !x.IsLoopback() {
					return x.Unmap(), nil
				}
			}
		}
	}
	return netip.Addr{}, errors.New("soft: no IPv4 address on an interface that is up: give one")
}

// pcapConn records every packet of a Conn to a pcap file, closed with the
// Conn.
type pcapConn struct {
	*tee.Conn
	inner packetio.Conn
	f     *os.File
	pw    *tee.PcapWriter
}

// RxDropped is the recorded Conn's count of the datagrams the kernel
// dropped (rxDropCounter), 0 when it keeps none.
func (c *pcapConn) RxDropped() uint64 {
	if dc, ok := c.inner.(rxDropCounter); ok {
		return dc.RxDropped()
	}
	return 0
}

// recordTo wraps conn so that it records to the pcap file at path; on error
// it closes conn.
func recordTo(conn packetio.Conn, path string) (packetio.Conn, error) {
	f, err := os.Create(path)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("soft: pcap: %w", err)
	}
	pw, err := tee.NewPcapWriter(f)
	if err != nil {
		f.Close()
		conn.Close()
		return nil, fmt.Errorf("soft: pcap: %w", err)
	}
	pw.Incoming = true
	return &pcapConn{Conn: tee.New(conn, pw.Write), inner: conn, f: f, pw: pw}, nil
}

// Close closes the Conn, then the file.
func (c *pcapConn) Close() error {
	err := c.Conn.Close()
	if ferr := c.f.Close(); err == nil {
		err = ferr
	}
	if werr := c.pw.Err(); err == nil && werr != nil {
		err = fmt.Errorf("soft: pcap: %w", werr)
	}
	return err
}
