// Package tee is a packetio.Conn decorator that shows every packet going
// through a Conn to a function, and can write them to a pcap file as the
// Ethernet frames they travel in.
package tee

import (
	"encoding/binary"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/wire"
)

// Dir is the direction of a packet.
type Dir uint8

// Directions.
const (
	In Dir = iota
	Out
)

// String returns "in" or "out".
func (d Dir) String() string {
	if d == In {
		return "in"
	}
	return "out"
}

// Func sees a packet: its direction, source and destination, and the
// transport packet (valid only during the call).
type Func func(t time.Time, d Dir, src, dst netip.Addr, srcPort uint16, pkt []byte)

// Conn is a Conn that calls a Func for every packet it receives and sends.
type Conn struct {
	packetio.Conn
	f Func
}

// New wraps c.
func New(c packetio.Conn, f Func) *Conn { return &Conn{Conn: c, f: f} }

// Receive receives from the wrapped Conn and shows what arrived.
func (c *Conn) Receive(deadline time.Time) ([]packetio.Packet, error) {
	pkts, err := c.Conn.Receive(deadline)
	if len(pkts) > 0 {
		now := time.Now()
		for i := range pkts {
			p := &pkts[i]
			local := p.Local
			if !local.IsValid() {
				local = c.LocalAddr()
			}
			c.f(now, In, p.Addr, local, p.Port, p.Buf)
		}
	}
	return pkts, err
}

// Transmit shows the packets, then sends them. A packet's source port is
// its Packet.Port, or 4791 when that is 0 (the wrapped Conn's own port,
// which tee does not know; the soft device's is 4791 unless configured
// otherwise).
func (c *Conn) Transmit(pkts []packetio.Packet) (int, error) {
	now := time.Now()
	for i := range pkts {
		sport := pkts[i].Port
		if sport == 0 {
			sport = wire.RoCEv2Port
		}
		c.f(now, Out, c.LocalAddr(), pkts[i].Addr, sport, pkts[i].Buf)
	}
	return c.Conn.Transmit(pkts)
}

// PerPacketSourcePort reports whether the wrapped Conn sends each packet
// from its Packet.Port (packetio.SourcePorts).
func (c *Conn) PerPacketSourcePort() bool { return packetio.PerPacketSourcePort(c.Conn) }

// PcapWriter writes packets as Ethernet frames with the IPv4 (or IPv6) and UDP headers
// Linux gives datagrams sent on an unconnected socket with IP_PMTUDISC_DO
// (DF set, Identification 0), so that their ICRCs check out. It is safe for
// concurrent use; use its Write method as a Func. By default it records
// outgoing packets only, so that two devices teed into one file show each
// packet once; with Incoming set it records what arrives too.
type PcapWriter struct {
	// Incoming makes Write record incoming packets as well (one device's
	// capture, as `goroce pingpong --pcap` writes it). A UDP socket hides
	// the sender's IPv4 Identification and DF flag, which the ICRC covers:
	// the writer recovers them from the ICRC (wire.CheckICRCUnknownID) and
	// writes them into the frame, so that the capture's ICRCs check out as
	// the sender computed them; a packet whose ICRC no Identification
	// explains (corrupted) is written with Identification 0, and fails.
	Incoming bool

	mu  sync.Mutex
	w   *pcapgo.Writer
	buf []byte
	err error
}

// ethLen is the length of the Ethernet header Write puts in front.
const ethLen = 14

// NewPcapWriter writes a pcap file header to w.
func NewPcapWriter(w io.Writer) (*PcapWriter, error) {
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return nil, err
	}
	return &PcapWriter{w: pw}, nil
}

// Write records an outgoing packet, and an incoming one when Incoming is
// set.
func (p *PcapWriter) Write(t time.Time, d Dir, src, dst netip.Addr, srcPort uint16, pkt []byte) {
	if d != Out && !p.Incoming {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fl := wire.Flow{Src: src, Dst: dst, SrcPort: srcPort}
	b := append(p.buf[:0], 2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00)
	if !src.Unmap().Is4() {
		b[12], b[13] = 0x86, 0xDD // IPv6
	}
	b, err := fl.PseudoHeader(b, len(pkt))
	if err != nil {
		p.err = err
		return
	}
	if d == In && src.Is4() {
		ip := wire.IPv4(b[ethLen:])
		if id, df, err := wire.CheckICRCUnknownID(b[ethLen:], pkt); err == nil {
			binary.BigEndian.PutUint16(ip[4:], id)
			flags := uint16(0)
			if df {
				flags = 0x4000
			}
			binary.BigEndian.PutUint16(ip[6:], flags)
			ip.SetChecksum()
		}
	}
	b = append(b, pkt...)
	p.buf = b
	if err := p.w.WritePacket(gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(b), Length: len(b)}, b); err != nil && p.err == nil {
		p.err = err
	}
}

// Err returns the first error met.
func (p *PcapWriter) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
