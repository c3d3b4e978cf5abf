package soft

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// HeaderAllowance is what rdma_rxe takes off its network device's MTU for
// the headers of a RoCEv2 packet before it picks the port's active MTU
// (RXE_MAX_HDR_LENGTH: IPv4 or IPv6, UDP, BTH, the largest extended
// transport headers and the ICRC fit in it).
const HeaderAllowance = 80

// PortMTU is the active MTU of a port on a link of MTU linkMTU bytes, as
// rdma_rxe computes it (rxe_set_mtu, eth_mtu_int_to_enum): the largest
// InfiniBand MTU not above linkMTU - HeaderAllowance, at least 256; 1024 on
// a 1500-byte Ethernet, 4096 on a 9000-byte one. It returns 0 when linkMTU
// is not positive (unknown link).
func PortMTU(linkMTU int) verbs.MTU {
	if linkMTU <= 0 {
		return 0
	}
	room := linkMTU - HeaderAllowance
	for m := verbs.MTU4096; m >= verbs.MTU256; m-- {
		if m.Bytes() <= room {
			return m
		}
	}
	return verbs.MTU256
}

// LinkMTU returns the MTU of the network interface that holds addr, and its
// name, in the network namespace of the calling goroutine's thread; 0 and ""
// when no interface holds it.
func LinkMTU(addr netip.Addr) (int, string) {
	addr = addr.Unmap()
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, ""
	}
	for _, ifc := range ifs {
		as, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == addr {
					return ifc.MTU, ifc.Name
				}
			}
		}
	}
	return 0, ""
}

// maxHeaders is the largest header stack of a packet carrying a full MTU
// of payload (a UD SEND_ONLY_WITH_IMMEDIATE has DETH and ImmDt, an RC WRITE
// RETH and ImmDt; RDETH is XRC's), with the ICRC.
const maxHeaders = wire.BTHLen + wire.RDETHLen + wire.DETHLen + wire.RETHLen + wire.ImmDtLen + wire.ICRCLen

// activeMTU picks a device's active MTU: want when set (refused when the
// link or the Conn cannot carry it), else the link's (PortMTU), capped by
// what maxPacket carries. It returns the MTU and words that say why, for
// the errors that name it.
func activeMTU(want verbs.MTU, local netip.Addr, maxPacket int) (verbs.MTU, string, error) {
	pathMax := verbs.MTU(0)
	for m := verbs.MTU4096; m >= verbs.MTU256; m-- {
		if m.Bytes()+maxHeaders <= maxPacket {
			pathMax = m
			break
		}
	}
	if pathMax == 0 {
		return 0, "", fmt.Errorf("soft: the packet path carries %d-byte packets, too few for a 256-byte MTU: %w", maxPacket, verbs.ErrInvalidAttr)
	}
	linkMTU, ifName := LinkMTU(local)
	linkMax := PortMTU(linkMTU)
	if want != 0 {
		if want < verbs.MTU256 || want > verbs.MTU4096 {
			return 0, "", fmt.Errorf("soft: ActiveMTU %d is no InfiniBand MTU: %w", want, verbs.ErrInvalidAttr)
		}
		if want > pathMax {
			return 0, "", fmt.Errorf("soft: ActiveMTU %d needs packets of %d bytes; the packet path carries %d: %w",
				want.Bytes(), want.Bytes()+maxHeaders, maxPacket, verbs.ErrInvalidAttr)
		}
		if linkMax != 0 && want > linkMax {
			return 0, "", fmt.Errorf("soft: ActiveMTU %d does not fit the link %s of MTU %d (at most %d): %w",
				want.Bytes(), ifName, linkMTU, linkMax.Bytes(), verbs.ErrInvalidAttr)
		}
		return want, "set by Options.ActiveMTU", nil
	}
	if linkMax != 0 && linkMax <= pathMax {
		return linkMax, fmt.Sprintf("link %s has MTU %d", ifName, linkMTU), nil
	}
	return pathMax, fmt.Sprintf("the packet path carries %d-byte packets", maxPacket), nil
}

// transmitFailed handles a Transmit error of the driver's batch: a packet
// the link refused as too long (EMSGSIZE: the route carries less than the
// QP's path MTU) would otherwise be retried until RETRY_EXC_ERR with
// nothing saying why. The QP that sent it goes to ERROR (its work
// completes with WR_FLUSH_ERR), its context gets IBV_EVENT_QP_FATAL, and
// QP.Err and every later post name the packet's size and the path MTU.
// Called with io and mu held, right after Transmit.
func (d *Device) transmitFailed(batch []packetio.Packet, err error) {
	var te *packetio.TransmitError
	if !errors.As(err, &te) || !errors.Is(te.Err, syscall.EMSGSIZE) || te.Index < 0 || te.Index >= len(batch) {
		return
	}
	p := batch[te.Index]
	if len(p.Buf) < wire.BTHLen {
		return
	}
	dest := uint32(wire.BTH(p.Buf).DestQP())
	for eqp, q := range d.async.qps {
		if eqp.Type() == verbs.QPTUD || eqp.State() == verbs.QPSErr || eqp.State() == verbs.QPSReset {
			continue
		}
		at := eqp.Query()
		if at.DestQPN != dest || at.AHAttr.DGID.Addr() != p.Addr {
			continue
		}
		why := fmt.Errorf("soft: QP %#x: the network refused a %d-byte packet to %v as too long (EMSGSIZE): path MTU %d is more than the route carries (port active MTU %d: %s): %w",
			eqp.Num(), len(p.Buf), p.Addr, at.PathMTU.Bytes(), d.mtu.Bytes(), d.mtuWhy, verbs.ErrInvalidState)
		q.txErr.Store(&why)
		eqp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
		d.onAsyncEvent(engine.AsyncEvent{Type: verbs.EventQPFatal, QP: eqp})
		return
	}
}
