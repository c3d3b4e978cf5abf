package analysis

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Component kinds.
const (
	KindLink  = "link"
	KindHost  = "host"
	KindGroup = "group"
)

// Component is a part of the fabric Localize names as faulty.
type Component struct {
	// Kind is KindLink, KindHost or KindGroup.
	Kind string `json:"kind"`
	// Name is "A->B" for a link (the path from host A to host B), the
	// host's name, or the group's name.
	Name string `json:"name"`
	// Paths is the number of degraded paths the component explains.
	Paths int `json:"paths"`
}

// String returns "kind name".
func (c Component) String() string { return c.Kind + " " + c.Name }

// LinkName is the name of the link component of the path src -> dst.
func LinkName(src, dst string) string { return src + "->" + dst }

type candidate struct {
	c     Component
	rank  int // 0 group, 1 host, 2 link: coarser first on ties
	paths []int
}

// Localize returns the faulty components that explain the degraded paths:
// a smallest set of components that lies on every degraded path and on no
// healthy one. Paths not judged (Insufficient) are ignored. The
// components, and the paths each lies on, are:
//
//   - a link "A->B": the path from A to B alone (so any degraded path can
//     always be explained by its link);
//   - a host: every path from or to it. It is a candidate when none of
//     them is healthy and its degraded paths involve at least two distinct
//     other hosts (one bad path names its link, not its ends);
//   - a group (a ToR and its uplinks): every path with an end in the group.
//     It is a candidate when no path crossing the group's boundary (one end
//     in, one out) is healthy, its degraded crossing paths involve at least
//     two hosts of the group and two outside it. Healthy paths inside the
//     group do not rule it out: a ToR that black-holes its uplinks still
//     switches between its own ports.
//
// The set is found greedily (set cover): repeatedly take the candidate
// that explains the most degraded paths not yet explained, coarser kinds
// first on ties (group, host, link), then by name; then drop any chosen
// component whose paths the others already explain. With no degraded path
// it returns nil. The result is sorted by kind (group, host, link) and name.
func Localize(paths []PathStat) []Component {
	var degraded []int
	for i, p := range paths {
		if p.Degraded {
			degraded = append(degraded, i)
		}
	}
	if len(degraded) == 0 {
		return nil
	}
	cands := linkCandidates(paths, degraded)
	cands = append(cands, hostCandidates(paths)...)
	cands = append(cands, groupCandidates(paths)...)
	sort.Slice(cands, func(a, b int) bool {
		if cands[a].rank != cands[b].rank {
			return cands[a].rank < cands[b].rank
		}
		return cands[a].c.Name < cands[b].c.Name
	})
	chosen := dropRedundant(greedyCover(cands, len(degraded)))
	out := make([]Component, 0, len(chosen))
	for _, c := range chosen {
		c.c.Paths = len(c.paths)
		out = append(out, c.c)
	}
	sort.Slice(out, func(a, b int) bool {
		ra, rb := kindRank(out[a].Kind), kindRank(out[b].Kind)
		if ra != rb {
			return ra < rb
		}
		return out[a].Name < out[b].Name
	})
	return out
}

// linkCandidates returns the link candidate of every degraded path
// (degraded holds their indices into paths). A link explains its own path
// alone, so that every degraded path can be explained.
func linkCandidates(paths []PathStat, degraded []int) []candidate {
	var cands []candidate
	for _, i := range degraded {
		p := paths[i]
		cands = append(cands, candidate{c: Component{Kind: KindLink, Name: LinkName(p.Src, p.Dst)}, rank: 2, paths: []int{i}})
	}
	return cands
}

// hostCandidates returns the hosts that are candidates: those with no
// healthy path from or to them whose degraded paths involve at least two
// other hosts. Each explains all of its degraded paths. The order is that
// of a map's iteration; Localize sorts the candidates.
func hostCandidates(paths []PathStat) []candidate {
	type hostInfo struct {
		healthy bool
		peers   map[string]bool
		paths   []int
	}
	hosts := map[string]*hostInfo{}
	hostOf := func(n string) *hostInfo {
		h := hosts[n]
		if h == nil {
			h = &hostInfo{peers: map[string]bool{}}
			hosts[n] = h
		}
		return h
	}
	for i, p := range paths {
		if p.Insufficient || p.Src == p.Dst {
			continue
		}
		for _, e := range [2][2]string{{p.Src, p.Dst}, {p.Dst, p.Src}} {
			h := hostOf(e[0])
			if p.Degraded {
				h.paths = append(h.paths, i)
				h.peers[e[1]] = true
			} else {
				h.healthy = true
			}
		}
	}
	var cands []candidate
	for name, h := range hosts {
		if !h.healthy && len(h.peers) >= 2 {
			cands = append(cands, candidate{c: Component{Kind: KindHost, Name: name}, rank: 1, paths: h.paths})
		}
	}
	return cands
}

// groupCandidates returns the groups that are candidates: those with no
// healthy path crossing their boundary whose degraded crossing paths
// involve at least two hosts inside and two outside. Each explains all of
// its degraded paths, the ones inside it included. The order is that of a
// map's iteration; Localize sorts the candidates.
func groupCandidates(paths []PathStat) []candidate {
	type groupInfo struct {
		healthy       bool
		inner, outer  map[string]bool
		paths         []int
		crossDegraded int
	}
	groups := map[string]*groupInfo{}
	groupFor := func(n string) *groupInfo {
		g := groups[n]
		if g == nil {
			g = &groupInfo{inner: map[string]bool{}, outer: map[string]bool{}}
			groups[n] = g
		}
		return g
	}
	for i, p := range paths {
		if p.Insufficient {
			continue
		}
		if p.SrcGroup == p.DstGroup {
			if p.Degraded {
				g := groupFor(p.SrcGroup)
				g.paths = append(g.paths, i)
			}
			continue
		}
		for _, e := range [2][3]string{{p.SrcGroup, p.Src, p.Dst}, {p.DstGroup, p.Dst, p.Src}} {
			g := groupFor(e[0])
			if p.Degraded {
				g.paths = append(g.paths, i)
				g.inner[e[1]] = true
				g.outer[e[2]] = true
				g.crossDegraded++
			} else {
				g.healthy = true
			}
		}
	}
	var cands []candidate
	for name, g := range groups {
		if !g.healthy && g.crossDegraded > 0 && len(g.inner) >= 2 && len(g.outer) >= 2 {
			cands = append(cands, candidate{c: Component{Kind: KindGroup, Name: name}, rank: 0, paths: g.paths})
		}
	}
	return cands
}

// greedyCover chooses among the sorted candidates until the degraded
// paths (ndegraded of them) are all explained: each time the candidate
// that explains the most paths not yet explained, the first in cands on
// ties.
func greedyCover(cands []candidate, ndegraded int) []candidate {
	explained := map[int]bool{}
	var chosen []candidate
	for len(explained) < ndegraded {
		best, bestN := -1, 0
		for k, c := range cands {
			n := 0
			for _, i := range c.paths {
				if !explained[i] {
					n++
				}
			}
			if n > bestN {
				best, bestN = k, n
			}
		}
		if best < 0 {
			break // cannot happen: every degraded path has its link
		}
		chosen = append(chosen, cands[best])
		for _, i := range cands[best].paths {
			explained[i] = true
		}
	}
	return chosen
}

// dropRedundant removes from chosen every candidate whose paths the
// others explain, the last chosen (the finest) first, and returns what
// remains.
func dropRedundant(chosen []candidate) []candidate {
	for k := len(chosen) - 1; k >= 0; k-- {
		count := map[int]int{}
		for j, c := range chosen {
			if j == k {
				continue
			}
			for _, i := range c.paths {
				count[i]++
			}
		}
		redundant := true
		for _, i := range chosen[k].paths {
			if count[i] == 0 {
				redundant = false
				break
			}
		}
		if redundant {
			chosen = append(chosen[:k], chosen[k+1:]...)
		}
	}
	return chosen
}

func kindRank(k string) int {
	switch k {
	case KindGroup:
		return 0
	case KindHost:
		return 1
	}
	return 2
}

// Merge merges the paths reported by several agents into one set: one
// PathStat per (Src, Dst), keeping the one with the most probes when two
// agents report the same path, sorted by Src then Dst.
func Merge(sets ...[]PathStat) []PathStat {
	type key struct{ src, dst string }
	m := map[key]PathStat{}
	for _, set := range sets {
		for _, p := range set {
			k := key{p.Src, p.Dst}
			if q, ok := m[k]; ok && q.Sent+q.Late+q.Errors >= p.Sent+p.Late+p.Errors {
				continue
			}
			m[k] = p
		}
	}
	out := make([]PathStat, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Src != out[b].Src {
			return out[a].Src < out[b].Src
		}
		return out[a].Dst < out[b].Dst
	})
	return out
}

// MaxReportPaths bounds the paths DecodeReport accepts.
const MaxReportPaths = 1 << 16

// Report is what an agent serves of its own paths, for its peers to merge.
type Report struct {
	Source string     `json:"source"`
	Group  string     `json:"group"`
	Paths  []PathStat `json:"paths"`
}

// DecodeReport parses a Report from JSON, rejecting one with more than
// MaxReportPaths paths or paths that are not the source's.
func DecodeReport(b []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("analysis: bad report: %w", err)
	}
	if len(r.Paths) > MaxReportPaths {
		return Report{}, fmt.Errorf("analysis: bad report: %d paths (max %d)", len(r.Paths), MaxReportPaths)
	}
	for _, p := range r.Paths {
		if p.Src != r.Source {
			return Report{}, fmt.Errorf("analysis: bad report from %q: a path from %q", r.Source, p.Src)
		}
		if p.Dst == "" {
			return Report{}, fmt.Errorf("analysis: bad report from %q: a path with no destination", r.Source)
		}
	}
	return r, nil
}
