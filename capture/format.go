package capture

import (
	"encoding/hex"
	"net/netip"
	"strconv"

	"github.com/goroce/goroce/wire"
)

const hexDigits = "0123456789abcdef"

// appendHex appends v as 0x followed by at least digits hex digits.
func appendHex(b []byte, v uint64, digits int) []byte {
	var buf [16]byte
	i := len(buf)
	for v != 0 || len(buf)-i < digits || i == len(buf) {
		i--
		buf[i] = hexDigits[v&15]
		v >>= 4
	}
	b = append(b, "0x"...)
	return append(b, buf[i:]...)
}

// appendICRCHex appends the ICRC value v as the hex of its four wire bytes
// (little-endian), the form of icrc_hex.
func appendICRCHex(b []byte, v uint32) []byte {
	for i := 0; i < 4; i++ {
		c := byte(v >> (8 * i))
		b = append(b, hexDigits[c>>4], hexDigits[c&15])
	}
	return b
}

func appendBit(b []byte, v bool) []byte {
	if v {
		return append(b, '1')
	}
	return append(b, '0')
}

func appendInt(b []byte, v int) []byte { return strconv.AppendInt(b, int64(v), 10) }

func appendUint(b []byte, v uint64) []byte { return strconv.AppendUint(b, v, 10) }

// addrPort returns the IP address and UDP port of one end of a framed packet.
func addrPorts(p *Packet) (src, dst netip.AddrPort) {
	u := p.Frame.UDP()
	return netip.AddrPortFrom(p.Frame.Src(), u.SrcPort()), netip.AddrPortFrom(p.Frame.Dst(), u.DstPort())
}

// opcodeName returns the name of the packet's opcode.
func opcodeName(p *Packet, b wire.BTH) string {
	if p.Parsed {
		return p.Wire.Info.Name
	}
	return b.Opcode().String()
}

// AppendLine appends the one-line summary of a RoCEv2 packet, without a
// newline:
//
//	06:20:59.000001 10.0.0.1:49152 > 10.0.0.2:4791 RC_RDMA_WRITE_ONLY(0x0a) dqp=0x000011 psn=512 A=1 SE=0 M=0 pad=2 pkey=0xffff RETH[va=0x7f1200000000 rkey=0x00c0ffee dlen=10] payload=10 ICRC=OK
//
// FECN and BECN appear only when set. A packet with a problem ends in
// "MALFORMED: " and the error; a bad ICRC shows as
// ICRC=BAD(wire=xxxxxxxx want=yyyyyyyy), both in wire byte order.
func AppendLine(b []byte, p *Packet) []byte {
	b = p.Time.AppendFormat(b, "15:04:05.000000")
	b = append(b, ' ')
	src, dst := addrPorts(p)
	b = src.AppendTo(b)
	b = append(b, " > "...)
	b = dst.AppendTo(b)
	bth := p.BTH()
	if bth == nil {
		b = append(b, " transport "...)
		b = appendInt(b, len(p.Transport))
		b = append(b, " B"...)
	} else {
		b = append(b, ' ')
		b = append(b, opcodeName(p, bth)...)
		b = append(b, "(0x"...)
		b = append(b, hexDigits[bth[0]>>4], hexDigits[bth[0]&15], ')')
		b = append(b, " dqp="...)
		b = appendHex(b, uint64(bth.DestQP()), 6)
		b = append(b, " psn="...)
		b = appendUint(b, uint64(bth.PSN()))
		b = append(b, " A="...)
		b = appendBit(b, bth.AckReq())
		b = append(b, " SE="...)
		b = appendBit(b, bth.SE())
		b = append(b, " M="...)
		b = appendBit(b, bth.MigReq())
		b = append(b, " pad="...)
		b = appendInt(b, bth.PadCount())
		b = append(b, " pkey="...)
		b = appendHex(b, uint64(bth.PKey()), 4)
		if bth.FECN() {
			b = append(b, " FECN=1"...)
		}
		if bth.BECN() {
			b = append(b, " BECN=1"...)
		}
	}
	if p.Parsed {
		b = appendExtLine(b, &p.Wire)
		b = append(b, " payload="...)
		b = appendInt(b, p.Wire.PayloadLen)
	}
	switch p.ICRC {
	case ICRCOK:
		b = append(b, " ICRC=OK"...)
	case ICRCBad:
		b = append(b, " ICRC=BAD(wire="...)
		b = hex.AppendEncode(b, p.ICRCBytes())
		b = append(b, " want="...)
		b = appendICRCHex(b, p.ICRCWant)
		b = append(b, ')')
	default:
		b = append(b, " ICRC=n/a"...)
	}
	if p.Err != nil {
		b = append(b, " MALFORMED: "...)
		b = append(b, p.Err.Error()...)
	}
	return b
}

// appendExtLine appends the extension headers of a parsed packet in the
// order they follow the BTH.
func appendExtLine(b []byte, w *wire.Packet) []byte {
	if h := w.RDETH(); h != nil {
		b = append(b, " RDETH[eec="...)
		b = appendHex(b, uint64(h.EEC()), 6)
		b = append(b, ']')
	}
	if h := w.DETH(); h != nil {
		b = append(b, " DETH[qkey="...)
		b = appendHex(b, uint64(h.QKey()), 8)
		b = append(b, " srcqp="...)
		b = appendHex(b, uint64(h.SrcQP()), 6)
		b = append(b, ']')
	}
	if h := w.RETH(); h != nil {
		b = append(b, " RETH[va="...)
		b = appendHex(b, h.VA(), 1)
		b = append(b, " rkey="...)
		b = appendHex(b, uint64(h.RKey()), 8)
		b = append(b, " dlen="...)
		b = appendUint(b, uint64(h.DMALen()))
		b = append(b, ']')
	}
	if h := w.AtomicETH(); h != nil {
		b = append(b, " AtomicETH[va="...)
		b = appendHex(b, h.VA(), 1)
		b = append(b, " rkey="...)
		b = appendHex(b, uint64(h.RKey()), 8)
		b = append(b, " swap_add="...)
		b = appendHex(b, h.SwapAdd(), 1)
		b = append(b, " compare="...)
		b = appendHex(b, h.Compare(), 1)
		b = append(b, ']')
	}
	if h := w.AETH(); h != nil {
		b = append(b, " AETH["...)
		b = append(b, h.Syndrome().String()...)
		b = append(b, " msn="...)
		b = appendUint(b, uint64(h.MSN()))
		b = append(b, ']')
	}
	if h := w.AtomicAckETH(); h != nil {
		b = append(b, " AtomicAckETH[orig="...)
		b = appendHex(b, h.Orig(), 1)
		b = append(b, ']')
	}
	if h := w.ImmDt(); h != nil {
		b = append(b, " ImmDt["...)
		b = appendHex(b, uint64(h.Imm()), 8)
		b = append(b, ']')
	}
	if h := w.IETH(); h != nil {
		b = append(b, " IETH[rkey="...)
		b = appendHex(b, uint64(h.RKey()), 8)
		b = append(b, ']')
	}
	if h := w.FETH(); h != nil {
		b = append(b, " FETH[type="...)
		b = appendInt(b, int(h.PlacementType()))
		b = append(b, " sel="...)
		b = appendInt(b, int(h.Selectivity()))
		b = append(b, ']')
	}
	return b
}
