package verbs

import "fmt"

// NeedsRKey reports whether the opcode reaches remote memory (RDMA WRITE,
// WRITE with immediate, READ, the atomics, ATOMIC_WRITE, FLUSH) and so
// needs a SendWR's RKey.
func (o WROpcode) NeedsRKey() bool {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm, WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRAtomicWrite, WRFlush:
		return true
	}
	return false
}

// CheckSendWRs returns the index of the first request in wrs that no
// provider should post, and why (an error matching ErrInvalidWR that names
// the field), or len(wrs) and nil. It refuses what would reach the peer
// only to kill the connection: a request for remote memory (see
// NeedsRKey) without an RKey. No registered region has key 0, so the zero
// SendWR, whose opcode 0 is RDMA WRITE, is refused, saying so. Providers
// call it in PostSend; it does not allocate unless it refuses.
func CheckSendWRs(wrs []SendWR) (int, error) {
	for i := range wrs {
		wr := &wrs[i]
		if wr.RKey != 0 || !wr.Opcode.NeedsRKey() {
			continue
		}
		if wr.Opcode == WRRDMAWrite && wr.RemoteAddr == 0 && len(wr.SGList) == 0 {
			return i, fmt.Errorf("verbs: SendWR %#x: the zero SendWR (Opcode 0 is RDMA_WRITE, to RemoteAddr 0 with RKey 0): set Opcode, and RKey and RemoteAddr for remote memory: %w", wr.WRID, ErrInvalidWR)
		}
		return i, fmt.Errorf("verbs: SendWR %#x: %v without an RKey (RKey 0 names no memory region: the peer would fail the QP): %w", wr.WRID, wr.Opcode, ErrInvalidWR)
	}
	return len(wrs), nil
}
