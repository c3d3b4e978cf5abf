package pinglist

import "testing"

func TestLabelCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		p    float64
		want int
	}{
		{1, 0.99, 1}, {8, 0.99, 51}, {16, 0.99, 115}, {16, 0.9, 79}, {32, 0.99, 255}, {256, 0.99, 2593},
	} {
		if got := labelCount(c.n, c.p); got != c.want {
			t.Errorf("labelCount(%d, %v) = %d, want %d", c.n, c.p, got, c.want)
		}
	}
}
