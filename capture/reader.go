package capture

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// LinkType is a pcap link-layer header type (LINKTYPE_* of the tcpdump.org
// list).
type LinkType uint32

// The link types Decoder understands.
const (
	LinkEthernet LinkType = 1   // Ethernet II, with up to two 802.1Q/802.1ad tags
	LinkRawDLT12 LinkType = 12  // DLT_RAW as most BSDs number it: a bare IPv4 or IPv6 datagram
	LinkRawDLT14 LinkType = 14  // DLT_RAW as OpenBSD numbers it
	LinkRaw      LinkType = 101 // LINKTYPE_RAW: a bare IPv4 or IPv6 datagram
	LinkSLL      LinkType = 113 // Linux cooked capture v1 (16-byte header)
	LinkIPv4     LinkType = 228 // a bare IPv4 datagram
	LinkIPv6     LinkType = 229 // a bare IPv6 datagram
	LinkSLL2     LinkType = 276 // Linux cooked capture v2 (20-byte header)
)

// String returns the link type's name, e.g. "Ethernet" or "LINUX_SLL2".
func (l LinkType) String() string {
	switch l {
	case LinkEthernet:
		return "Ethernet"
	case LinkRawDLT12, LinkRawDLT14, LinkRaw:
		return "RAW"
	case LinkSLL:
		return "LINUX_SLL"
	case LinkIPv4:
		return "IPV4"
	case LinkIPv6:
		return "IPV6"
	case LinkSLL2:
		return "LINUX_SLL2"
	}
	return "LinkType(" + strconv.FormatUint(uint64(l), 10) + ")"
}

// Supported reports whether Decoder can decode packets of this link type.
func (l LinkType) Supported() bool {
	switch l {
	case LinkEthernet, LinkRawDLT12, LinkRawDLT14, LinkRaw, LinkSLL, LinkIPv4, LinkIPv6, LinkSLL2:
		return true
	}
	return false
}

// Format is the container format of a capture file.
type Format uint8

// Formats.
const (
	FormatPcap Format = iota + 1
	FormatPcapNG
)

// String returns "pcap" or "pcapng".
func (f Format) String() string {
	switch f {
	case FormatPcap:
		return "pcap"
	case FormatPcapNG:
		return "pcapng"
	}
	return "Format(" + strconv.Itoa(int(f)) + ")"
}

// Record is one packet record of a capture file.
type Record struct {
	// Index is the record's position in the file, from 1.
	Index int
	// Time is the capture timestamp, in UTC.
	Time time.Time
	// LinkType is the link-layer header type of Data.
	LinkType LinkType
	// Data is the captured bytes. It belongs to the Reader and is
	// overwritten by the next call to Next.
	Data []byte
	// Length is the packet's length on the wire; more than len(Data) when
	// the capture cut the packet short (snap length).
	Length int
}

// Truncated reports whether the capture kept fewer bytes than the packet had.
func (r *Record) Truncated() bool { return r.Length > len(r.Data) }

// Reader reads the packet records of a pcap or pcapng file (optionally gzip
// compressed). It tells the formats apart by their magic number.
type Reader struct {
	format Format
	pcap   *pcapgo.Reader
	ng     *pcapgo.NgReader
	link   LinkType // pcap: the file's link type
	n      int
}

// pcap and pcapng magic numbers, as the first four bytes of the file.
const (
	magicPcapMicroLE = 0xD4C3B2A1 // a1b2c3d4 written little-endian, read big-endian
	magicPcapMicroBE = 0xA1B2C3D4
	magicPcapNanoLE  = 0x4D3CB2A1
	magicPcapNanoBE  = 0xA1B23C4D
	magicPcapNG      = 0x0A0D0D0A // section header block type, palindromic
)

// NewReader reads the file header of a pcap or pcapng stream and returns a
// Reader for its records. Errors match ErrFormat when the stream is neither.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(4)
	if len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b {
		gz, gerr := gzip.NewReader(br)
		if gerr != nil {
			return nil, fmt.Errorf("capture: gzip: %w", gerr)
		}
		br = bufio.NewReader(gz)
		head, err = br.Peek(4)
	}
	if len(head) < 4 {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w (file shorter than a header)", ErrFormat)
		}
		return nil, fmt.Errorf("capture: reading file header: %w", err)
	}
	rd := &Reader{}
	switch binary.BigEndian.Uint32(head) {
	case magicPcapMicroLE, magicPcapMicroBE, magicPcapNanoLE, magicPcapNanoBE:
		p, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("capture: pcap header: %w", err)
		}
		rd.format, rd.pcap, rd.link = FormatPcap, p, LinkType(p.LinkType())
	case magicPcapNG:
		ng, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true, SkipUnknownVersion: true})
		if err != nil {
			return nil, fmt.Errorf("capture: pcapng section header: %w", err)
		}
		rd.format, rd.ng = FormatPcapNG, ng
	default:
		return nil, fmt.Errorf("%w (magic %02x%02x%02x%02x)", ErrFormat, head[0], head[1], head[2], head[3])
	}
	return rd, nil
}

// Format returns the container format.
func (r *Reader) Format() Format { return r.format }

// Next reads the next record into rec. It returns io.EOF after the last one;
// any other error means the file is damaged (wrapping io.ErrUnexpectedEOF
// when it ends inside a record). rec.Data is valid until the next call.
func (r *Reader) Next(rec *Record) error {
	var (
		data []byte
		ci   gopacket.CaptureInfo
		err  error
		link = r.link
	)
	if r.pcap != nil {
		data, ci, err = r.pcap.ZeroCopyReadPacketData()
	} else {
		data, ci, err = r.ng.ZeroCopyReadPacketData()
		if err == nil && len(ci.AncillaryData) > 0 {
			if lt, ok := ci.AncillaryData[0].(layers.LinkType); ok {
				link = LinkType(lt)
			}
		}
	}
	if err != nil {
		if err == io.EOF && ci.CaptureLength == 0 {
			return io.EOF
		}
		if err == io.EOF { // a record header without its data
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("capture: record %d: %w", r.n+1, err)
	}
	if ci.CaptureLength != len(data) {
		return fmt.Errorf("capture: record %d: %w", r.n+1, io.ErrUnexpectedEOF)
	}
	r.n++
	*rec = Record{Index: r.n, Time: ci.Timestamp.UTC(), LinkType: link, Data: data, Length: max(ci.Length, len(data))}
	return nil
}
