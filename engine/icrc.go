package engine

import (
	"net/netip"

	"github.com/goroce/goroce/wire"
)

// flowCache keeps the prepared ICRC state (wire.FlowICRC) of the IPv4 flows
// an engine sends on or receives from most recently, so that sealing and
// checking a packet skips the IP and UDP headers' share of the CRC. It is
// direct-mapped on the addresses and port: a flow whose slot another flow
// took is prepared again (tens of ns), which costs only time.
type flowCache struct {
	slots [flowCacheSlots]flowSlot
	// local is the engine's address: the source of the flows of a cache of
	// sent packets, the destination of those of a cache of received ones
	// (rx). get names a flow by its other end and source port.
	local netip.Addr
	rx    bool
	// The flow get returned last, as its caller named it: consecutive
	// packets are mostly of one flow, and comparing the names is cheaper
	// than hashing them again. A slot changes flow only in lookup, whose
	// caller then makes it last: last's slot is always last's flow.
	last     *flowSlot
	lastPeer netip.Addr
	lastPort uint16
}

type flowSlot struct {
	addrs uint64 // source << 32 | destination IPv4 address; 0: empty
	port  uint16 // source UDP port
	c     wire.FlowICRC
	// Receive side: lowID is set once the flow's sender showed that it
	// writes small IPv4 Identifications with DF (see identify); zeros
	// counts its packets with Identification 0 and DF since the last one
	// with a large Identification or without DF, others the packets in a
	// row since lowID was set that only a large Identification explains.
	lowID  bool
	zeros  uint8
	others uint8
}

// lowIDProof is how many packets with Identification 0 and DF, and none
// with a large Identification or without DF between them, show that a
// sender writes small Identifications: a sender that counts its
// Identifications up (rdma_rxe) passes 0 once in 65536 packets.
const lowIDProof = 4

// lowIDPatience is how many packets in a row that only a large
// Identification explains make a small-Identification flow an ordinary one
// again (its sender does vary the Identification after all).
const lowIDPatience = 8

// lowIDBits is how many of the ICRC's 32 bits check a packet of a flow held
// to small Identifications: the check accepts wire.GSOMaxSegments
// Identifications (log2 64 = 6 bits) with DF.
const lowIDBits = 32 - 6

// identify takes the Identification and DF that made a received packet's
// ICRC match. A receiver on a UDP socket cannot see them, so the ICRC check
// solves for them (wire.CheckICRCUnknownID), which leaves 15 of its 32 bits
// to catch corruption: one corrupted packet in 32768 would pass. Every
// socket sender of this project writes, with DF, Identification 0 for a
// datagram sent alone and k for segment k of a UDP GSO message (Linux's
// for an unconnected IP_PMTUDISC_DO socket), so k < wire.GSOMaxSegments. A
// flow that showed that (lowIDProof packets with Identification 0, and
// only small ones between them) is held to it: a packet that only a large
// Identification (or a clear DF) explains is taken for corrupted and
// dropped, unless lowIDPatience of them come in a row. That checks
// lowIDBits = 26 of the 32 bits: a corruption passes only by turning the
// ICRC into that of one of the 64 accepted Identifications (64 in 2^32).
// rdma_rxe counts its Identifications up, showing 0 once per wrap, so its
// flows keep the 15-bit check (the position in a GRO train, checkTrain,
// checks them on 32).
func (s *flowSlot) identify(id uint16, df bool) error {
	if df && id < wire.GSOMaxSegments {
		s.others = 0
		if id == 0 && s.zeros < lowIDProof {
			s.zeros++
			s.lowID = s.lowID || s.zeros == lowIDProof
		}
		return nil
	}
	s.zeros = 0
	if !s.lowID {
		return nil
	}
	if s.others++; s.others < lowIDPatience {
		return wire.ErrICRC
	}
	s.lowID, s.others = false, 0
	return nil
}

// rxTrain is the UDP GRO train being input: its flow, and the
// Identification and DF that its first packet's ICRC showed.
type rxTrain struct {
	slot  *flowSlot // nil: no train known
	addrs uint64    // the flow's, in case another flow took its slot
	port  uint16
	base  uint16
	df    bool
	mode  uint8  // trainUnknown until the second packet, then trainUp or trainFixed
	last  uint16 // the position of the train's last packet input
}

const (
	trainUnknown = iota
	trainUp      // Identifications base, base+1, base+2, ...
	trainFixed   // all base (DF only)
)

// of reports whether the train is known, of the flow s, and seg follows
// its last packet input (a packet missing from the train, such as a first
// one the packet path dropped, leaves the rest without one).
func (t *rxTrain) of(s *flowSlot, seg uint16) bool {
	return t.slot == s && t.addrs == s.addrs && t.port == s.port && seg == t.last+1
}

// check takes the ICRC difference d (wire.FlowICRC.Diff) of the train's
// packet seg (seg > 0) and the deltas of its length, and returns
// wire.ErrICRC unless d is that of what the kernel allows in one GRO train:
// DF as the first's, and the Identification the first's plus seg, or (with
// DF) equal to the first's; the second packet decides which, and the others
// are held to it. Neither needs solving for the Identification.
func (t *rxTrain) check(d uint32, deltas *wire.ICRCIDDeltas, seg uint16) error {
	t.last = seg
	up := t.mode != trainFixed && d == deltas.Of(t.base+seg, t.df)
	fixed := !up && t.mode != trainUp && t.df && d == deltas.Of(t.base, true)
	switch {
	case up:
		t.mode = trainUp
	case fixed:
		t.mode = trainFixed
	default:
		return wire.ErrICRC
	}
	return nil
}

const flowCacheSlots = 64

// get returns the prepared flow between the engine and peer whose source
// port is sport (from local:sport to peer:4791, or with rx from peer:sport to
// local:4791), or nil when it is not an IPv4 flow (the caller then uses the
// Flow methods, which handle IPv6 and report bad addresses).
func (fc *flowCache) get(peer netip.Addr, sport uint16) *flowSlot {
	// With no memo yet, last is nil for the zero peer and port: lookup's
	// answer too (not an IPv4 flow).
	if fc.lastPort == sport && fc.lastPeer == peer {
		return fc.last
	}
	return fc.getSlow(peer, sport)
}

// getSlow is get past its memo, out of line so that get inlines.
func (fc *flowCache) getSlow(peer netip.Addr, sport uint16) *flowSlot {
	src, dst := fc.local, peer
	if fc.rx {
		src, dst = peer, fc.local
	}
	s := fc.lookup(src, dst, sport)
	if s != nil {
		fc.last, fc.lastPeer, fc.lastPort = s, peer, sport
	}
	return s
}

// lookup is get without the memo of the last flow. Only getSlow calls it
// (see flowCache.last).
func (fc *flowCache) lookup(src, dst netip.Addr, sport uint16) *flowSlot {
	if !src.Is4() || !dst.Is4() {
		return nil
	}
	s4, d4 := src.As4(), dst.As4()
	addrs := uint64(s4[0])<<56 | uint64(s4[1])<<48 | uint64(s4[2])<<40 | uint64(s4[3])<<32 |
		uint64(d4[0])<<24 | uint64(d4[1])<<16 | uint64(d4[2])<<8 | uint64(d4[3])
	h := addrs ^ addrs>>29 ^ uint64(sport)*0x9E3779B1
	s := &fc.slots[(h^h>>17)%flowCacheSlots]
	if s.addrs == addrs && s.port == sport {
		return s
	}
	c, err := wire.NewFlowICRC(wire.Flow{Src: src, Dst: dst, SrcPort: sport})
	if err != nil {
		return nil
	}
	*s = flowSlot{addrs: addrs, port: sport, c: c}
	return s
}
