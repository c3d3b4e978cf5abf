package capture

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"time"

	"github.com/goroce/goroce/wire"
)

// AppendVerbose appends a block describing a RoCEv2 packet, one field per
// line: the link-layer header, IP, UDP, every BTH field (reserved ones too),
// each extension header, the payload length, the ICRC and any problem. The
// block ends with a newline.
func AppendVerbose(b []byte, p *Packet) []byte {
	b = append(b, "frame "...)
	b = appendInt(b, p.Index)
	b = append(b, ' ')
	b = p.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, ", "...)
	b = appendInt(b, len(p.Data))
	b = append(b, " bytes captured, "...)
	b = appendInt(b, p.Length)
	b = append(b, " on the wire, link type "...)
	b = append(b, p.LinkType.String()...)
	b = append(b, '\n')
	b = appendLinkVerbose(b, p)
	b = appendIPVerbose(b, p)
	b = appendUDPVerbose(b, p)
	b = appendTransportVerbose(b, p)
	switch p.ICRC {
	case ICRCOK:
		b = hex.AppendEncode(field(b, 1, "ICRC"), p.ICRCBytes())
		b = append(b, " (correct)\n"...)
	case ICRCBad:
		b = hex.AppendEncode(field(b, 1, "ICRC"), p.ICRCBytes())
		b = append(b, " (BAD, should be "...)
		b = appendICRCHex(b, p.ICRCWant)
		b = append(b, ")\n"...)
	default:
		b = line(b, 1, "ICRC: not checked\n")
	}
	if p.Err != nil {
		b = append(field(b, 1, "MALFORMED"), p.Err.Error()...)
		b = append(b, '\n')
	}
	return b
}

// line appends indent levels of four spaces and then text.
func line(b []byte, indent int, text string) []byte {
	for i := 0; i < indent; i++ {
		b = append(b, "    "...)
	}
	return append(b, text...)
}

// heading appends a header's name on a line of its own.
func heading(b []byte, indent int, name string) []byte {
	return append(line(b, indent, name), '\n')
}

// field appends "label: " for the caller to append the value and the newline.
// The field helpers below append a whole line.
func field(b []byte, indent int, label string) []byte {
	return append(line(b, indent, label), ": "...)
}

func fieldUint(b []byte, indent int, label string, v uint64) []byte {
	return append(appendUint(field(b, indent, label), v), '\n')
}

func fieldInt(b []byte, indent int, label string, v int) []byte {
	return append(appendInt(field(b, indent, label), v), '\n')
}

// fieldHex appends v as 0x and at least digits hex digits.
func fieldHex(b []byte, indent int, label string, v uint64, digits int) []byte {
	return append(appendHex(field(b, indent, label), v, digits), '\n')
}

func fieldBit(b []byte, indent int, label string, v bool) []byte {
	return append(appendBit(field(b, indent, label), v), '\n')
}

func fieldAddr(b []byte, indent int, label string, a netip.Addr) []byte {
	return append(a.AppendTo(field(b, indent, label)), '\n')
}

func fieldMAC(b []byte, indent int, label string, m []byte) []byte {
	return append(appendMAC(field(b, indent, label), m), '\n')
}

// fieldEtherType appends an EtherType in hex with its name, if it has one.
func fieldEtherType(b []byte, indent int, label string, et uint16) []byte {
	b = appendHex(field(b, indent, label), uint64(et), 4)
	return append(append(b, etherTypeName(et)...), '\n')
}

// fieldDSCP appends a TOS or traffic class byte and its DSCP and ECN parts.
func fieldDSCP(b []byte, indent int, label string, v uint8) []byte {
	b = appendHex(field(b, indent, label), uint64(v), 2)
	b = append(b, " (DSCP "...)
	b = appendUint(b, uint64(v>>2))
	b = append(b, ", ECN "...)
	b = appendUint(b, uint64(v&3))
	return append(b, ")\n"...)
}

func appendMAC(b []byte, m []byte) []byte {
	for i, c := range m {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hexDigits[c>>4], hexDigits[c&15])
	}
	return b
}

func etherTypeName(et uint16) string {
	switch et {
	case wire.EtherTypeIPv4:
		return " (IPv4)"
	case wire.EtherTypeIPv6:
		return " (IPv6)"
	case wire.EtherTypeVLAN:
		return " (802.1Q)"
	case wire.EtherTypeQinQ:
		return " (802.1ad)"
	}
	return ""
}

var sllPacketTypes = [...]string{"to us", "broadcast", "multicast", "to someone else", "sent by us"}

// fieldSLLPacketType appends a cooked capture's packet type with its name, if
// it has one.
func fieldSLLPacketType(b []byte, indent int, t uint16) []byte {
	b = appendUint(field(b, indent, "packet type"), uint64(t))
	if int(t) < len(sllPacketTypes) {
		b = append(b, " ("...)
		b = append(b, sllPacketTypes[t]...)
		b = append(b, ')')
	}
	return append(b, '\n')
}

// linkAddr returns the first n bytes of a cooked capture's address field.
func linkAddr(addr []byte, n int) []byte { return addr[:min(n, len(addr))] }

func appendLinkVerbose(b []byte, p *Packet) []byte {
	d := p.Data[:p.Frame.L3]
	be := binary.BigEndian
	switch p.LinkType {
	case LinkEthernet:
		b = heading(b, 1, "Ethernet II")
		b = fieldMAC(b, 2, "destination", d[0:6])
		b = fieldMAC(b, 2, "source", d[6:12])
		off := 12
		for et := wire.Ethernet(d).EtherType(); (et == wire.EtherTypeVLAN || et == wire.EtherTypeQinQ) && off+6 <= len(d); et = be.Uint16(d[off:]) {
			tci := be.Uint16(d[off+2:])
			b = append(field(b, 2, "VLAN tag"), "TPID "...)
			b = appendHex(b, uint64(et), 4)
			b = append(b, etherTypeName(et)...)
			b = append(b, ", PCP "...)
			b = appendUint(b, uint64(tci>>13))
			b = append(b, ", DEI "...)
			b = appendUint(b, uint64(tci>>12&1))
			b = append(b, ", VID "...)
			b = appendUint(b, uint64(tci&0x0FFF))
			b = append(b, '\n')
			off += wire.VLANTagLen
		}
		b = fieldEtherType(b, 2, "type", be.Uint16(d[off:]))
	case LinkSLL:
		b = heading(b, 1, "Linux cooked capture v1")
		b = fieldSLLPacketType(b, 2, be.Uint16(d))
		b = fieldUint(b, 2, "ARPHRD type", uint64(be.Uint16(d[2:])))
		b = fieldMAC(b, 2, "address", linkAddr(d[6:14], int(be.Uint16(d[4:]))))
		b = fieldEtherType(b, 2, "protocol", be.Uint16(d[14:]))
	case LinkSLL2:
		b = heading(b, 1, "Linux cooked capture v2")
		b = fieldEtherType(b, 2, "protocol", be.Uint16(d))
		b = fieldUint(b, 2, "interface index", uint64(be.Uint32(d[4:])))
		b = fieldUint(b, 2, "ARPHRD type", uint64(be.Uint16(d[8:])))
		b = fieldSLLPacketType(b, 2, uint16(d[10]))
		b = fieldMAC(b, 2, "address", linkAddr(d[12:20], int(d[11])))
	default:
		b = heading(b, 1, "raw IP (no link-layer header)")
	}
	return b
}

func appendIPVerbose(b []byte, p *Packet) []byte {
	f := &p.Frame
	if ip := f.IPv4(); ip != nil {
		flags := binary.BigEndian.Uint16(ip[6:])
		b = heading(b, 1, "IPv4")
		b = fieldUint(b, 2, "version", 4)
		b = fieldInt(b, 2, "header length", ip.HeaderLen())
		b = fieldDSCP(b, 2, "TOS", ip.TOS())
		b = fieldInt(b, 2, "total length", ip.TotalLen())
		b = fieldHex(b, 2, "ID", uint64(ip.ID()), 4)
		b = fieldBit(b, 2, "DF", ip.DF())
		b = fieldBit(b, 2, "MF", flags&0x2000 != 0)
		b = fieldUint(b, 2, "fragment offset", uint64(flags&0x1FFF)*8)
		b = fieldUint(b, 2, "TTL", uint64(ip.TTL()))
		b = append(appendUint(field(b, 2, "protocol"), uint64(ip.Protocol())), " (UDP)\n"...)
		b = appendHex(field(b, 2, "header checksum"), uint64(ip.Checksum()), 4)
		if ip.ChecksumOK() {
			b = append(b, " (correct)\n"...)
		} else {
			b = append(b, " (BAD)\n"...)
		}
		b = fieldAddr(b, 2, "source", ip.Src())
		return fieldAddr(b, 2, "destination", ip.Dst())
	}
	ip := f.IPv6()
	b = heading(b, 1, "IPv6")
	b = fieldUint(b, 2, "version", 6)
	b = fieldDSCP(b, 2, "traffic class", ip.TrafficClass())
	b = fieldHex(b, 2, "flow label", uint64(ip.FlowLabel()), 5)
	b = fieldInt(b, 2, "payload length", ip.PayloadLen())
	b = append(appendUint(field(b, 2, "next header"), uint64(ip.NextHeader())), " (UDP)\n"...)
	b = fieldUint(b, 2, "hop limit", uint64(ip.HopLimit()))
	b = fieldAddr(b, 2, "source", ip.Src())
	return fieldAddr(b, 2, "destination", ip.Dst())
}

func appendUDPVerbose(b []byte, p *Packet) []byte {
	u := p.Frame.UDP()
	b = heading(b, 1, "UDP")
	b = fieldUint(b, 2, "source port", uint64(u.SrcPort()))
	b = append(appendUint(field(b, 2, "destination port"), uint64(u.DstPort())), " (RoCEv2)\n"...)
	b = fieldInt(b, 2, "length", u.Length())
	b = appendHex(field(b, 2, "checksum"), uint64(u.Checksum()), 4)
	switch {
	case u.Checksum() == 0:
		return append(b, " (none)\n"...)
	case p.Truncated():
		return append(b, " (not checked)\n"...)
	case p.Frame.CheckUDPChecksum() == nil:
		return append(b, " (correct)\n"...)
	}
	// Not counted as malformed: senders with checksum offload capture their
	// own packets before the NIC fills the checksum in.
	return append(b, " (incorrect)\n"...)
}

// appendTransportVerbose appends the transport headers: the BTH and, when
// the packet parsed, its extension headers, the CNP's reserved bytes and
// the payload length.
func appendTransportVerbose(b []byte, p *Packet) []byte {
	bth := p.BTH()
	if bth == nil {
		b = appendInt(field(b, 1, "transport"), len(p.Transport))
		return append(b, " bytes, too short for a BTH\n"...)
	}
	b = appendBTHVerbose(b, p, bth)
	if !p.Parsed {
		return b
	}
	w := &p.Wire
	b = appendExtVerbose(b, w)
	if pad := cnpPad(w); pad != nil {
		b = line(b, 1, "CNP reserved: 16 bytes")
		if !isZero(pad) {
			b = append(b, ", not zero"...)
		}
		b = append(b, '\n')
	}
	b = appendInt(field(b, 1, "payload"), w.PayloadLen)
	b = append(b, " bytes"...)
	if pad := bth.PadCount(); pad > 0 {
		b = append(b, " + "...)
		b = appendInt(b, pad)
		b = append(b, " pad"...)
	}
	return append(b, '\n')
}

// appendBTHVerbose appends p's BTH, every field, the reserved ones too.
func appendBTHVerbose(b []byte, p *Packet, bth wire.BTH) []byte {
	b = heading(b, 1, "BTH")
	b = appendHex(field(b, 2, "opcode"), uint64(bth.Opcode()), 2)
	b = append(append(append(b, ' '), opcodeName(p, bth)...), '\n')
	b = fieldBit(b, 2, "solicited event", bth.SE())
	b = fieldBit(b, 2, "migration request", bth.MigReq())
	b = fieldInt(b, 2, "pad count", bth.PadCount())
	b = fieldUint(b, 2, "transport version", uint64(bth.TVer()))
	b = fieldHex(b, 2, "partition key", uint64(bth.PKey()), 4)
	b = fieldBit(b, 2, "FECN", bth.FECN())
	b = fieldBit(b, 2, "BECN", bth.BECN())
	b = fieldHex(b, 2, "reserved (6 bits)", uint64(bth.Resv6a()), 2)
	b = fieldHex(b, 2, "destination QP", uint64(bth.DestQP()), 6)
	b = fieldBit(b, 2, "ack request", bth.AckReq())
	b = fieldHex(b, 2, "reserved (7 bits)", uint64(bth.Resv7()), 2)
	b = appendUint(field(b, 2, "PSN"), uint64(bth.PSN()))
	b = appendHex(append(b, " ("...), uint64(bth.PSN()), 6)
	return append(b, ")\n"...)
}

// appendExtVerbose appends the extension headers the parsed packet w
// carries after its BTH (RDETH to FETH), each with its fields.
func appendExtVerbose(b []byte, w *wire.Packet) []byte {
	if h := w.RDETH(); h != nil {
		b = heading(b, 1, "RDETH")
		b = fieldHex(b, 2, "EE context", uint64(h.EEC()), 6)
	}
	if h := w.DETH(); h != nil {
		b = heading(b, 1, "DETH")
		b = fieldHex(b, 2, "Q_Key", uint64(h.QKey()), 8)
		b = fieldHex(b, 2, "reserved", uint64(h.Reserved()), 2)
		b = fieldHex(b, 2, "source QP", uint64(h.SrcQP()), 6)
	}
	if h := w.RETH(); h != nil {
		b = heading(b, 1, "RETH")
		b = fieldHex(b, 2, "virtual address", h.VA(), 16)
		b = fieldHex(b, 2, "R_Key", uint64(h.RKey()), 8)
		b = fieldUint(b, 2, "DMA length", uint64(h.DMALen()))
	}
	if h := w.AtomicETH(); h != nil {
		b = heading(b, 1, "AtomicETH")
		b = fieldHex(b, 2, "virtual address", h.VA(), 16)
		b = fieldHex(b, 2, "R_Key", uint64(h.RKey()), 8)
		data := "swap data"
		if w.Info.Operation == wire.OpFetchAdd {
			data = "add data"
		}
		b = fieldHex(b, 2, data, h.SwapAdd(), 16)
		b = fieldHex(b, 2, "compare data", h.Compare(), 16)
	}
	if h := w.AETH(); h != nil {
		b = heading(b, 1, "AETH")
		b = appendHex(field(b, 2, "syndrome"), uint64(h.Syndrome()), 2)
		b = append(append(append(b, ' '), h.Syndrome().String()...), '\n')
		b = fieldUint(b, 2, "MSN", uint64(h.MSN()))
	}
	if h := w.AtomicAckETH(); h != nil {
		b = heading(b, 1, "AtomicAckETH")
		b = fieldHex(b, 2, "original remote data", h.Orig(), 16)
	}
	if h := w.ImmDt(); h != nil {
		b = heading(b, 1, "ImmDt")
		b = fieldHex(b, 2, "immediate data", uint64(h.Imm()), 8)
	}
	if h := w.IETH(); h != nil {
		b = heading(b, 1, "IETH")
		b = fieldHex(b, 2, "R_Key to invalidate", uint64(h.RKey()), 8)
	}
	if h := w.FETH(); h != nil {
		b = heading(b, 1, "FETH")
		b = fieldInt(b, 2, "placement type (1 global, 2 persistent)", int(h.PlacementType()))
		b = fieldInt(b, 2, "selectivity level (0 range, 1 memory region)", int(h.Selectivity()))
	}
	return b
}
