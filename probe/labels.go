package probe

import (
	"math"
	"math/rand/v2"

	"github.com/goroce/goroce/wire"
)

// MaxLabels is the most flow labels with distinct UDP source ports there
// are: a label's source port has 14 bits of entropy (0xC000-0xFFFF).
const MaxLabels = 1 << 14

// maxLabelPaths bounds LabelCount's work (O(paths x labels)).
const maxLabelPaths = MaxLabels

// LabelCount returns how many distinct flow labels (source ports) to probe
// so that every one of paths equal-cost paths is taken at least once with
// probability prob, when a switch hashes each label to a path uniformly at
// random (the coupon collector): the smallest k with
//
//	sum_{i=1..N} (-1)^(i+1) C(N,i) (1 - i/N)^k <= 1 - P
//
// For 16 paths and 0.99 that is 115 (79 at 0.9); 8 paths need 51, 32 need
// 255. The alternating sum cancels badly in floating point, so it is
// computed instead as the distribution of the number of paths covered after
// each label, a sum of positive terms. paths <= 0 returns 0, paths == 1
// returns 1, paths is capped at MaxLabels; prob <= 0 returns paths and prob
// is capped at 1-1e-9.
func LabelCount(paths int, prob float64) int { return LabelCountAtMost(paths, prob, math.MaxInt) }

// LabelCountAtMost is LabelCount, but returns limit as soon as the count is
// known to exceed it, which bounds its work to O(paths x limit): with
// limit MaxLabels (labels with distinct source ports run out there anyway)
// 16,384 paths take a fraction of a second where LabelCount takes tens.
func LabelCountAtMost(paths int, prob float64, limit int) int {
	switch {
	case paths <= 0:
		return 0
	case paths == 1:
		return 1
	case prob <= 0:
		return paths
	}
	paths = min(paths, maxLabelPaths)
	prob = min(prob, 1-1e-9)
	n := float64(paths)
	// p[j]: probability that exactly j paths are covered after k labels.
	p := make([]float64, paths+1)
	p[0] = 1
	for k := 1; ; k++ {
		hi := min(k, paths)
		for j := hi; j >= 1; j-- {
			p[j] = p[j]*float64(j)/n + p[j-1]*float64(paths-j+1)/n
		}
		p[0] = 0
		if k >= paths && p[paths] >= prob {
			return k
		}
		if k >= limit {
			return limit
		}
	}
}

// SourcePort returns the RoCEv2 UDP source port a non-zero flow label maps
// to, as the kernel computes it (rdma_flow_label_to_udp_sport: the label's
// low 14 bits XOR its high 6, in 0xC000-0xFFFF). For label 0 the kernel
// derives a label from the QP numbers instead; SourcePort(0) returns 0.
func SourcePort(label uint32) uint16 {
	if label&0xFFFFF == 0 {
		return 0
	}
	return wire.SourcePort(label&0xFFFFF, 0, 0)
}

// FlowLabels returns n distinct non-zero 20-bit flow labels whose source
// ports (SourcePort) are distinct too, drawn from a generator seeded with
// seed: the same seed gives the same labels, so that agents agree. n is
// capped at MaxLabels; n <= 0 returns nil.
func FlowLabels(seed uint64, n int) []uint32 {
	if n <= 0 {
		return nil
	}
	n = min(n, MaxLabels)
	r := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	var used [MaxLabels / 64]uint64
	out := make([]uint32, 0, n)
	for len(out) < n {
		l := uint32(r.Uint64()) & 0xFFFFF
		if l == 0 {
			continue
		}
		sp := SourcePort(l) & 0x3FFF
		if used[sp/64]&(1<<(sp%64)) != 0 {
			continue
		}
		used[sp/64] |= 1 << (sp % 64)
		out = append(out, l)
	}
	return out
}
