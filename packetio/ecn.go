package packetio

// The ECN field, the two low bits of the IPv4 TOS byte (RFC 3168 section
// 5): a sender marks a packet ECN-capable with ECT(0) or ECT(1), and a
// congested switch that would drop an ECN-capable packet marks it CE
// instead. RoCE NICs send every RoCEv2 packet ECT(0) (TOS 0x02 with DSCP
// 0), and a receiver that sees CE answers with a CNP (RoCEv2 Annex A17).
const (
	// ECNMask selects the ECN field of a TOS byte.
	ECNMask uint8 = 0x03
	// NotECT marks a packet of a transport that does not react to ECN: a
	// congested switch drops it rather than marking it.
	NotECT uint8 = 0x00
	// ECT1 is ECN-capable transport (1).
	ECT1 uint8 = 0x01
	// ECT0 is ECN-capable transport (0), what RoCE NICs send.
	ECT0 uint8 = 0x02
	// CE is congestion experienced, set by a switch on its way.
	CE uint8 = 0x03
)

// SendTOS returns the TOS byte a Conn sends given its options' TOS and
// NoECN: tos itself when its ECN field is set (ECT(1), ECT(0) or CE, as
// asked); tos with ECT(0) when its ECN field is 0 (the default: ECN-capable,
// as RoCE NICs); and with noECN, tos with its ECN field cleared (not-ECT,
// for a network that mishandles ECN), whatever it held. The DSCP (the six
// high bits) is tos's in every case.
func SendTOS(tos uint8, noECN bool) uint8 {
	switch {
	case noECN:
		return tos &^ ECNMask
	case tos&ECNMask == NotECT:
		return tos | ECT0
	}
	return tos
}

// PacketTOS returns the TOS byte (IPv6: traffic class) a Conn whose own is
// connTOS (SendTOS of its options) sends a packet with: connTOS when the
// packet's TOS is 0, else SendTOS(tos, noECN). An address vector's traffic
// class thus sets the DSCP, and its ECN field, left 0, stays ECT(0) unless
// the Conn is not-ECT (NoECN): ECN-capable transport is the device's
// choice, which an address vector written for hardware, where the NIC
// decides it, does not turn off by leaving the field 0.
func PacketTOS(tos, connTOS uint8, noECN bool) uint8 {
	if tos == 0 {
		return connTOS
	}
	return SendTOS(tos, noECN)
}

// RxDropCounter is implemented by a Conn that learns how many datagrams the
// kernel dropped before it could read them (a socket's receive buffer full,
// an AF_XDP ring full).
type RxDropCounter interface {
	// RxDropped returns that count since the Conn opened. Cheap: a load.
	RxDropped() uint64
}
