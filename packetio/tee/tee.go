// Package tee is a packetio.Conn decorator that shows every packet going
// through a Conn to a function, and can write them to a pcap file as the
// Ethernet frames they travel in.
package tee

import (
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

// PcapWriter writes packets as Ethernet frames with the IPv4 and UDP headers
// Linux gives datagrams sent on an unconnected socket with IP_PMTUDISC_DO
// (DF set, Identification 0), so that their ICRCs check out. It is safe for
// concurrent use; use its Write method as a Func (outgoing packets only, so
// that two devices teed into one file show each packet once).
type PcapWriter struct {
	mu  sync.Mutex
	w   *pcapgo.Writer
	buf []byte
	err error
}

// NewPcapWriter writes a pcap file header to w.
func NewPcapWriter(w io.Writer) (*PcapWriter, error) {
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return nil, err
	}
	return &PcapWriter{w: pw}, nil
}

// Write records an outgoing packet; it ignores incoming ones.
func (p *PcapWriter) Write(t time.Time, d Dir, src, dst netip.Addr, srcPort uint16, pkt []byte) {
	if d != Out {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fl := wire.Flow{Src: src, Dst: dst, SrcPort: srcPort}
	b := append(p.buf[:0], 2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00)
	b, err := fl.PseudoHeader(b, len(pkt))
	if err != nil {
		p.err = err
		return
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
