//go:build linux

package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/wire"
)

// Indices of the program's counters (a per-CPU array).
const (
	ctrRedirected = 0 // RoCEv2 packets to the local address redirected to a socket
	ctrNoSocket   = 1 // RoCEv2 packets to the local address on a queue without a socket (passed)
	numCounters   = 2
)

// xdpProgram is the XDP program, its XSKMAP and counters, attached to an
// interface through a BPF link (detached when the link is closed, also if
// the process dies).
type xdpProgram struct {
	prog     *ebpf.Program
	xsks     *ebpf.Map
	counters *ebpf.Map
	link     link.Link
	native   bool
}

// instructions returns the XDP program, in eBPF assembly (no C compiler
// needed): an untagged Ethernet frame carrying IPv4 without options, not a
// fragment, UDP to port dstPort and IP destination local goes to the AF_XDP
// socket of its RX queue through the XSKMAP (bpf_redirect_map with XDP_PASS
// as the action when that queue has no socket); everything else (ARP, ICMP,
// other traffic) is passed to the kernel.
//
// Loads of packet bytes are little-endian on the CPUs this runs on, so the
// constants below are the network-order values as such a load sees them.
func instructions(xsks, counters *ebpf.Map, local netip.Addr, dstPort uint16) asm.Instructions {
	var ipLE int32
	if local.Is4() {
		ip := local.As4()
		ipLE = int32(binary.LittleEndian.Uint32(ip[:]))
	}
	const (
		offEtherType = 12
		offVerIHL    = wire.EthernetLen
		offFrag      = wire.EthernetLen + 6
		offProto     = wire.EthernetLen + 9
		offDstIP     = wire.EthernetLen + 16
		offDstPort   = wire.EthernetLen + wire.IPv4Len + 2
		hdrs         = wire.EthernetLen + wire.IPv4Len + wire.UDPLen
	)
	count := func(idx int32, label string) asm.Instructions {
		return asm.Instructions{
			asm.StoreImm(asm.RFP, -4, int64(idx), asm.Word).WithSymbol(label),
			asm.LoadMapPtr(asm.R1, counters.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, label+"_out"),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
			asm.Mov.Reg(asm.R0, asm.R7).WithSymbol(label + "_out"),
			asm.Return(),
		}
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),              // ctx: struct xdp_md
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // data_end
	}
	if local.Is6() {
		insns = append(insns, match6(local, dstPort)...)
	} else {
		insns = append(insns,
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, hdrs),
			asm.JGT.Reg(asm.R4, asm.R3, "pass"), // shorter than Ethernet+IPv4+UDP
			asm.LoadMem(asm.R5, asm.R2, offEtherType, asm.Half),
			asm.JNE.Imm(asm.R5, le16(wire.EtherTypeIPv4), "pass"),
			asm.LoadMem(asm.R5, asm.R2, offVerIHL, asm.Byte),
			asm.JNE.Imm(asm.R5, 0x45, "pass"), // IPv4, 20-byte header
			asm.LoadMem(asm.R5, asm.R2, offProto, asm.Byte),
			asm.JNE.Imm(asm.R5, wire.IPProtocolUDP, "pass"),
			asm.LoadMem(asm.R5, asm.R2, offFrag, asm.Half),
			asm.And.Imm(asm.R5, le16(0x3FFF)), // MF or a fragment offset: the kernel reassembles
			asm.JNE.Imm(asm.R5, 0, "pass"),
			asm.LoadMem(asm.R5, asm.R2, offDstIP, asm.Word),
			asm.JNE.Imm32(asm.R5, ipLE, "pass"),
			asm.LoadMem(asm.R5, asm.R2, offDstPort, asm.Half),
			asm.JNE.Imm(asm.R5, le16(dstPort), "pass"),
		)
	}
	insns = append(insns,
		// bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.LoadMem(asm.R2, asm.R6, 16, asm.Word),
		asm.Mov.Imm(asm.R3, int32(xdpPass)),
		asm.FnRedirectMap.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.JNE.Imm(asm.R7, int32(xdpRedirect), "nosocket"),
	)
	insns = append(insns, count(ctrRedirected, "redirected")...)
	insns = append(insns, count(ctrNoSocket, "nosocket")...)
	insns = append(insns,
		asm.Mov.Imm(asm.R0, int32(xdpPass)).WithSymbol("pass"),
		asm.Return(),
	)
	return insns
}

// le16 is a network-order 16-bit value as a little-endian load sees it.
func le16(v uint16) int32 { return int32(v>>8 | v<<8&0xFF00) }

// match6 is the IPv6 part of the program: an untagged Ethernet frame
// carrying IPv6 whose next header is UDP (no extension headers: the kernel
// handles those), to local and UDP port dstPort, goes on to the redirect;
// anything else jumps to "pass".
func match6(local netip.Addr, dstPort uint16) asm.Instructions {
	const (
		offEtherType = 12
		offNext      = wire.EthernetLen + 6
		offDstIP     = wire.EthernetLen + 24
		offDstPort   = wire.EthernetLen + wire.IPv6Len + 2
		hdrs         = wire.EthernetLen + wire.IPv6Len + wire.UDPLen
	)
	ip := local.As16()
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, hdrs),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"), // shorter than Ethernet+IPv6+UDP
		asm.LoadMem(asm.R5, asm.R2, offEtherType, asm.Half),
		asm.JNE.Imm(asm.R5, le16(wire.EtherTypeIPv6), "pass"),
		asm.LoadMem(asm.R5, asm.R2, offNext, asm.Byte),
		asm.JNE.Imm(asm.R5, wire.IPProtocolUDP, "pass"),
	}
	for w := 0; w < 16; w += 4 {
		insns = append(insns,
			asm.LoadMem(asm.R5, asm.R2, int16(offDstIP+w), asm.Word),
			asm.JNE.Imm32(asm.R5, int32(binary.LittleEndian.Uint32(ip[w:])), "pass"),
		)
	}
	return append(insns,
		asm.LoadMem(asm.R5, asm.R2, offDstPort, asm.Half),
		asm.JNE.Imm(asm.R5, le16(dstPort), "pass"),
	)
}

const (
	xdpPass     = 2
	xdpRedirect = 4
)

// loadProgram creates the maps (an XSKMAP of queues entries) and the
// program for packets to local:port; frags loads it with
// BPF_F_XDP_HAS_FRAGS (it then sees frames larger than a page, in several
// buffers: it reads only the headers, in the first). attach attaches it.
func loadProgram(queues int, local netip.Addr, port uint16, frags bool) (_ *xdpProgram, err error) {
	p := &xdpProgram{}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.xsks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "goroce_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues)}); err != nil {
		return nil, bpfErr("create XSKMAP", err)
	}
	if p.counters, err = ebpf.NewMap(&ebpf.MapSpec{Name: "goroce_xdpctr", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: numCounters}); err != nil {
		return nil, bpfErr("create counters map", err)
	}
	var flags uint32
	if frags {
		flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	if p.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "goroce_xdp",
		Type:         ebpf.XDP,
		Instructions: instructions(p.xsks, p.counters, local, port),
		License:      "Dual MIT/GPL",
		Flags:        flags,
	}); err != nil {
		return nil, bpfErr("load XDP program", err)
	}
	return p, nil
}

// attach attaches the program to the interface: mode says native, generic,
// or auto (native, else generic).
func (p *xdpProgram) attach(ifindex int, mode string) error {
	modes := []link.XDPAttachFlags{link.XDPDriverMode, link.XDPGenericMode}
	switch mode {
	case AttachNative:
		modes = modes[:1]
	case AttachGeneric:
		modes = modes[1:]
	case AttachAuto:
	default:
		return fmt.Errorf("packetio/afxdp: unknown attach mode %q", mode)
	}
	var errs []error
	for _, m := range modes {
		l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: m})
		if err == nil {
			p.link, p.native = l, m == link.XDPDriverMode
			return nil
		}
		errs = append(errs, bpfErr(fmt.Sprintf("attach XDP (%s)", attachName(m)), err))
	}
	return errors.Join(errs...)
}

func attachName(m link.XDPAttachFlags) string {
	if m == link.XDPDriverMode {
		return AttachNative
	}
	return AttachGeneric
}

// register puts a socket in the XSKMAP at its queue.
func (p *xdpProgram) register(queue, fd int) error {
	if err := p.xsks.Put(uint32(queue), uint32(fd)); err != nil {
		return bpfErr(fmt.Sprintf("XSKMAP update for queue %d", queue), err)
	}
	return nil
}

// count returns the sums over CPUs of the program's counters.
func (p *xdpProgram) count() (redirected, noSocket uint64, err error) {
	var sums [numCounters]uint64
	for i := range uint32(numCounters) {
		var per []uint64
		if err := p.counters.Lookup(i, &per); err != nil {
			return 0, 0, fmt.Errorf("packetio/afxdp: read XDP counters: %w", err)
		}
		for _, v := range per {
			sums[i] += v
		}
	}
	return sums[ctrRedirected], sums[ctrNoSocket], nil
}

func (p *xdpProgram) close() {
	if p.link != nil {
		p.link.Close()
	}
	if p.prog != nil {
		p.prog.Close()
	}
	if p.xsks != nil {
		p.xsks.Close()
	}
	if p.counters != nil {
		p.counters.Close()
	}
}

func bpfErr(what string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("packetio/afxdp: %s: %w: %w: %w", what, ErrPermission, errNotSupported, err)
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ERANGE):
		return fmt.Errorf("packetio/afxdp: %s: %w: %w", what, errNotSupported, err)
	}
	return fmt.Errorf("packetio/afxdp: %s: %w", what, err)
}
