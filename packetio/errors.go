package packetio

import (
	"errors"
	"net/netip"
	"strconv"
)

var (
	// ErrClosed is returned by the methods of a closed Conn.
	ErrClosed = errors.New("packetio: closed")
	// ErrNotSupported is matched (with errors.Is) by errors caused by a
	// missing kernel feature or an unsupported address family.
	ErrNotSupported = errors.New("packetio: not supported")
	// ErrNotLent is returned by Transmit when given more packets than the last
	// TxBatch lent.
	ErrNotLent = errors.New("packetio: transmit of packets not lent by TxBatch")
	// ErrTooLarge is the cause of a packet not sent because it is longer than
	// the Conn's MaxPacket.
	ErrTooLarge = errors.New("packetio: packet larger than MaxPacket")
	// ErrAddress is the cause of a packet not sent because its destination
	// address is of a family the Conn cannot reach (or invalid).
	ErrAddress = errors.New("packetio: bad destination address")
	// ErrNoRoute is the cause of a packet not sent because no peer has its
	// destination address (in-memory paths).
	ErrNoRoute = errors.New("packetio: no route to destination")
	// ErrNoGather is the cause of a packet not sent because it has
	// Packet.Ext set and the Conn does not send it (see Gatherer).
	ErrNoGather = errors.New("packetio: Packet.Ext set, but this Conn does not send a packet in pieces (Gatherer)")
	// ErrExtAt is the cause of a packet not sent because its Packet.ExtAt
	// is negative or leaves less than the ICRC's 4 bytes of Buf after Ext.
	ErrExtAt = errors.New("packetio: Packet.ExtAt outside Buf, or fewer than 4 bytes (the ICRC) after it")
)

// TransmitError reports the packets of a Transmit that were not sent. The
// other packets of the batch were sent.
type TransmitError struct {
	Index  int        // index, in the slice given to Transmit, of the first packet not sent
	Addr   netip.Addr // its destination
	Failed int        // how many packets of the batch were not sent
	Err    error      // why the first was not sent: a syscall.Errno (EMSGSIZE, ...) or a sentinel of this package
}

// Error describes the first failed packet.
func (e *TransmitError) Error() string {
	s := "packetio: transmit: packet " + strconv.Itoa(e.Index) + " to " + e.Addr.String() + ": " + e.Err.Error()
	if e.Failed > 1 {
		s += " (" + strconv.Itoa(e.Failed) + " packets not sent)"
	}
	return s
}

// Unwrap returns the cause, so that errors.Is(err, syscall.EMSGSIZE) works.
func (e *TransmitError) Unwrap() error { return e.Err }

// TxFailures collects the packets of one Transmit that were not sent, for
// the *TransmitError an implementation returns. The zero value is empty.
type TxFailures struct {
	n, first int
	cause    error
}

// Add records that packet i of the batch was not sent, and why.
func (f *TxFailures) Add(i int, cause error) {
	if f.n == 0 || i < f.first {
		f.first, f.cause = i, cause
	}
	f.n++
}

// Len returns how many packets were not sent.
func (f *TxFailures) Len() int { return f.n }

// Err returns nil when every packet was sent, else the *TransmitError for
// the first one of pkts (the batch given to Transmit) that was not.
func (f *TxFailures) Err(pkts []Packet) error {
	if f.n == 0 {
		return nil
	}
	return &TransmitError{Index: f.first, Addr: pkts[f.first].Addr, Failed: f.n, Err: f.cause}
}
