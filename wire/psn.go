package wire

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24 and
// comparisons treat the space as a circle: p is before q when q lies less than
// 2^23 steps ahead of p (IBA 9.7.1).
type PSN uint32

// PSNMask is the mask of the 24 significant bits of a PSN.
const PSNMask = 1<<24 - 1

// Add returns p advanced by n, modulo 2^24.
func (p PSN) Add(n uint32) PSN { return (p + PSN(n)) & PSNMask }

// Sub returns p moved back by n, modulo 2^24.
func (p PSN) Sub(n uint32) PSN { return (p - PSN(n)) & PSNMask }

// Diff returns the signed distance p - q in the circular 24-bit space, in the
// range [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 {
	return int32(uint32(p-q)<<8) >> 8
}

// Distance returns how many steps forward it takes to go from p to q.
func (p PSN) Distance(q PSN) uint32 { return uint32(q-p) & PSNMask }

// Before reports whether p comes strictly before q.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p comes strictly after q.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p <= PSNMask }

// QPN is a 24-bit queue pair number.
type QPN uint32

// QPNMask is the mask of the 24 significant bits of a QPN.
const QPNMask = 1<<24 - 1

// Valid reports whether q fits in 24 bits.
func (q QPN) Valid() bool { return q <= QPNMask }
