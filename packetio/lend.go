package packetio

import "net/netip"

// Lend fills the first n of tx (n capped at len(tx)) with empty packets whose
// buffers are consecutive size-byte slices of mem, for a Conn's TxBatch, and
// returns them.
func Lend(tx []Packet, mem []byte, size, n int) []Packet {
	n = min(n, len(tx))
	for i := range n {
		tx[i] = Packet{Buf: mem[i*size : i*size : (i+1)*size]}
	}
	return tx[:n]
}

// TxLender keeps the transmit side's lending for a Conn implementation:
// the packets TxBatch lends (Lend, or Keep for buffers the Conn finds
// itself) and how many are lent, which Transmit checks and takes back
// (Take). It is used from the one goroutine that calls TxBatch and
// Transmit.
type TxLender struct {
	tx   []Packet
	mem  []byte
	size int
	lent int
}

// NewTxLender returns a TxLender that lends up to batch packets of size
// bytes each, from one allocation, its pages mapped at once (Prefault).
func NewTxLender(batch, size int) TxLender {
	mem := make([]byte, batch*size)
	Prefault(mem)
	return TxLender{tx: make([]Packet, batch), mem: mem, size: size}
}

// Lend is TxBatch for a Conn that lends buffers of its own memory: up to n
// packets, or none after Close (closed) or for n <= 0. The packets lent
// before and not transmitted are taken back.
func (l *TxLender) Lend(closed bool, n int) []Packet {
	if closed || n <= 0 {
		return l.Keep(nil)
	}
	return l.Keep(Lend(l.tx, l.mem, l.size, n))
}

// Keep records tx as the packets lent and returns it.
func (l *TxLender) Keep(tx []Packet) []Packet {
	l.lent = len(tx)
	return tx
}

// Take is the start of Transmit of n packets: ErrClosed after Close
// (closed), ErrNotLent when more packets are given than the last TxBatch
// lent; otherwise the lent packets are taken back and it returns nil.
func (l *TxLender) Take(closed bool, n int) error {
	if closed {
		return ErrClosed
	}
	if n > l.lent {
		return ErrNotLent
	}
	l.lent = 0
	return nil
}

// TxDest returns the destination of p, unmapped: ErrAddress when it is not
// an IPv4 or IPv6 address (unspecified, or with a zone), or not of the
// family of a Conn's own address (SameFamily: the Conn checks it),
// ErrNoGather when it has Packet.Ext set, ErrTooLarge when p is longer
// than maxPacket.
func TxDest(p *Packet, maxPacket int) (netip.Addr, error) { return txDest(p, maxPacket, false) }

// SameFamily reports whether a Conn on local can send to dst: both IPv4
// (IPv4-mapped counts as IPv4) or both IPv6.
func SameFamily(local, dst netip.Addr) bool { return local.Unmap().Is4() == dst.Unmap().Is4() }

// TxDestGather is TxDest for a Conn that sends Packet.Ext (Gatherer): it
// checks ExtAt (CheckExt) and bounds the datagram, Buf and Ext together, by
// maxPacket.
func TxDestGather(p *Packet, maxPacket int) (netip.Addr, error) { return txDest(p, maxPacket, true) }

func txDest(p *Packet, maxPacket int, gathers bool) (netip.Addr, error) {
	a := p.Addr.Unmap()
	if !a.IsValid() || a.IsUnspecified() || a.Zone() != "" {
		return a, ErrAddress
	}
	if p.Ext != nil && !gathers {
		return a, ErrNoGather
	}
	if err := CheckExt(p); err != nil {
		return a, err
	}
	if len(p.Buf)+len(p.Ext) > maxPacket {
		return a, ErrTooLarge
	}
	return a, nil
}

// CheckExt returns ErrExtAt when p has an Ext whose ExtAt is negative or
// leaves fewer than the ICRC's 4 bytes of Buf after it, else nil.
func CheckExt(p *Packet) error {
	if p.Ext != nil && (p.ExtAt < 0 || p.ExtAt > len(p.Buf)-4) {
		return ErrExtAt
	}
	return nil
}
