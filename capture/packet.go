package capture

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/goroce/goroce/wire"
)

// ICRCStatus is the outcome of checking a packet's invariant CRC.
type ICRCStatus uint8

// ICRC check outcomes.
const (
	// ICRCUnchecked: the ICRC could not be computed (packet shorter than a
	// BTH and an ICRC, IPv4 options, or cut short by the capture).
	ICRCUnchecked ICRCStatus = iota
	ICRCOK
	ICRCBad
)

// String returns "OK", "BAD" or "n/a".
func (s ICRCStatus) String() string {
	switch s {
	case ICRCOK:
		return "OK"
	case ICRCBad:
		return "BAD"
	}
	return "n/a"
}

// FlowKey names one direction of traffic to one queue pair: packets from
// Src to Dst whose BTH destination QP is DestQP.
type FlowKey struct {
	Src, Dst netip.Addr
	DestQP   wire.QPN
}

// String formats the key as "10.0.0.1 > 10.0.0.2 dqp=0x000011".
func (k FlowKey) String() string { return string(k.appendTo(nil)) }

func (k FlowKey) appendTo(b []byte) []byte {
	b = k.Src.AppendTo(b)
	b = append(b, " > "...)
	b = k.Dst.AppendTo(b)
	b = append(b, " dqp="...)
	return appendHex(b, uint64(k.DestQP), 6)
}

// Packet is a decoded capture record. Its slices point into the record's data
// and are valid only as long as that is.
type Packet struct {
	Record
	// RoCE reports whether the record is a RoCEv2 packet (UDP to port
	// 4791). The other fields below are meaningful only when it is.
	RoCE bool
	// Frame locates the IP and UDP headers in Data.
	Frame wire.Frame
	// Transport is the UDP payload: BTH to ICRC.
	Transport []byte
	// Parsed reports whether wire.Parse accepted the transport headers
	// (possibly with an ErrInvalidRequest error); Wire is valid then.
	Parsed bool
	// Wire is the parsed transport packet.
	Wire wire.Packet
	// PMTU is the path MTU the packet was checked against: the Decoder's
	// fixed one, or the one inferred for its flow; 0 when unknown.
	PMTU int
	// ICRC is the outcome of the ICRC check and ICRCWant the value the
	// packet should carry (valid unless ICRCUnchecked).
	ICRC     ICRCStatus
	ICRCWant uint32
	// Err is the first framing, parsing or path-MTU problem found, nil when
	// there is none. A bad ICRC is reported in ICRC, not here.
	Err error
}

// Bad reports whether the packet is a RoCEv2 packet that is malformed or
// fails its ICRC check.
func (p *Packet) Bad() bool { return p.RoCE && (p.Err != nil || p.ICRC == ICRCBad) }

// Trusted reports whether the packet's transport headers can be believed:
// parsed, ICRC not bad, and no error other than an invalid-request one (a
// well-formed request that a responder would NAK).
func (p *Packet) Trusted() bool {
	return p.Parsed && p.ICRC != ICRCBad && (p.Err == nil || errors.Is(p.Err, wire.ErrInvalidRequest))
}

// BTH returns the base transport header, or nil when the transport packet is
// shorter than one.
func (p *Packet) BTH() wire.BTH {
	if len(p.Transport) < wire.BTHLen {
		return nil
	}
	return wire.BTH(p.Transport[:wire.BTHLen])
}

// ICRCBytes returns the four ICRC bytes as carried on the wire, or nil when
// the transport packet is shorter than a BTH and an ICRC.
func (p *Packet) ICRCBytes() []byte {
	if len(p.Transport) < wire.MinPacketLen || p.Truncated() {
		return nil
	}
	return p.Transport[len(p.Transport)-wire.ICRCLen:]
}

// Key returns the packet's flow key; ok is false when it has no BTH.
func (p *Packet) Key() (k FlowKey, ok bool) {
	b := p.BTH()
	if !p.RoCE || b == nil {
		return k, false
	}
	return FlowKey{Src: p.Frame.Src(), Dst: p.Frame.Dst(), DestQP: b.DestQP()}, true
}

// Decoder decodes capture records into Packets. It remembers the path MTU of
// each flow; the zero value infers them.
type Decoder struct {
	// PMTU is the path MTU of every flow (256, 512, 1024, 2048 or 4096).
	// When 0, the path MTU of a flow is inferred from the payload of its
	// first valid FIRST or MIDDLE packet; packets before it are held to
	// wire.Parse's rules only.
	PMTU int
	mtus map[FlowKey]int
}

// Decode decodes rec into p, overwriting all of p. Records of other link
// types, and packets that are not UDP to port 4791, come out with p.RoCE
// false.
func (d *Decoder) Decode(rec *Record, p *Packet) {
	*p = Packet{Record: *rec}
	if !rec.LinkType.Supported() {
		return
	}
	roce, ferr := frameRecord(rec.Data, rec.LinkType, &p.Frame)
	if !roce {
		return
	}
	p.RoCE, p.Err = true, ferr
	tp := p.Frame.Transport()
	p.Transport = tp
	if rec.Truncated() {
		// The headers that are there are shown, but neither the headers'
		// consistency nor the ICRC can be judged; the IP and UDP lengths
		// cannot match the bytes captured.
		p.Err = ErrSnapped
		return
	}
	perr := wire.Parse(tp, &p.Wire)
	p.Parsed = perr == nil || errors.Is(perr, wire.ErrInvalidRequest)
	if p.Err == nil {
		p.Err = perr
	}
	if len(tp) >= wire.MinPacketLen {
		if want, err := wire.ComputeICRC(p.Frame.IPUDP(), tp); err == nil {
			p.ICRCWant, p.ICRC = want, ICRCBad
			if want == binary.LittleEndian.Uint32(tp[len(tp)-wire.ICRCLen:]) {
				p.ICRC = ICRCOK
			}
		}
	}
	if p.Parsed && perr == nil {
		d.checkPMTU(p)
	}
}

// checkPMTU applies the flow's path MTU to a parsed packet, or learns it.
func (d *Decoder) checkPMTU(p *Packet) {
	mtu := d.PMTU
	var key FlowKey
	if mtu == 0 {
		key, _ = p.Key()
		mtu = d.mtus[key]
	}
	if mtu == 0 {
		pos := p.Wire.Info.Position
		if (pos == wire.PosFirst || pos == wire.PosMiddle) && p.Err == nil && p.ICRC != ICRCBad && wire.ValidMTU(p.Wire.PayloadLen) {
			if d.mtus == nil {
				d.mtus = make(map[FlowKey]int)
			}
			d.mtus[key] = p.Wire.PayloadLen
			p.PMTU = p.Wire.PayloadLen
		}
		return
	}
	p.PMTU = mtu
	if err := p.Wire.CheckPMTU(mtu); err != nil && p.Err == nil {
		p.Err = err
	}
}
