package engine

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// IPHeader is what a packet's IP header carries from its address vector:
// the traffic class (IPv4 TOS or IPv6 traffic class: DSCP << 2 | ECN), the
// hop limit (IPv4 TTL or IPv6 hop limit) and the IPv6 flow label. An RC QP's
// packets (requests and responses alike) take its own address vector's, a
// UD send its address handle's, as rdma_rxe builds them; QP 1's MADs carry
// none (zero). Zero fields mean the packet path's defaults: its TOS (ECT(0)
// unless told otherwise), TTL 64, the kernel's flow label.
type IPHeader struct {
	TrafficClass uint8
	HopLimit     uint8
	FlowLabel    uint32
}

// ipHeaderOf returns the IP header fields of an address vector.
func ipHeaderOf(ah *verbs.AHAttr) IPHeader {
	return IPHeader{TrafficClass: ah.TrafficClass, HopLimit: ah.HopLimit, FlowLabel: ah.FlowLabel & 0xFFFFF}
}

// OutputIP returns the IP header fields of the packet the last Output,
// OutputFrom or OutputGather call returned, for the packet path to send it
// with (packetio.Packet's TOS, HopLimit and FlowLabel).
func (e *Engine) OutputIP() IPHeader { return e.outIP }

// sameFamily reports whether a is an address the engine can send to: of
// its own address's family (IPv4, IPv4-mapped included, or IPv6).
func (e *Engine) sameFamily(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsValid() && a.Is4() == e.cfg.Local.Is4()
}

// checkFamily checks that an address vector's destination is of the
// engine's address family.
func (e *Engine) checkFamily(a *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if mask&verbs.AttrAV == 0 || e.sameFamily(a.AHAttr.DGID.Addr()) {
		return nil
	}
	if e.cfg.Local.Is4() {
		return fmt.Errorf("engine: destination GID %v is not an IPv4-mapped GID, and the engine sends from %v: %w", a.AHAttr.DGID, e.cfg.Local, verbs.ErrInvalidAttr)
	}
	return fmt.Errorf("engine: destination GID %v is IPv4-mapped, and the engine sends from %v over IPv6: %w", a.AHAttr.DGID, e.cfg.Local, verbs.ErrInvalidAttr)
}

// fillGRH fills a UD receive's 40-byte GRH area as rdma_rxe does: over
// IPv4 the datagram's IPv4 header in its last 20 bytes, over IPv6 the IPv6
// header, both as the sender's socket would have built them for n bytes of
// transport packet (what the packet path does not report: TTL 64, traffic
// class and flow label 0).
func (e *Engine) fillGRH(grh *[40]byte, from, to netip.Addr, n int) {
	from, to = from.Unmap(), to.Unmap()
	if !e.cfg.Local.Is4() {
		binary.BigEndian.PutUint32(grh[0:], 6<<28)
		binary.BigEndian.PutUint16(grh[4:], uint16(wire.UDPLen+n))
		grh[6], grh[7] = wire.IPProtocolUDP, 64
		src, dst := from.As16(), to.As16()
		copy(grh[8:], src[:])
		copy(grh[24:], dst[:])
		return
	}
	ip := grh[20:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(wire.IPv4UDPLen+n))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	ip[8], ip[9] = 64, wire.IPProtocolUDP
	src, dst := from.As4(), to.As4()
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	wire.IPv4(ip).SetChecksum()
}
