package wire

import "encoding/binary"

// FETHLen is the length of the FLUSH Extended Transport Header.
const FETHLen = 4

// Placement types of a FLUSH (the FETH's low four bits; IBA A19, Linux's
// enum ib_placement_type).
const (
	FlushGlobal     = 1 << 0 // global visibility
	FlushPersistent = 1 << 1 // persistence
)

// Selectivity levels of a FLUSH (the FETH's bits 5:4; enum
// ib_selectivity_level).
const (
	FlushRange = 0 // the RETH's range
	FlushMR    = 1 // the whole memory region the R_Key names
)

// FETH is a view of the FLUSH Extended Transport Header (IBA A19.3; rdma_rxe
// rxe_hdr.h): a 32-bit word holding the selectivity level in bits 5:4 and
// the placement type in bits 3:0, the rest reserved.
type FETH []byte

// PlacementType returns the placement type bits (FlushGlobal, FlushPersistent).
func (f FETH) PlacementType() uint8 { return uint8(binary.BigEndian.Uint32(f) & 0xF) }

// Selectivity returns the selectivity level (FlushRange, FlushMR).
func (f FETH) Selectivity() uint8 { return uint8(binary.BigEndian.Uint32(f) >> 4 & 3) }

// Set writes the placement type and selectivity level, reserved bits zero.
func (f FETH) Set(placement, selectivity uint8) {
	binary.BigEndian.PutUint32(f, uint32(selectivity&3)<<4|uint32(placement&0xF))
}
