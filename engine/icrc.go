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
}

type flowSlot struct {
	addrs uint64 // source << 32 | destination IPv4 address; 0: empty
	port  uint16 // source UDP port
	c     wire.FlowICRC
	// Receive side: zeroID is set once the flow's sender showed that it
	// writes IPv4 Identification 0 with DF (every socket and AF_XDP sender
	// of this project, and Linux's for an unconnected IP_PMTUDISC_DO
	// socket); others counts the packets since then that only another
	// Identification explains. See identify.
	zeroID bool
	zeros  uint8 // packets in a row with Identification 0 and DF, up to zeroIDProof
	others uint8
}

// zeroIDProof is how many packets in a row with Identification 0 and DF
// show that a sender always writes them (a sender that varies it, as
// rdma_rxe does, meets 0 once in 65536 packets, not several times running).
const zeroIDProof = 4

// zeroIDPatience is how many packets in a row that only a non-zero
// Identification explains make a zero-Identification flow an ordinary one
// again (its sender does vary the Identification after all).
const zeroIDPatience = 8

// identify takes the Identification and DF that made a received packet's
// ICRC match (zeroIDProof packets in a row with 0 and DF make the flow a
// zero-Identification one). A receiver on a UDP socket cannot see them, so the ICRC check
// solves for them (wire.CheckICRCUnknownID), which leaves 15 of its 32 bits
// to catch corruption: one corrupted packet in 32768 would pass. A flow whose
// sender writes Identification 0 and DF is held to the full 32 bits: a packet
// that only another Identification explains is taken for corrupted and
// dropped, unless zeroIDPatience of them come in a row. rdma_rxe varies the
// Identification, so its flows keep the 15-bit check.
func (s *flowSlot) identify(id uint16, df bool) error {
	if id == 0 && df {
		if s.zeros < zeroIDProof {
			s.zeros++
		}
		s.zeroID, s.others = s.zeroID || s.zeros == zeroIDProof, 0
		return nil
	}
	s.zeros = 0
	if !s.zeroID {
		return nil
	}
	if s.others++; s.others < zeroIDPatience {
		return wire.ErrICRC
	}
	s.zeroID, s.others = false, 0
	return nil
}

const flowCacheSlots = 64

// get returns the prepared flow from src:sport to dst:4791, or nil when it is
// not an IPv4 flow (the caller then uses the Flow methods, which handle IPv6
// and report bad addresses).
func (fc *flowCache) get(src, dst netip.Addr, sport uint16) *flowSlot {
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
