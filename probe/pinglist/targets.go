package pinglist

import (
	"sort"
)

// Targets returns the targets self probes, computed from the list alone so
// that every agent computes every other agent's targets the same way:
//
//   - tor_mesh: every other node of self's group, at the class rate;
//   - inter_tor: Sample nodes of other groups (see the package
//     documentation for how they are chosen), at the class rate;
//   - static: every static target, at its rate.
//
// A node that is the target of several classes is listed once, under the
// first of tor_mesh, inter_tor, static. When a class's rates add up to more
// than its MaxRate, each of its targets' rates is scaled down to fit. The
// result is sorted by class (tor_mesh, inter_tor, static), then by name.
// self is found in the list by its address; a node that is not in the list
// probes only the static targets.
func (l *List) Targets(self Node) []Target {
	var out []Target
	seen := make(map[netip4or6]bool)
	seen[key(self)] = true
	add := func(n Node, class string, rate float64) {
		k := key(n)
		if seen[k] {
			return
		}
		seen[k] = true
		out = append(out, Target{Node: n, Class: class, Rate: rate})
	}
	// A node of the list is taken as the list has it (its group), found by
	// its address.
	member := false
	var gi int32
	if i, ok := l.byAddr[self.Addr.Unmap()]; ok {
		self = l.Nodes[i]
		gi, member = l.groupIndex[self.Group]
	}
	if c := l.Classes[ClassToRMesh]; c.Enabled && member {
		start := len(out)
		for _, i := range l.groupNodes[gi] {
			if l.pairs(self, l.Nodes[i]) {
				add(l.Nodes[i], ClassToRMesh, c.Rate)
			}
		}
		sortByName(out[start:])
	}
	if c := l.Classes[ClassInterToR]; c.Enabled && member {
		start := len(out)
		for _, i := range l.interToR(self, gi, c) {
			add(l.Nodes[i], ClassInterToR, c.Rate)
		}
		sortByName(out[start:])
	}
	if c := l.Classes[ClassStatic]; c.Enabled {
		start := len(out)
		for _, s := range l.Static {
			add(s.Node, ClassStatic, s.Rate)
		}
		sortByName(out[start:])
	}
	capClasses(out, l.Classes)
	return out
}

// pairs reports whether self probes n at all: never a rail of its own
// host; with RailPairsSame, only the rails of n's host named as self's (a
// node of one address pairs with every rail).
func (l *List) pairs(self, n Node) bool {
	if n.HostName() == self.HostName() {
		return false
	}
	if l.Settings.RailPairs == RailPairsAll || self.Rail == "" || n.Rail == "" {
		return true
	}
	return self.Rail == n.Rail
}

type netip4or6 = [16]byte

func key(n Node) netip4or6 { return n.Addr.Unmap().As16() }

func sortByName(t []Target) {
	sort.Slice(t, func(a, b int) bool { return t[a].Node.Name < t[b].Node.Name })
}

// capClasses scales down the rates of every class whose total exceeds its
// MaxRate.
func capClasses(t []Target, classes map[string]Class) {
	sum := map[string]float64{}
	for _, x := range t {
		sum[x.Class] += x.Rate
	}
	for i := range t {
		c := classes[t[i].Class]
		if s := sum[t[i].Class]; s > c.MaxRate {
			t[i].Rate *= c.MaxRate / s
		}
	}
}

// interToR chooses self's inter_tor targets. The other groups are put in
// an order of their own for self's group (by hash of seed and the two group
// names); the members of self's group, in name order, take consecutive
// slots of that order, Sample slots each, wrapping around: so the groups
// are spread over the members, and every other group is probed from self's
// group as soon as members × Sample reaches the number of other groups.
// Within a group a slot takes the member ranked first by hash of seed, self
// and the member (the next one when self already holds a slot in that
// group).
func (l *List) interToR(self Node, gi int32, c Class) []int32 {
	ng := len(l.groupNames)
	if ng < 2 || c.Sample == 0 {
		return nil
	}
	// eligible[g]: the members of group g self pairs with (all of them
	// in a fleet without rails); groups with none are left out.
	eligible := make([][]int32, ng)
	others := make([]int32, 0, ng-1)
	for g := range l.groupNames {
		if int32(g) == gi {
			continue
		}
		for _, i := range l.groupNodes[g] {
			if l.pairs(self, l.Nodes[i]) {
				eligible[g] = append(eligible[g], i)
			}
		}
		if len(eligible[g]) > 0 {
			others = append(others, int32(g))
		}
	}
	if len(others) == 0 {
		return nil
	}
	own := l.groupNames[gi]
	gh := make([]uint64, ng)
	for _, g := range others {
		gh[g] = hash(c.Seed, own, l.groupNames[g])
	}
	sort.Slice(others, func(a, b int) bool {
		ha, hb := gh[others[a]], gh[others[b]]
		if ha != hb {
			return ha < hb
		}
		return others[a] < others[b]
	})
	// self's position among its group's members.
	pos := 0
	for k, i := range l.groupNodes[gi] {
		if l.Nodes[i].Name == self.Name {
			pos = k
			break
		}
	}
	total := 0
	for _, g := range others {
		total += len(eligible[g])
	}
	want := min(c.Sample, total)
	// taken[g]: how many members of group g self has already chosen.
	taken := make(map[int32]int)
	ranked := make(map[int32][]int32)
	var out []int32
	for slot := pos * c.Sample; len(out) < want; slot++ {
		g := others[slot%len(others)]
		members := eligible[g]
		if taken[g] >= len(members) {
			continue
		}
		r, ok := ranked[g]
		if !ok {
			r = append([]int32(nil), members...)
			h := make(map[int32]uint64, len(r))
			for _, i := range r {
				h[i] = hash(c.Seed, self.Name, l.Nodes[i].Name)
			}
			sort.Slice(r, func(a, b int) bool {
				if h[r[a]] != h[r[b]] {
					return h[r[a]] < h[r[b]]
				}
				return r[a] < r[b]
			})
			ranked[g] = r
		}
		out = append(out, r[taken[g]])
		taken[g]++
	}
	return out
}

// hash is FNV-1a over the seed and the two names (with a separator that
// cannot occur in UTF-8), finished with splitmix64's mixer. It is part of
// the pinglist's contract: agents of different versions must agree.
func hash(seed uint64, a, b string) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := 0; i < 8; i++ {
		h ^= uint64(byte(seed >> (8 * i)))
		h *= prime
	}
	for i := 0; i < len(a); i++ {
		h ^= uint64(a[i])
		h *= prime
	}
	h ^= 0xff
	h *= prime
	for i := 0; i < len(b); i++ {
		h ^= uint64(b[i])
		h *= prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// labelCount is the number of distinct flow labels that cover n
// equal-cost paths with probability p, hashing uniformly (coupon
// collector): the smallest k with
// sum_{i=1..n} (-1)^(i+1) C(n,i) (1-i/n)^k <= 1-p. n=16, p=0.99 gives 115.
// It is the same as probe.LabelCount. It computes the distribution of the
// number of distinct paths hit after k labels step by step (a Markov
// chain), which, unlike the alternating sum, stays exact for large n.
func labelCount(n int, p float64) int {
	if n <= 1 {
		return 1
	}
	dist := make([]float64, n+1) // dist[j]: probability that j paths are hit
	dist[0] = 1
	for k := 1; k < 1<<20; k++ {
		for j := n; j >= 1; j-- {
			dist[j] = dist[j]*float64(j)/float64(n) + dist[j-1]*float64(n-j+1)/float64(n)
		}
		dist[0] = 0
		if dist[n] >= p {
			return k
		}
	}
	return 1 << 20
}
