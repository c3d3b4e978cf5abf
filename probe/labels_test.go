package probe_test

import (
	"math"
	"testing"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/wire"
)

func TestLabelCount(t *testing.T) {
	for _, tc := range []struct {
		paths int
		prob  float64
		want  int
	}{
		{8, 0.99, 51},
		{16, 0.99, 115},
		{16, 0.9, 79},
		{32, 0.99, 255},
		{1, 0.99, 1},
		{0, 0.99, 0},
		{-3, 0.99, 0},
		{4, 0, 4},
	} {
		if got := probe.LabelCount(tc.paths, tc.prob); got != tc.want {
			t.Errorf("LabelCount(%d, %v) = %d, want %d", tc.paths, tc.prob, got, tc.want)
		}
	}
	// Against the inclusion-exclusion formula, where it is still exact
	// enough in float64 (few paths): k is the first count meeting P.
	for n := 2; n <= 12; n++ {
		for _, p := range []float64{0.5, 0.9, 0.99, 0.999} {
			k := probe.LabelCount(n, p)
			if miss(n, k) > 1-p+1e-12 || miss(n, k-1) <= 1-p-1e-12 {
				t.Errorf("LabelCount(%d, %v) = %d: miss(k) = %v, miss(k-1) = %v", n, p, k, miss(n, k), miss(n, k-1))
			}
		}
	}
	// More paths never need fewer labels; a higher probability neither.
	for n := 2; n < 64; n++ {
		if probe.LabelCount(n+1, 0.99) < probe.LabelCount(n, 0.99) || probe.LabelCount(n, 0.999) < probe.LabelCount(n, 0.99) {
			t.Errorf("not monotonic at %d paths", n)
		}
	}
	if k := probe.LabelCount(64, 1); k <= probe.LabelCount(64, 0.999) {
		t.Errorf("LabelCount(64, 1) = %d", k)
	}
}

// miss is the probability that k labels leave one of n paths untaken.
func miss(n, k int) float64 {
	s := 0.0
	for i := 1; i <= n; i++ {
		c := math.Exp(lgamma(n+1) - lgamma(i+1) - lgamma(n-i+1))
		term := c * math.Pow(1-float64(i)/float64(n), float64(k))
		if i%2 == 1 {
			s += term
		} else {
			s -= term
		}
	}
	return s
}

func lgamma(x int) float64 { v, _ := math.Lgamma(float64(x)); return v }

func TestFlowLabels(t *testing.T) {
	for _, n := range []int{0, 1, 115, 4096, probe.MaxLabels, probe.MaxLabels + 5} {
		ls := probe.FlowLabels(42, n)
		want := min(max(n, 0), probe.MaxLabels)
		if len(ls) != want {
			t.Fatalf("FlowLabels(42, %d): %d labels", n, len(ls))
		}
		ports := map[uint16]bool{}
		labels := map[uint32]bool{}
		for _, l := range ls {
			if l == 0 || l > 0xFFFFF {
				t.Fatalf("label %#x", l)
			}
			sp := probe.SourcePort(l)
			if sp != wire.SourcePort(l, 1, 2) || sp < 0xC000 {
				t.Fatalf("SourcePort(%#x) = %#x, wire says %#x", l, sp, wire.SourcePort(l, 1, 2))
			}
			if ports[sp] || labels[l] {
				t.Fatalf("label %#x or port %#x twice", l, sp)
			}
			ports[sp], labels[l] = true, true
		}
	}
	a, b, c := probe.FlowLabels(7, 64), probe.FlowLabels(7, 64), probe.FlowLabels(8, 64)
	same := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same seed, other labels")
		}
		if a[i] == c[i] {
			same++
		}
	}
	if same == len(a) {
		t.Fatal("another seed, the same labels")
	}
	if probe.SourcePort(0) != 0 {
		t.Fatal("SourcePort(0) != 0")
	}
}

// TestLabelCountAtMost: below its limit it is LabelCount; above, the limit,
// found without computing the whole count (16,384 paths at 0.999 need about
// 270,000 labels, which LabelCount takes tens of seconds to find).
func TestLabelCountAtMost(t *testing.T) {
	for _, paths := range []int{8, 16, 32, 100} {
		if got, want := probe.LabelCountAtMost(paths, 0.99, probe.MaxLabels), probe.LabelCount(paths, 0.99); got != want {
			t.Errorf("LabelCountAtMost(%d, 0.99, MaxLabels) = %d, LabelCount %d", paths, got, want)
		}
	}
	if got := probe.LabelCountAtMost(16, 0.99, 100); got != 100 {
		t.Errorf("LabelCountAtMost(16, 0.99, 100) = %d, want the limit 100 (LabelCount is 115)", got)
	}
	if got := probe.LabelCountAtMost(probe.MaxLabels, 0.999, probe.MaxLabels); got != probe.MaxLabels {
		t.Errorf("LabelCountAtMost(MaxLabels, 0.999, MaxLabels) = %d", got)
	}
}
