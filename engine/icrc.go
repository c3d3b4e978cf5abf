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
}

const flowCacheSlots = 64

// get returns the prepared flow from src:sport to dst:4791, or nil when it is
// not an IPv4 flow (the caller then uses the Flow methods, which handle IPv6
// and report bad addresses).
func (fc *flowCache) get(src, dst netip.Addr, sport uint16) *wire.FlowICRC {
	if !src.Is4() || !dst.Is4() {
		return nil
	}
	s4, d4 := src.As4(), dst.As4()
	addrs := uint64(s4[0])<<56 | uint64(s4[1])<<48 | uint64(s4[2])<<40 | uint64(s4[3])<<32 |
		uint64(d4[0])<<24 | uint64(d4[1])<<16 | uint64(d4[2])<<8 | uint64(d4[3])
	h := addrs ^ addrs>>29 ^ uint64(sport)*0x9E3779B1
	s := &fc.slots[(h^h>>17)%flowCacheSlots]
	if s.addrs == addrs && s.port == sport {
		return &s.c
	}
	c, err := wire.NewFlowICRC(wire.Flow{Src: src, Dst: dst, SrcPort: sport})
	if err != nil {
		return nil
	}
	s.addrs, s.port, s.c = addrs, sport, c
	return &s.c
}
