package udpsock

import "strconv"

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
