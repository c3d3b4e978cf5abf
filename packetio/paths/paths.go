// Package paths opens a soft device's packet path by name: "udp" (batched
// recvmmsg/sendmmsg, package udp), "uring" (io_uring, package uring),
// "afxdp" (AF_XDP rings over a UMEM, package afxdp), or "auto", which takes
// the fastest that works (udp where the kernel offers UDP GSO, else AF_XDP,
// then udp) and says which one it took and why it passed over the others.
// Every goroce command that opens a device takes --path.
//
// Every path sends ECN-capable packets (ECT(0)) unless Options.NoECN says
// not to, and reports the kernel's receive drops (packetio.RxDropCounter).
//
// The udp and afxdp paths send each packet from the source port its
// Packet.Port asks for (packetio.SourcePorts), so a soft device over them
// sends UD packets with a flow label from the label's port; uring sends
// everything from its socket's port.
//
// AF_XDP attaches an XDP program to the interface that has the address (it
// redirects UDP port 4791 to the device and passes everything else on), and
// the frames it sends bypass the interface's packet taps: tcpdump on that
// interface does not see them (capture on the peer, or use --path udp).
// On a link whose MTU one UMEM frame does not hold (9000: a 4096-byte path
// MTU's packets) it chains frames (multi-buffer AF_XDP, Linux 6.6), which
// the detail says; where the kernel refuses that, auto takes udp and says
// why.
package paths

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/packetio/uring"
)

// The path names.
const (
	UDP   = "udp"
	Uring = "uring"
	AFXDP = "afxdp"
	Auto  = "auto"
)

// Names lists the paths Open accepts, auto last.
var Names = []string{UDP, Uring, AFXDP, Auto}

// autoOrder is the order auto tries, fastest first as measured between two
// namespaces over veth, with one exception (autoGSO): the udp path with UDP
// GSO goes first. AF_XDP moves frames through rings shared with the kernel
// with no system call per packet, about 3x the packets per second of a
// socket sending one datagram per packet (1 KiB); but a socket with GSO
// sends a run of packets as one message that crosses veth whole, and a soft
// device over it moved 2.3-3.7x the bytes/s of one over AF_XDP at MTU 9000
// (RC WRITE 64 B, 4 KiB and 64 KiB, SEND 4 KiB) and 1.2-2.6x at MTU 1500,
// where AF_XDP kept a round trip about 0.75x as long (64 B SEND). The
// socket path also attaches nothing to the interface and always works.
// io_uring is not tried: under a soft device it measured slower than
// recvmmsg/sendmmsg (RC WRITE goodput 0.5-0.6x, SEND round trip several
// times longer), because a receive completes only on the thread that armed
// it; choose it by name.
var autoOrder = []string{AFXDP, UDP}

// autoGSO opens the udp path for auto and keeps it when its UDP GSO is on
// (see autoOrder); otherwise it closes it and reports why it passed it over.
func autoGSO(local netip.Addr, o Options) (packetio.Conn, string, string) {
	if o.NoGSO {
		return nil, "", "GSO turned off"
	}
	c, err := udp.Listen(local, udpOptions(o))
	if err != nil {
		return nil, "", err.Error()
	}
	off := c.Offloads()
	if !off.GSO {
		c.Close()
		return nil, "", "GSO off: " + off.GSOReason
	}
	return c, off.String(), ""
}

// ErrUnknownPath is returned for a path name Open does not know.
var ErrUnknownPath = errors.New("paths: unknown packet path (want udp, uring, afxdp or auto)")

// Options are what the three paths have in common. Zero fields take each
// path's defaults.
type Options struct {
	// Inspect opens the path for looking only (goroce devices, devinfo):
	// the socket paths bind a port the kernel chooses with small buffers,
	// so that they work beside a running device, and auto never tries
	// AF_XDP, which would attach a program to the interface.
	Inspect bool
	// Batch and MaxPacket as in udp.Options.
	Batch, MaxPacket int
	// Port is the local UDP port (default 4791), ignored with Inspect.
	Port int
	// NoGSO and NoGRO turn off the udp path's UDP segmentation and
	// generic receive offloads (udp.Options.GSO and GRO), which it uses by
	// default when the kernel offers them.
	NoGSO, NoGRO bool
	// TOS and NoECN are every path's Options.TOS and NoECN: the IPv4 TOS
	// byte of transmitted packets, ECT(0) when its ECN field is left 0 (the
	// default: TOS 0x02, DSCP 0, ECN-capable, as RoCE NICs send), and
	// not-ECT with NoECN (packetio.SendTOS).
	TOS   uint8
	NoECN bool
}

// Chosen says which path Open took.
type Chosen struct {
	// Path is the path in use: udp, uring or afxdp.
	Path string
	// Detail is what the path reports of itself: io_uring's features in use,
	// AF_XDP's attach and bind mode and interface.
	Detail string
	// Skipped lists, for auto, each faster path that was passed over and why.
	Skipped []string
}

// String is the path with its detail and, for auto, what was skipped.
func (c Chosen) String() string {
	s := c.Path
	if c.Detail != "" {
		s += " (" + c.Detail + ")"
	}
	if len(c.Skipped) > 0 {
		s += "; not " + strings.Join(c.Skipped, "; not ")
	}
	return s
}

// Open opens the packet path name on the local IPv4 address.
func Open(local netip.Addr, name string, o Options) (packetio.Conn, Chosen, error) {
	switch name {
	case UDP, Uring, AFXDP:
		c, detail, err := open(local, name, o)
		if err != nil {
			return nil, Chosen{}, err
		}
		return c, Chosen{Path: name, Detail: detail}, nil
	case Auto, "":
		var ch Chosen
		c, detail, why := autoGSO(local, o)
		if c != nil {
			ch.Path, ch.Detail = UDP, detail
			return c, ch, nil
		}
		// Passed over for now: udp without GSO comes again after AF_XDP.
		ch.Skipped = append(ch.Skipped, UDP+" with GSO: "+why)
		for _, p := range autoOrder {
			if p == AFXDP && (o.Inspect || local.IsLoopback()) {
				why := "inspection only"
				if !o.Inspect {
					why = "a loopback address has no interface to attach to"
				}
				ch.Skipped = append(ch.Skipped, p+": "+why)
				continue
			}
			c, detail, err := open(local, p, o)
			if err != nil {
				ch.Skipped = append(ch.Skipped, fmt.Sprintf("%s: %v", p, err))
				continue
			}
			ch.Path, ch.Detail = p, detail
			return c, ch, nil
		}
		return nil, ch, fmt.Errorf("paths: no packet path works on %v: %s", local, strings.Join(ch.Skipped, "; "))
	}
	return nil, Chosen{}, fmt.Errorf("%w: %q", ErrUnknownPath, name)
}

// udpOptions are the udp path's options for o.
func udpOptions(o Options) udp.Options {
	uo := udp.Options{MaxPacket: o.MaxPacket, TOS: o.TOS, NoECN: o.NoECN}
	uo.Port, uo.RecvBuffer, uo.SendBuffer, uo.Batch = o.socket()
	if o.NoGSO {
		uo.GSO = udp.OffloadOff
	}
	if o.NoGRO {
		uo.GRO = udp.OffloadOff
	}
	return uo
}

func open(local netip.Addr, name string, o Options) (packetio.Conn, string, error) {
	switch name {
	case UDP:
		c, err := udp.Listen(local, udpOptions(o))
		if err != nil {
			return nil, "", err
		}
		return c, c.Offloads().String(), nil
	case Uring:
		uo := uring.Options{MaxPacket: o.MaxPacket, TOS: o.TOS, NoECN: o.NoECN}
		uo.Port, uo.RecvBuffer, uo.SendBuffer, uo.Batch = o.socket()
		c, err := uring.Listen(local, uo)
		if err != nil {
			return nil, "", err
		}
		return c, c.Features().String(), nil
	case AFXDP:
		if o.Port < 0 || o.Port > 0xFFFF {
			return nil, "", fmt.Errorf("paths: AF_XDP needs a fixed UDP port, not %d", o.Port)
		}
		c, err := afxdp.Listen(local, afxdp.Options{Batch: o.Batch, MaxPacket: o.MaxPacket, Port: uint16(o.Port), DstPort: uint16(o.Port),
			TOS: o.TOS, NoECN: o.NoECN})
		if err != nil {
			return nil, "", err
		}
		detail := c.Mode() + " on " + c.Interface()
		if multi, fs := c.MultiBuffer(); multi {
			// The MTU needs packets chained over UMEM frames.
			detail += fmt.Sprintf(", multi-buffer %d-byte frames", fs)
		}
		return c, detail, nil
	}
	return nil, "", fmt.Errorf("%w: %q", ErrUnknownPath, name)
}

// socket returns the port, socket buffer sizes and batch of a socket-based
// path (udp, uring): those asked for (buffers: the paths' defaults), or for
// Inspect a port the kernel chooses, the kernel's buffers and batches of
// one.
func (o Options) socket() (port, recvBuffer, sendBuffer, batch int) {
	if o.Inspect {
		return udp.AnyPort, -1, -1, 1
	}
	return o.Port, 0, 0, o.Batch
}
