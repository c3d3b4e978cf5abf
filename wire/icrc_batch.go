package wire

// Four packets at once. clmulRegister's cost on a short packet (a 64-byte
// WRITE ONLY) is mostly fixed: the call, the tables' sixteen lookups for the
// last block. With VPCLMULQDQ on 512-bit registers one instruction folds a
// block of four packets, and the last blocks of all four are reduced
// together by carry-less multiplications (barrett4) instead of the tables:
// go test ./wire -bench ICRCBatch measured 22 ns for sealing four 64-byte
// WRITE ONLY packets (92 bytes hashed each) against 51 ns one by one (the
// pass itself, 11 ns against 46). Alone, the reduction's four dependent
// multiplications are slower than the tables (see icrc_fold.go); shared by
// four packets they are not. Only packets of equal length share a pass (each
// lane takes the same fold constants), which a burst of equal-sized
// messages, or of full-MTU segments, gives. Where VPCLMULQDQ comes with
// AVX2 but not AVX-512 (AMD Zen 3), the pass runs on two 256-bit registers,
// two packets in each, their folds independent (icrc4y): 34 against 85 ns
// for the four WRITEs on such a processor.

// barrett4 holds, repeated in the four lanes, the constants of
// icrc4's reduction, in the reflected order of foldK: [x^95 mod P,
// x^63 mod P] (the folds to 96 and 64 bits), [mu, P] (mu = floor(x^64 /
// P)), and the masks [high 32 bits, 0] and [0, low 32 bits].
var barrett4 = func() (t [4][8]uint64) {
	for j := range 4 {
		t[0][2*j], t[0][2*j+1] = reflect64(xPowMod(95)), reflect64(xPowMod(63))
		t[1][2*j], t[1][2*j+1] = reflect64(barrettMu()), reflect64(1<<32|0x04C11DB7)
		t[2][2*j] = 0xFFFFFFFF00000000
		t[3][2*j+1] = 0xFFFFFFFF
	}
	return t
}()

// barrettMu returns floor(x^64 / P) in the normal bit order (bit i is the
// coefficient of x^i), by long division.
func barrettMu() uint64 {
	const poly = 1<<32 | 0x04C11DB7
	hi, lo := uint64(1), uint64(0) // x^64: hi is its bit 64
	var q uint64
	for d := 64; d >= 32; d-- {
		bit := lo >> d & 1
		if d == 64 {
			bit = hi
		}
		if bit == 0 {
			continue
		}
		q |= 1 << (d - 32)
		if d == 64 {
			hi, lo = 0, lo^uint64(poly&0xFFFFFFFF)<<32
		} else {
			lo ^= uint64(poly) << (d - 32)
		}
	}
	return q
}

// FourLaneICRC reports whether the processor runs the four-packet pass
// (Set4, Diff4, SetBatch's runs): VPCLMULQDQ, with AVX-512 or AVX2. Without it they
// fall back to one packet at a time, and a caller gains nothing by grouping
// packets for them.
func FourLaneICRC() bool { return haveCLMUL4 }

// Lengths the four-lane pass takes: whole transport packets, BTH to ICRC.
const (
	// Lane4MinLen is the shortest packet the pass takes (an ACK, 20 bytes,
	// is shorter: the tables take it faster alone).
	Lane4MinLen = 16 + 1 + ICRCLen
	// Lane4MaxLen is the longest.
	Lane4MaxLen = foldMax + ICRCLen
)

// pass4 returns the length of the four packets' bytes the four-lane pass
// hashes, or 0 when it does not take them: not IPv4, no VPCLMULQDQ, lengths
// unequal or outside [Lane4MinLen, Lane4MaxLen].
func (c *FlowICRC) pass4(pkts *[4][]byte) int {
	n := len(pkts[0]) - ICRCLen
	if !c.v4 || !haveCLMUL4 || n <= 16 || n > foldMax || len(pkts[1]) != n+ICRCLen || len(pkts[2]) != n+ICRCLen || len(pkts[3]) != n+ICRCLen {
		return 0
	}
	return n
}

// Set4 writes the ICRC of each of four transport packets of the flow, all of
// one length, into its last four bytes in one pass, as Set does for each,
// and reports true; it reports false and writes nothing when the pass does
// not take them (see FourLaneICRC, Lane4MinLen, Lane4MaxLen, unequal
// lengths): the caller then seals them one by one.
func (c *FlowICRC) Set4(pkts *[4][]byte) bool {
	n := c.pass4(pkts)
	if n == 0 {
		return false
	}
	icrc4(uint64(c.headers(pkts[0])), pkts, n, nil)
	return true
}

// Diff4 computes Diff for four transport packets received on the flow, all
// of one length, in one pass: d[j] is pkts[j]'s. It reports false and sets
// nothing when the pass does not take them (as Set4); the caller then
// checks them one by one.
func (c *FlowICRC) Diff4(pkts *[4][]byte, d *[4]uint32) bool {
	n := c.pass4(pkts)
	if n == 0 {
		return false
	}
	icrc4(uint64(c.headers(pkts[0])), pkts, n, d)
	return true
}

// SetBatch writes the ICRC of each of pkts, transport packets of the flow,
// into its last four bytes, as Set does for each; runs of four packets of
// equal length are sealed together, two to four times faster where the
// processor allows (VPCLMULQDQ). It returns the first error
// Set would have, the packets before it sealed.
func (c *FlowICRC) SetBatch(pkts [][]byte) error {
	for len(pkts) > 0 {
		if len(pkts) >= 4 && c.Set4((*[4][]byte)(pkts)) {
			pkts = pkts[4:]
			continue
		}
		if err := c.Set(pkts[0]); err != nil {
			return err
		}
		pkts = pkts[1:]
	}
	return nil
}
