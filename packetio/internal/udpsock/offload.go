package udpsock

import (
	"strconv"

	"github.com/goroce/goroce/packetio"
)

// Offload says whether a Conn uses a kernel offload. Packages udp and
// uring export it (and its constants) as their own Offload, so that their
// Options.GSO and Options.GRO mean one thing.
type Offload int8

const (
	// OffloadAuto uses the offload when the kernel offers it (the default).
	OffloadAuto Offload = iota
	// OffloadOff never uses it.
	OffloadOff
	// OffloadRequire uses it, and Listen fails with an error matching
	// packetio.ErrNotSupported when the kernel does not offer it.
	OffloadRequire
)

// String returns auto, off or require.
func (o Offload) String() string {
	switch o {
	case OffloadAuto:
		return "auto"
	case OffloadOff:
		return "off"
	case OffloadRequire:
		return "require"
	}
	return "Offload(" + strconv.Itoa(int(o)) + ")"
}

// OffloadStatus says whether a Conn uses UDP segmentation offload (GSO) and
// UDP generic receive offload (GRO), and when not, why. Packages udp and
// uring export it as their own OffloadStatus.
type OffloadStatus struct {
	GSO       bool
	GSOReason string // why GSO is off: turned off, the kernel's answer to the probe, or the error that turned it off
	GRO       bool
	GROReason string // why GRO is off
}

// String says which offloads are on, and why the others are off.
func (s OffloadStatus) String() string {
	part := func(name string, on bool, why string) string {
		if on {
			return name + " on"
		}
		return name + " off: " + why
	}
	return part("GSO", s.GSO, s.GSOReason) + ", " + part("GRO", s.GRO, s.GROReason)
}

// SplitGRO turns a received train of n bytes, segments of seg bytes each
// (the last may be shorter), of which buf holds the first len(buf), into
// the packets rx[0:]: rx[0] already holds the train's address, ports and
// metadata and is copied into the others, each a slice of buf with, when
// ids (the kernel's GRO keeps Identifications in order), its position in
// the train as GROSeg. A segment longer than maxPacket, one that does not
// lie whole in buf (the kernel cut the train: MSG_TRUNC) and one beyond
// rx are dropped; nothing is returned in part. A single datagram is a
// train of one segment, a zero-length one included. It counts trains of
// several segments in ctr and returns how many packets it made and how
// many segments it dropped. It does not allocate.
func SplitGRO(rx []packetio.Packet, buf []byte, seg, n, maxPacket int, ids bool, ctr *packetio.Counters) (made int, drops uint64) {
	first := rx[0]
	segs := max((n+seg-1)/seg, 1)
	for j := range segs {
		off := j * seg
		end := min(off+seg, n)
		if end > len(buf) || end-off > maxPacket || made == len(rx) {
			drops++
			continue
		}
		p := &rx[made]
		*p = first
		p.Buf = buf[off:end:end]
		if ids {
			p.GROSeg = uint16(j)
		}
		made++
	}
	if segs > 1 {
		ctr.GROBuffers.Add(1)
		ctr.GROSegments.Add(uint64(segs))
	}
	return made, drops
}
