package capture

import (
	"encoding/binary"
	"encoding/hex"
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
		b = append(b, "    ICRC: "...)
		b = hex.AppendEncode(b, p.ICRCBytes())
		b = append(b, " (correct)\n"...)
	case ICRCBad:
		b = append(b, "    ICRC: "...)
		b = hex.AppendEncode(b, p.ICRCBytes())
		b = append(b, " (BAD, should be "...)
		b = appendICRCHex(b, p.ICRCWant)
		b = append(b, ")\n"...)
	default:
		b = append(b, "    ICRC: not checked\n"...)
	}
	if p.Err != nil {
		b = append(b, "    MALFORMED: "...)
		b = append(b, p.Err.Error()...)
		b = append(b, '\n')
	}
	return b
}

func line(b []byte, indent int, label string) []byte {
	for i := 0; i < indent; i++ {
		b = append(b, "    "...)
	}
	b = append(b, label...)
	return b
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

func appendSLLPacketType(b []byte, t uint16) []byte {
	b = appendUint(b, uint64(t))
	if int(t) < len(sllPacketTypes) {
		b = append(b, " ("...)
		b = append(b, sllPacketTypes[t]...)
		b = append(b, ')')
	}
	return append(b, '\n')
}

func appendLinkAddr(b []byte, addr []byte, n int) []byte {
	n = min(n, len(addr))
	return appendMAC(b, addr[:n])
}

func appendLinkVerbose(b []byte, p *Packet) []byte {
	d := p.Data[:p.Frame.L3]
	switch p.LinkType {
	case LinkEthernet:
		e := wire.Ethernet(d)
		b = line(b, 1, "Ethernet II\n")
		b = line(b, 2, "destination: ")
		b = appendMAC(b, d[0:6])
		b = append(b, '\n')
		b = line(b, 2, "source: ")
		b = appendMAC(b, d[6:12])
		b = append(b, '\n')
		off := 12
		for et := e.EtherType(); (et == wire.EtherTypeVLAN || et == wire.EtherTypeQinQ) && off+6 <= len(d); et = binary.BigEndian.Uint16(d[off:]) {
			tci := binary.BigEndian.Uint16(d[off+2:])
			b = line(b, 2, "VLAN tag: TPID ")
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
		et := binary.BigEndian.Uint16(d[off:])
		b = line(b, 2, "type: ")
		b = appendHex(b, uint64(et), 4)
		b = append(b, etherTypeName(et)...)
		b = append(b, '\n')
	case LinkSLL:
		b = line(b, 1, "Linux cooked capture v1\n")
		b = line(b, 2, "packet type: ")
		b = appendSLLPacketType(b, binary.BigEndian.Uint16(d))
		b = line(b, 2, "ARPHRD type: ")
		b = appendUint(b, uint64(binary.BigEndian.Uint16(d[2:])))
		b = append(b, '\n')
		b = line(b, 2, "address: ")
		b = appendLinkAddr(b, d[6:14], int(binary.BigEndian.Uint16(d[4:])))
		b = append(b, '\n')
		b = line(b, 2, "protocol: ")
		et := binary.BigEndian.Uint16(d[14:])
		b = appendHex(b, uint64(et), 4)
		b = append(b, etherTypeName(et)...)
		b = append(b, '\n')
	case LinkSLL2:
		b = line(b, 1, "Linux cooked capture v2\n")
		b = line(b, 2, "protocol: ")
		et := binary.BigEndian.Uint16(d)
		b = appendHex(b, uint64(et), 4)
		b = append(b, etherTypeName(et)...)
		b = append(b, '\n')
		b = line(b, 2, "interface index: ")
		b = appendUint(b, uint64(binary.BigEndian.Uint32(d[4:])))
		b = append(b, '\n')
		b = line(b, 2, "ARPHRD type: ")
		b = appendUint(b, uint64(binary.BigEndian.Uint16(d[8:])))
		b = append(b, '\n')
		b = line(b, 2, "packet type: ")
		b = appendSLLPacketType(b, uint16(d[10]))
		b = line(b, 2, "address: ")
		b = appendLinkAddr(b, d[12:20], int(d[11]))
		b = append(b, '\n')
	default:
		b = line(b, 1, "raw IP (no link-layer header)\n")
	}
	return b
}

func appendIPVerbose(b []byte, p *Packet) []byte {
	f := &p.Frame
	if ip := f.IPv4(); ip != nil {
		b = line(b, 1, "IPv4\n")
		b = line(b, 2, "version: 4\n")
		b = line(b, 2, "header length: ")
		b = appendInt(b, ip.HeaderLen())
		b = append(b, '\n')
		b = line(b, 2, "TOS: ")
		b = appendHex(b, uint64(ip.TOS()), 2)
		b = append(b, " (DSCP "...)
		b = appendUint(b, uint64(ip.TOS()>>2))
		b = append(b, ", ECN "...)
		b = appendUint(b, uint64(ip.TOS()&3))
		b = append(b, ")\n"...)
		b = line(b, 2, "total length: ")
		b = appendInt(b, ip.TotalLen())
		b = append(b, '\n')
		b = line(b, 2, "ID: ")
		b = appendHex(b, uint64(ip.ID()), 4)
		b = append(b, '\n')
		flags := binary.BigEndian.Uint16(ip[6:])
		b = line(b, 2, "DF: ")
		b = appendBit(b, ip.DF())
		b = append(b, '\n')
		b = line(b, 2, "MF: ")
		b = appendBit(b, flags&0x2000 != 0)
		b = append(b, '\n')
		b = line(b, 2, "fragment offset: ")
		b = appendUint(b, uint64(flags&0x1FFF)*8)
		b = append(b, '\n')
		b = line(b, 2, "TTL: ")
		b = appendUint(b, uint64(ip.TTL()))
		b = append(b, '\n')
		b = line(b, 2, "protocol: ")
		b = appendUint(b, uint64(ip.Protocol()))
		b = append(b, " (UDP)\n"...)
		b = line(b, 2, "header checksum: ")
		b = appendHex(b, uint64(ip.Checksum()), 4)
		if ip.ChecksumOK() {
			b = append(b, " (correct)\n"...)
		} else {
			b = append(b, " (BAD)\n"...)
		}
		b = line(b, 2, "source: ")
		b = ip.Src().AppendTo(b)
		b = append(b, '\n')
		b = line(b, 2, "destination: ")
		b = ip.Dst().AppendTo(b)
		return append(b, '\n')
	}
	ip := f.IPv6()
	b = line(b, 1, "IPv6\n")
	b = line(b, 2, "version: 6\n")
	b = line(b, 2, "traffic class: ")
	b = appendHex(b, uint64(ip.TrafficClass()), 2)
	b = append(b, " (DSCP "...)
	b = appendUint(b, uint64(ip.TrafficClass()>>2))
	b = append(b, ", ECN "...)
	b = appendUint(b, uint64(ip.TrafficClass()&3))
	b = append(b, ")\n"...)
	b = line(b, 2, "flow label: ")
	b = appendHex(b, uint64(ip.FlowLabel()), 5)
	b = append(b, '\n')
	b = line(b, 2, "payload length: ")
	b = appendInt(b, ip.PayloadLen())
	b = append(b, '\n')
	b = line(b, 2, "next header: ")
	b = appendUint(b, uint64(ip.NextHeader()))
	b = append(b, " (UDP)\n"...)
	b = line(b, 2, "hop limit: ")
	b = appendUint(b, uint64(ip.HopLimit()))
	b = append(b, '\n')
	b = line(b, 2, "source: ")
	b = ip.Src().AppendTo(b)
	b = append(b, '\n')
	b = line(b, 2, "destination: ")
	b = ip.Dst().AppendTo(b)
	return append(b, '\n')
}

func appendUDPVerbose(b []byte, p *Packet) []byte {
	u := p.Frame.UDP()
	b = line(b, 1, "UDP\n")
	b = line(b, 2, "source port: ")
	b = appendUint(b, uint64(u.SrcPort()))
	b = append(b, '\n')
	b = line(b, 2, "destination port: ")
	b = appendUint(b, uint64(u.DstPort()))
	b = append(b, " (RoCEv2)\n"...)
	b = line(b, 2, "length: ")
	b = appendInt(b, u.Length())
	b = append(b, '\n')
	b = line(b, 2, "checksum: ")
	b = appendHex(b, uint64(u.Checksum()), 4)
	switch {
	case u.Checksum() == 0:
		b = append(b, " (none)\n"...)
	case p.Truncated():
		b = append(b, " (not checked)\n"...)
	case p.Frame.CheckUDPChecksum() == nil:
		b = append(b, " (correct)\n"...)
	default:
		// Not counted as malformed: senders with checksum offload capture
		// their own packets before the NIC fills the checksum in.
		b = append(b, " (incorrect)\n"...)
	}
	return b
}

func appendTransportVerbose(b []byte, p *Packet) []byte {
	bth := p.BTH()
	if bth == nil {
		b = line(b, 1, "transport: ")
		b = appendInt(b, len(p.Transport))
		return append(b, " bytes, too short for a BTH\n"...)
	}
	b = line(b, 1, "BTH\n")
	b = line(b, 2, "opcode: ")
	b = appendHex(b, uint64(bth.Opcode()), 2)
	b = append(b, ' ')
	b = append(b, opcodeName(p, bth)...)
	b = append(b, '\n')
	b = line(b, 2, "solicited event: ")
	b = appendBit(b, bth.SE())
	b = append(b, '\n')
	b = line(b, 2, "migration request: ")
	b = appendBit(b, bth.MigReq())
	b = append(b, '\n')
	b = line(b, 2, "pad count: ")
	b = appendInt(b, bth.PadCount())
	b = append(b, '\n')
	b = line(b, 2, "transport version: ")
	b = appendUint(b, uint64(bth.TVer()))
	b = append(b, '\n')
	b = line(b, 2, "partition key: ")
	b = appendHex(b, uint64(bth.PKey()), 4)
	b = append(b, '\n')
	b = line(b, 2, "FECN: ")
	b = appendBit(b, bth.FECN())
	b = append(b, '\n')
	b = line(b, 2, "BECN: ")
	b = appendBit(b, bth.BECN())
	b = append(b, '\n')
	b = line(b, 2, "reserved (6 bits): ")
	b = appendHex(b, uint64(bth.Resv6a()), 2)
	b = append(b, '\n')
	b = line(b, 2, "destination QP: ")
	b = appendHex(b, uint64(bth.DestQP()), 6)
	b = append(b, '\n')
	b = line(b, 2, "ack request: ")
	b = appendBit(b, bth.AckReq())
	b = append(b, '\n')
	b = line(b, 2, "reserved (7 bits): ")
	b = appendHex(b, uint64(bth.Resv7()), 2)
	b = append(b, '\n')
	b = line(b, 2, "PSN: ")
	b = appendUint(b, uint64(bth.PSN()))
	b = append(b, " ("...)
	b = appendHex(b, uint64(bth.PSN()), 6)
	b = append(b, ")\n"...)
	if !p.Parsed {
		return b
	}
	w := &p.Wire
	if h := w.RDETH(); h != nil {
		b = line(b, 1, "RDETH\n")
		b = line(b, 2, "EE context: ")
		b = appendHex(b, uint64(h.EEC()), 6)
		b = append(b, '\n')
	}
	if h := w.DETH(); h != nil {
		b = line(b, 1, "DETH\n")
		b = line(b, 2, "Q_Key: ")
		b = appendHex(b, uint64(h.QKey()), 8)
		b = append(b, '\n')
		b = line(b, 2, "reserved: ")
		b = appendHex(b, uint64(h.Reserved()), 2)
		b = append(b, '\n')
		b = line(b, 2, "source QP: ")
		b = appendHex(b, uint64(h.SrcQP()), 6)
		b = append(b, '\n')
	}
	if h := w.RETH(); h != nil {
		b = line(b, 1, "RETH\n")
		b = line(b, 2, "virtual address: ")
		b = appendHex(b, h.VA(), 16)
		b = append(b, '\n')
		b = line(b, 2, "R_Key: ")
		b = appendHex(b, uint64(h.RKey()), 8)
		b = append(b, '\n')
		b = line(b, 2, "DMA length: ")
		b = appendUint(b, uint64(h.DMALen()))
		b = append(b, '\n')
	}
	if h := w.AtomicETH(); h != nil {
		b = line(b, 1, "AtomicETH\n")
		b = line(b, 2, "virtual address: ")
		b = appendHex(b, h.VA(), 16)
		b = append(b, '\n')
		b = line(b, 2, "R_Key: ")
		b = appendHex(b, uint64(h.RKey()), 8)
		b = append(b, '\n')
		if w.Info.Operation == wire.OpFetchAdd {
			b = line(b, 2, "add data: ")
		} else {
			b = line(b, 2, "swap data: ")
		}
		b = appendHex(b, h.SwapAdd(), 16)
		b = append(b, '\n')
		b = line(b, 2, "compare data: ")
		b = appendHex(b, h.Compare(), 16)
		b = append(b, '\n')
	}
	if h := w.AETH(); h != nil {
		b = line(b, 1, "AETH\n")
		b = line(b, 2, "syndrome: ")
		b = appendHex(b, uint64(h.Syndrome()), 2)
		b = append(b, ' ')
		b = append(b, h.Syndrome().String()...)
		b = append(b, '\n')
		b = line(b, 2, "MSN: ")
		b = appendUint(b, uint64(h.MSN()))
		b = append(b, '\n')
	}
	if h := w.AtomicAckETH(); h != nil {
		b = line(b, 1, "AtomicAckETH\n")
		b = line(b, 2, "original remote data: ")
		b = appendHex(b, h.Orig(), 16)
		b = append(b, '\n')
	}
	if h := w.ImmDt(); h != nil {
		b = line(b, 1, "ImmDt\n")
		b = line(b, 2, "immediate data: ")
		b = appendHex(b, uint64(h.Imm()), 8)
		b = append(b, '\n')
	}
	if h := w.IETH(); h != nil {
		b = line(b, 1, "IETH\n")
		b = line(b, 2, "R_Key to invalidate: ")
		b = appendHex(b, uint64(h.RKey()), 8)
		b = append(b, '\n')
	}
	if pad := cnpPad(w); pad != nil {
		b = line(b, 1, "CNP reserved: 16 bytes")
		if !isZero(pad) {
			b = append(b, ", not zero"...)
		}
		b = append(b, '\n')
	}
	b = line(b, 1, "payload: ")
	b = appendInt(b, w.PayloadLen)
	b = append(b, " bytes"...)
	if pad := bth.PadCount(); pad > 0 {
		b = append(b, " + "...)
		b = appendInt(b, pad)
		b = append(b, " pad"...)
	}
	return append(b, '\n')
}
