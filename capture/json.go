package capture

import (
	"encoding/hex"
	"time"

	"github.com/goroce/goroce/wire"
)

// AppendJSON appends a RoCEv2 packet as one JSON object, without a newline.
// Its keys are those of the test-vector files (golden.json):
//
//	frame, time, src, dst, sport, dport, ip_version, opcode, opcode_name,
//	bth{opcode,se,m,pad,tver,pkey,fecn,becn,resv6a,dqpn,ackreq,resv7,psn},
//	ext{RETH{va,rkey,dlen}, AETH{syndrome,msn}, AtomicETH{va,rkey,swap_add,compare},
//	    AtomicAckETH{orig}, DETH{qkey,reserved,srcqp}, ImmDt{imm}, IETH{rkey}, FETH{type,sel},
//	    RDETH{eec}, CNPPad{nonzero}},
//	payload_len, icrc_hex, icrc_ok, error
//
// Flags are 0 or 1 and numbers are decimal, as in the vector files. opcode
// and bth are absent when the packet is shorter than a BTH; ext lists only
// the headers present and is empty when the headers could not be parsed;
// payload_len is present only when they could; icrc_hex only when the
// packet has an ICRC, icrc_ok only when it could be checked; error only when
// the packet is malformed (or, failing that, when its ICRC is bad).
func AppendJSON(b []byte, p *Packet) []byte {
	b = append(b, `{"frame":`...)
	b = appendInt(b, p.Index)
	b = append(b, `,"time":"`...)
	b = p.Time.AppendFormat(b, time.RFC3339Nano)
	src, dst := addrPorts(p)
	b = append(b, `","src":"`...)
	b = src.Addr().AppendTo(b)
	b = append(b, `","dst":"`...)
	b = dst.Addr().AppendTo(b)
	b = append(b, `","sport":`...)
	b = appendUint(b, uint64(src.Port()))
	b = append(b, `,"dport":`...)
	b = appendUint(b, uint64(dst.Port()))
	b = append(b, `,"ip_version":`...)
	b = appendInt(b, p.Frame.IPVersion)
	if bth := p.BTH(); bth != nil {
		b = append(b, `,"opcode":`...)
		b = appendUint(b, uint64(bth.Opcode()))
		b = append(b, `,"opcode_name":"`...)
		b = append(b, opcodeName(p, bth)...)
		b = append(b, `","bth":{"opcode":`...)
		b = appendUint(b, uint64(bth.Opcode()))
		b = jsonField(b, "se", uint64(bitVal(bth.SE())))
		b = jsonField(b, "m", uint64(bitVal(bth.MigReq())))
		b = jsonField(b, "pad", uint64(bth.PadCount()))
		b = jsonField(b, "tver", uint64(bth.TVer()))
		b = jsonField(b, "pkey", uint64(bth.PKey()))
		b = jsonField(b, "fecn", uint64(bitVal(bth.FECN())))
		b = jsonField(b, "becn", uint64(bitVal(bth.BECN())))
		b = jsonField(b, "resv6a", uint64(bth.Resv6a()))
		b = jsonField(b, "dqpn", uint64(bth.DestQP()))
		b = jsonField(b, "ackreq", uint64(bitVal(bth.AckReq())))
		b = jsonField(b, "resv7", uint64(bth.Resv7()))
		b = jsonField(b, "psn", uint64(bth.PSN()))
		b = append(b, '}')
	}
	b = append(b, `,"ext":{`...)
	if p.Parsed {
		b = appendExtJSON(b, &p.Wire)
	}
	b = append(b, '}')
	if p.Parsed {
		b = append(b, `,"payload_len":`...)
		b = appendInt(b, p.Wire.PayloadLen)
	}
	if c := p.ICRCBytes(); c != nil {
		b = append(b, `,"icrc_hex":"`...)
		b = hex.AppendEncode(b, c)
		b = append(b, '"')
	}
	if p.ICRC != ICRCUnchecked {
		b = append(b, `,"icrc_ok":`...)
		if p.ICRC == ICRCOK {
			b = append(b, "true"...)
		} else {
			b = append(b, "false"...)
		}
	}
	switch {
	case p.Err != nil:
		b = append(b, `,"error":`...)
		b = appendJSONString(b, p.Err.Error())
	case p.ICRC == ICRCBad:
		b = append(b, `,"error":`...)
		b = appendJSONString(b, wire.ErrICRC.Error())
	}
	return append(b, '}')
}

func bitVal(v bool) int {
	if v {
		return 1
	}
	return 0
}

// jsonField appends ,"name":v.
func jsonField(b []byte, name string, v uint64) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendUint(b, v)
}

// jsonOpen appends "name":{"key":v (preceded by a comma unless first); more
// fields follow with jsonField and the object ends with '}'.
func jsonOpen(b []byte, first *bool, name, key string, v uint64) []byte {
	if !*first {
		b = append(b, ',')
	}
	*first = false
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":{"`...)
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendUint(b, v)
}

func appendExtJSON(b []byte, w *wire.Packet) []byte {
	first := true
	if h := w.RDETH(); h != nil {
		b = jsonOpen(b, &first, "RDETH", "eec", uint64(h.EEC()))
		b = append(b, '}')
	}
	if h := w.DETH(); h != nil {
		b = jsonOpen(b, &first, "DETH", "qkey", uint64(h.QKey()))
		b = jsonField(b, "reserved", uint64(h.Reserved()))
		b = jsonField(b, "srcqp", uint64(h.SrcQP()))
		b = append(b, '}')
	}
	if h := w.RETH(); h != nil {
		b = jsonOpen(b, &first, "RETH", "va", h.VA())
		b = jsonField(b, "rkey", uint64(h.RKey()))
		b = jsonField(b, "dlen", uint64(h.DMALen()))
		b = append(b, '}')
	}
	if h := w.AtomicETH(); h != nil {
		b = jsonOpen(b, &first, "AtomicETH", "va", h.VA())
		b = jsonField(b, "rkey", uint64(h.RKey()))
		b = jsonField(b, "swap_add", h.SwapAdd())
		b = jsonField(b, "compare", h.Compare())
		b = append(b, '}')
	}
	if h := w.AETH(); h != nil {
		b = jsonOpen(b, &first, "AETH", "syndrome", uint64(h.Syndrome()))
		b = jsonField(b, "msn", uint64(h.MSN()))
		b = append(b, '}')
	}
	if h := w.AtomicAckETH(); h != nil {
		b = jsonOpen(b, &first, "AtomicAckETH", "orig", h.Orig())
		b = append(b, '}')
	}
	if h := w.ImmDt(); h != nil {
		b = jsonOpen(b, &first, "ImmDt", "imm", uint64(h.Imm()))
		b = append(b, '}')
	}
	if h := w.IETH(); h != nil {
		b = jsonOpen(b, &first, "IETH", "rkey", uint64(h.RKey()))
		b = append(b, '}')
	}
	if h := w.FETH(); h != nil {
		b = jsonOpen(b, &first, "FETH", "type", uint64(h.PlacementType()))
		b = jsonField(b, "sel", uint64(h.Selectivity()))
		b = append(b, '}')
	}
	if pad := cnpPad(w); pad != nil {
		if !first {
			b = append(b, ',')
		}
		b = append(b, `"CNPPad":{"nonzero":`...)
		if isZero(pad) {
			b = append(b, "false}"...)
		} else {
			b = append(b, "true}"...)
		}
	}
	return b
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// cnpPad returns the 16 reserved bytes after the BTH of a CNP, or nil.
func cnpPad(w *wire.Packet) []byte {
	off := w.Info.Offset(wire.HasCNPPad)
	if off == 0 {
		return nil
	}
	return w.Buf[off : off+wire.CNPPadLen]
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
