package rdmacm

import (
	"fmt"
	"net/netip"
	"syscall"
)

// PathError is why a dial's REQ cannot reach the peer, as the kernel told
// it: a send refused at once (no route: ENETUNREACH, EHOSTUNREACH) or an
// ICMP error that came back (port unreachable, ECONNREFUSED: nothing
// listens on the peer's UDP port 4791, so it has no RoCE device; host or
// network unreachable). It matches ErrUnreachable, and its Err (a
// syscall.Errno) matches with errors.Is too.
type PathError struct {
	Peer netip.Addr
	// ICMP tells that an ICMP message said it, with its type and code,
	// from From (the peer itself, or a router on the way).
	ICMP               bool
	ICMPType, ICMPCode uint8
	From               netip.Addr
	Err                error
}

func (e *PathError) Error() string {
	why := "cannot send to it"
	if !e.ICMP && e.Err == syscall.ECONNREFUSED {
		why = "ICMP port unreachable (told on a later send): no RoCE device there (nothing on UDP port 4791)"
	}
	if e.ICMP {
		why = fmt.Sprintf("ICMP type %d code %d from %v", e.ICMPType, e.ICMPCode, e.From)
		if e.ICMPType == 3 && e.ICMPCode == 3 {
			why = fmt.Sprintf("ICMP port unreachable from %v: no RoCE device there (nothing on UDP port 4791)", e.From)
		}
	}
	return fmt.Sprintf("rdmacm: %v unreachable: %s: %v", e.Peer, why, e.Err)
}

// Unwrap gives the errno.
func (e *PathError) Unwrap() error { return e.Err }

// Is makes a PathError match ErrUnreachable.
func (e *PathError) Is(target error) bool { return target == ErrUnreachable }

// immediate reports whether the error came from the send itself (the
// local routing table, or a local firewall: EPERM, EACCES), not from the
// network.
func (e *PathError) immediate() bool {
	return !e.ICMP && (e.Err == syscall.ENETUNREACH || e.Err == syscall.EHOSTUNREACH || e.Err == syscall.EACCES ||
		e.Err == syscall.EPERM || e.Err == syscall.EADDRNOTAVAIL)
}

// filtered reports whether a local firewall (netfilter) refused the send:
// EPERM or EACCES. A rule that drops some packets (a random drop, a rate
// limit) refuses some sends and passes others.
func (e *PathError) filtered() bool {
	return !e.ICMP && (e.Err == syscall.EPERM || e.Err == syscall.EACCES)
}
