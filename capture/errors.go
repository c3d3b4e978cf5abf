package capture

import "errors"

var (
	// ErrFormat is returned by NewReader for a stream that is neither pcap
	// nor pcapng.
	ErrFormat = errors.New("capture: not a pcap or pcapng file")
	// ErrLinkType is returned by Dump for a pcap file whose link type Decoder
	// does not understand.
	ErrLinkType = errors.New("capture: unsupported link type")
	// ErrSnapped is a packet's error when the capture kept only its first
	// bytes (the snap length was shorter than the packet).
	ErrSnapped = errors.New("capture: packet cut short by the capture's snap length")
)
