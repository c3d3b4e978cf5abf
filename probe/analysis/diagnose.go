package analysis

import (
	"math"
	"slices"
	"sort"
	"strings"
)

// Further component kinds (KindLink, KindHost and KindGroup are Localize's
// too). A group is a ToR: every path with an end in it, inside the group
// and across. An uplink is a ToR's links to the spine: the paths that cross
// the group's boundary. The spine is every path between two groups.
const (
	KindUplink = "uplink"
	KindSpine  = "spine"
	// KindRail is one rail of a multi-rail host (its NIC and its link to
	// its ToR): the paths with an end at the rail's address, named
	// "<host>/<rail>" as the pinglist names it. The host's KindHost
	// suspect is then all its rails' paths together.
	KindRail = "rail"
)

// RailSep separates a host's name from its rail's (pinglist.RailSep).
const RailSep = "/"

// HostOf is the host of a path end: the part of name before RailSep, or
// name when it is not a rail.
func HostOf(name string) string {
	if i := strings.Index(name, RailSep); i >= 0 {
		return name[:i]
	}
	return name
}

// Directions of a host suspect: a host that only receives badly, only
// sends badly, or both.
const (
	DirBoth    = "both"
	DirSend    = "send"
	DirReceive = "receive"
)

// Symptoms a verdict is about.
const (
	SymptomLoss = "loss"
	SymptomRTT  = "rtt"
)

// Defaults of DiagnoseOptions.
const (
	DefaultConfidence  = 0.99
	DefaultMargin      = 3.0 // log-likelihood: a ratio of about 20
	DefaultMaxVerdicts = 32
	DefaultMaxSeparate = 8
	// SlowThreshold is the share of slow probes (RTT above MaxP99) above
	// which a component is judged slow: a p99 over the threshold.
	SlowThreshold = 0.01
)

// DiagnoseOptions configure Diagnose. Zero values take the defaults.
type DiagnoseOptions struct {
	// MaxLoss is the loss ratio above which a component is faulty (the
	// SLA; default DefaultMaxLoss, negative for 0).
	MaxLoss float64
	// Confidence is how sure the binomial test must be that a
	// component's loss ratio is above MaxLoss before it is named (default
	// 0.99).
	Confidence float64
	// Margin is the log-likelihood within which two overlapping
	// explanations are a tie: the verdict is then ambiguous between them
	// (default 3, a likelihood ratio of about 20).
	Margin float64
	// MaxVerdicts bounds the verdicts (default 32); MaxSeparate the
	// separating probes suggested per ambiguous verdict (default 8).
	MaxVerdicts int
	MaxSeparate int
}

func (o *DiagnoseOptions) defaults() {
	if o.MaxLoss == 0 {
		o.MaxLoss = DefaultMaxLoss
	} else if o.MaxLoss < 0 {
		o.MaxLoss = 0
	}
	if o.Confidence <= 0 || o.Confidence >= 1 {
		o.Confidence = DefaultConfidence
	}
	if o.Margin <= 0 {
		o.Margin = DefaultMargin
	}
	if o.MaxVerdicts <= 0 {
		o.MaxVerdicts = DefaultMaxVerdicts
	}
	if o.MaxSeparate <= 0 {
		o.MaxSeparate = DefaultMaxSeparate
	}
}

// Suspect is one component a verdict names, with what its paths saw.
type Suspect struct {
	Kind string `json:"kind"`
	// Name is "A->B" for a link one way, "A<->B" both ways, the host's or
	// the group's name, or "spine".
	Name string `json:"name"`
	// Direction is a host's: DirBoth, DirSend or DirReceive.
	Direction string `json:"direction,omitempty"`
	// Paths, Probes and Bad are the paths the component lies on (among
	// those not explained by an earlier verdict), their resolved probes,
	// and those lost (or slow, for SymptomRTT); Ratio is Bad/Probes.
	Paths  int     `json:"paths"`
	Probes uint64  `json:"probes"`
	Bad    uint64  `json:"bad"`
	Ratio  float64 `json:"ratio"`
	// Confidence is the binomial test's: how sure it is that the ratio
	// of the component's paths is above the threshold.
	Confidence float64 `json:"confidence"`
	// Score is the log-likelihood the component gains by explaining its
	// paths' loss (a tie within the margin is ambiguous).
	Score float64 `json:"score"`
}

// Label is "kind name", with a host's direction when it is one way.
func (s Suspect) Label() string {
	if s.Kind == KindSpine {
		return KindSpine
	}
	l := s.Kind + " " + s.Name
	if s.Direction == DirSend {
		l += " (sends)"
	} else if s.Direction == DirReceive {
		l += " (receives)"
	}
	return l
}

// Verdict is one fault: the suspect the probes point to, or several when
// they cannot tell which (Ambiguous).
type Verdict struct {
	Symptom string `json:"symptom"`
	// Suspects are the candidates, best first; more than one only when
	// Ambiguous.
	Suspects  []Suspect `json:"suspects"`
	Ambiguous bool      `json:"ambiguous"`
	// Confidence is the best suspect's.
	Confidence float64 `json:"confidence"`
	// Separate are host pairs ("A->B") not probed now whose probes would
	// tell the suspects apart; Note says why there are none when
	// Ambiguous (the topology cannot tell, or the probes are too few yet).
	Separate []string `json:"separate,omitempty"`
	Note     string   `json:"note,omitempty"`
}

// Key identifies a verdict across analyses: its symptom and suspects.
func (v Verdict) Key() string { return v.join(Suspect.Label) }

// join is the verdict's symptom and its suspects, each named by name,
// separated by "|".
func (v Verdict) join(name func(Suspect) string) string {
	var b strings.Builder
	b.WriteString(v.Symptom)
	for _, s := range v.Suspects {
		b.WriteString("|")
		b.WriteString(name(s))
	}
	return b.String()
}

// String is "symptom: label" or "symptom: ambiguous between A, B".
func (v Verdict) String() string {
	if len(v.Suspects) == 0 {
		return v.Symptom + ": nothing"
	}
	if !v.Ambiguous {
		return v.Symptom + ": " + v.Suspects[0].Label()
	}
	l := make([]string, len(v.Suspects))
	for i, s := range v.Suspects {
		l[i] = s.Label()
	}
	return v.Symptom + ": ambiguous between " + strings.Join(l, ", ")
}

// PairName is the name of the link component of both paths between a and
// b ("a<->b", the names in order): a packet lost from a to b is a probe of
// a->b or an answer to one of b->a.
func PairName(a, b string) string {
	if b < a {
		a, b = b, a
	}
	return a + "<->" + b
}

// suspect is a candidate component: what it is and which paths it lies on.
type suspect struct {
	kind, name, dir string
}

func (s suspect) covers(p *PathStat) bool {
	cross := p.SrcGroup != p.DstGroup
	switch s.kind {
	case KindLink:
		return s.name == LinkName(p.Src, p.Dst) || s.name == PairName(p.Src, p.Dst)
	case KindRail:
		switch s.dir {
		case DirSend:
			return p.Src == s.name
		case DirReceive:
			return p.Dst == s.name
		}
		return p.Src == s.name || p.Dst == s.name
	case KindHost:
		src, dst := HostOf(p.Src), HostOf(p.Dst)
		switch s.dir {
		case DirSend:
			return src == s.name
		case DirReceive:
			return dst == s.name
		}
		return src == s.name || dst == s.name
	case KindGroup:
		return p.SrcGroup == s.name || p.DstGroup == s.name
	case KindUplink:
		return cross && (p.SrcGroup == s.name || p.DstGroup == s.name)
	case KindSpine:
		return cross
	}
	return false
}

// suspectsOf lists the components path p lies on.
func suspectsOf(p *PathStat, out []suspect) []suspect {
	out = append(out[:0],
		suspect{KindLink, LinkName(p.Src, p.Dst), ""}, suspect{KindLink, PairName(p.Src, p.Dst), ""},
		suspect{KindHost, HostOf(p.Src), DirSend}, suspect{KindHost, HostOf(p.Src), DirBoth},
		suspect{KindHost, HostOf(p.Dst), DirReceive}, suspect{KindHost, HostOf(p.Dst), DirBoth},
		suspect{KindGroup, p.SrcGroup, ""})
	if HostOf(p.Src) != p.Src {
		out = append(out, suspect{KindRail, p.Src, DirSend}, suspect{KindRail, p.Src, DirBoth})
	}
	if HostOf(p.Dst) != p.Dst {
		out = append(out, suspect{KindRail, p.Dst, DirReceive}, suspect{KindRail, p.Dst, DirBoth})
	}
	if p.SrcGroup != p.DstGroup {
		out = append(out, suspect{KindGroup, p.DstGroup, ""},
			suspect{KindUplink, p.SrcGroup, ""}, suspect{KindUplink, p.DstGroup, ""},
			suspect{KindSpine, "spine", ""})
	}
	return out
}

// rank orders kinds on exact ties: coarser first (a tie is reported as
// ambiguous anyway; this only fixes the order).
func rank(k string) int {
	switch k {
	case KindSpine:
		return 0
	case KindUplink:
		return 1
	case KindGroup:
		return 2
	case KindHost:
		return 3
	case KindRail:
		return 4
	}
	return 5
}

// tally is a candidate's pooled counts over the unexplained paths.
type tally struct {
	paths  int
	n, bad uint64
	// conf is the binomial test's confidence that the ratio is over the
	// threshold (0 when it is not over it at all); pass: at least the
	// Confidence asked.
	conf float64
	pass bool
}

// Diagnose localises faults over the topology hosts (name -> group, every
// host of the fabric, probed or not) from the paths' probes, for loss and
// for RTT (probes slower than the SLA's p99 threshold, SlowThreshold of
// them allowed). It returns the verdicts, loss first.
//
// The candidates are, for every path, its link (that path, or both paths
// between its hosts), its ends as hosts (sending,
// receiving, or both), its groups (ToRs), and for a path between groups
// both groups' uplinks and the spine. A fault raises the loss ratio of the
// paths through its component and of no other, so the probes' likelihood
// is highest with the component whose paths are the lossy ones: a
// candidate's score is its paths' probes times the Kullback-Leibler
// divergence of their pooled loss ratio from the ratio of the healthy
// paths (the log-likelihood ratio of "this component loses" against "it
// does not"). Pooling is what makes gray loss name one component: each of
// a ToR's paths alone loses too little to judge, all of them together do.
//
// A candidate whose pooled ratio the binomial test puts above the
// threshold with Confidence is still not one when its paths lose no more
// than the rest of a component holding them that is not above it
// (specific): a ToR's loss about the SLA is not named as one of its hosts.
// Greedily, the best-scoring candidate is a verdict; its paths are
// then explained and the next is sought. Candidates whose score is within
// Margin of the best and whose lost probes are mostly the best's are as
// likely: the verdict is ambiguous between them, and names the host pairs
// not probed whose probes would tell them apart (none: the topology
// cannot).
func Diagnose(hosts map[string]string, paths []PathStat, o DiagnoseOptions) []Verdict {
	o.defaults()
	loss := func(p *PathStat) (uint64, uint64) { return p.Sent, p.Lost }
	slow := func(p *PathStat) (uint64, uint64) { return p.Completed, p.Slow }
	out := diagnose(hosts, paths, o, SymptomLoss, o.MaxLoss, loss)
	if len(out) < o.MaxVerdicts {
		o.MaxVerdicts -= len(out)
		out = append(out, diagnose(hosts, paths, o, SymptomRTT, SlowThreshold, slow)...)
	}
	return out
}

func diagnose(hosts map[string]string, paths []PathStat, o DiagnoseOptions, symptom string, thr float64,
	count func(*PathStat) (uint64, uint64)) []Verdict {
	explained := make([]bool, len(paths))
	var out []Verdict
	var buf []suspect
	for len(out) < o.MaxVerdicts {
		base := baseline(paths, explained, thr, count)
		tallies := map[suspect]*tally{}
		for i := range paths {
			p := &paths[i]
			n, bad := count(p)
			if explained[i] || n == 0 || p.Src == p.Dst {
				continue
			}
			buf = suspectsOf(p, buf)
			for _, s := range buf {
				t := tallies[s]
				if t == nil {
					t = &tally{}
					tallies[s] = t
				}
				t.paths++
				t.n += n
				t.bad += bad
			}
		}
		var cands []Suspect
		var keys []suspect
		for _, t := range tallies {
			if t.bad > 0 && float64(t.bad) > thr*float64(t.n) {
				t.conf = 1 - binomialTail(t.n, t.bad, thr)
				t.pass = t.conf >= o.Confidence
			}
		}
		for s, t := range tallies {
			if !t.pass || !specific(hosts, tallies, s, t, o.Confidence) {
				continue
			}
			ratio := float64(t.bad) / float64(t.n)
			cands = append(cands, Suspect{Kind: s.kind, Name: s.name, Direction: s.dir, Paths: t.paths, Probes: t.n, Bad: t.bad,
				Ratio: ratio, Confidence: t.conf, Score: float64(t.n) * kl(ratio, base)})
			keys = append(keys, s)
		}
		if len(cands) == 0 {
			break
		}
		best, ties := choose(paths, explained, cands, keys, base, o.Margin, count)
		v := Verdict{Symptom: symptom, Suspects: []Suspect{cands[best]}, Confidence: cands[best].Confidence}
		for _, i := range ties {
			v.Suspects = append(v.Suspects, cands[i])
		}
		tieKeys := make([]suspect, len(ties))
		for k, i := range ties {
			tieKeys[k] = keys[i]
		}
		var ties2 []suspect
		v.Suspects, ties2 = oneHost(v.Suspects, tieKeys)
		if len(v.Suspects) > 1 {
			v.Ambiguous = true
			sort.Slice(v.Suspects[1:], func(a, b int) bool { return better(v.Suspects[1+a], v.Suspects[1+b]) })
			v.Separate, v.Note = separate(hosts, paths, append([]suspect{keys[best]}, ties2...), o.MaxSeparate)
		}
		for i := range paths {
			if !explained[i] && keys[best].covers(&paths[i]) {
				explained[i] = true
			}
		}
		out = append(out, v)
	}
	return out
}

// specific reports whether candidate s's paths (t) lose more than the
// rest of every component holding them that is not over the threshold
// itself (over the unexplained paths): a host's receiving paths more than
// the rest of its group's, a link more than the rest of its hosts'.
// Otherwise their loss is the larger component's share, within the SLA:
// gray loss in a ToR, about the SLA, puts some of its hosts' and links'
// paths over it by chance (there are dozens of them) while the ToR's own
// pooled loss, rising as the fault enters the window or fading as it
// leaves, is not over it with confidence; that must not name one of its
// hosts. (A larger component over the threshold is a candidate too, and
// choose weighs the two.)
//
// The rest must be less lossy by a log-likelihood ratio (of the two
// ratios against their pooled one) above log(paths/(1-conf)), the larger
// component's paths: the test's confidence, corrected for there being as
// many parts of it to pick by chance.
func specific(hosts map[string]string, tallies map[suspect]*tally, s suspect, t *tally, conf float64) bool {
	var buf [12]suspect
	sups := supersets(hosts, s, buf[:0])
	if s.kind == KindSpine || s.kind == KindUplink {
		sups = twinGroups(hosts, tallies, s, sups)
	}
	for _, sup := range sups {
		u := tallies[sup]
		if u == nil || u.paths <= t.paths || u.n <= t.n || u.pass {
			continue
		}
		n2, k2 := u.n-t.n, u.bad-t.bad
		p1, p2 := float64(t.bad)/float64(t.n), float64(k2)/float64(n2)
		if p1 <= p2 {
			return false
		}
		p := float64(u.bad) / float64(u.n)
		llr := float64(t.n)*kl(p1, p) + float64(n2)*kl(p2, p)
		if llr <= math.Log(float64(u.paths)/(1-conf)) {
			return false
		}
	}
	return true
}

// supersets appends to out the components whose paths hold all of s's in
// any topology: a link's both ways, its ends' hosts and their groups (and
// the uplinks and the spine between groups); a host's or a rail's
// direction, the host or rail both ways (and a rail's host) and its group;
// an uplink, its group and the spine. A group and the spine are held by
// none.
func supersets(hosts map[string]string, s suspect, out []suspect) []suspect {
	group := func(n string) {
		if g, ok := hosts[n]; ok {
			out = append(out, suspect{KindGroup, g, ""})
		}
	}
	switch s.kind {
	case KindLink:
		a, b, pair := strings.Cut(s.name, "<->")
		if !pair {
			a, b, _ = strings.Cut(s.name, "->")
			out = append(out, suspect{KindLink, PairName(a, b), ""},
				suspect{KindHost, HostOf(a), DirSend}, suspect{KindHost, HostOf(b), DirReceive})
		}
		out = append(out, suspect{KindHost, HostOf(a), DirBoth}, suspect{KindHost, HostOf(b), DirBoth})
		group(a)
		group(b)
		if ga, gb := hosts[a], hosts[b]; ga != gb && ga != "" && gb != "" {
			out = append(out, suspect{KindUplink, ga, ""}, suspect{KindUplink, gb, ""}, suspect{KindSpine, "spine", ""})
		}
	case KindHost, KindRail:
		if s.dir != DirBoth {
			out = append(out, suspect{s.kind, s.name, DirBoth})
		}
		if s.kind == KindRail {
			out = append(out, suspect{KindHost, HostOf(s.name), s.dir})
			if s.dir != DirBoth {
				out = append(out, suspect{KindHost, HostOf(s.name), DirBoth})
			}
		}
		group(s.name)
	case KindUplink:
		out = append(out, suspect{KindGroup, s.name, ""}, suspect{KindSpine, "spine", ""})
	}
	return out
}

// twinGroups appends to out, for the spine or an uplink whose paths are
// all the spine's, the groups whose uplinks hold all the spine's paths
// too: they are the same component (with two groups, every path between
// groups crosses both uplinks), so each of those groups holds it.
func twinGroups(hosts map[string]string, tallies map[suspect]*tally, s suspect, out []suspect) []suspect {
	sp := tallies[suspect{KindSpine, "spine", ""}]
	if sp == nil || (s.kind == KindUplink && tallies[s].paths != sp.paths) {
		return out
	}
	seen := map[string]bool{}
	for _, g := range hosts {
		if seen[g] {
			continue
		}
		seen[g] = true
		if u := tallies[suspect{KindUplink, g, ""}]; u != nil && u.paths == sp.paths {
			out = append(out, suspect{KindGroup, g, ""})
		}
	}
	return out
}

// maxRivals bounds the candidates compared with the best one.
const maxRivals = 16

// choose picks the verdict among the candidates: the best-scoring one,
// unless a rival explains the same loss as well or better, and the rivals
// it cannot be told from (ties). Rivals are the candidates scoring at
// least half the best and sharing most of their lost probes with it (at
// most maxRivals). A rival nested in the best, or holding it, is judged by
// the paths one has and the other not: lossy like the smaller one's paths
// (a log-likelihood ratio above margin against the healthy ratio), the
// larger wins; healthy (below -margin), the smaller; in between, they are
// a tie. Other rivals tie when they score within margin of the best.
func choose(paths []PathStat, explained []bool, cands []Suspect, keys []suspect, base, margin float64,
	count func(*PathStat) (uint64, uint64)) (int, []int) {
	best := 0
	for i := range cands {
		if better(cands[i], cands[best]) {
			best = i
		}
	}
	var rivals []int
	for i, c := range cands {
		if i != best && c.Score >= cands[best].Score/2 && shared(paths, explained, keys[best], keys[i], count) > c.Bad/2 {
			rivals = append(rivals, i)
		}
	}
	sort.Slice(rivals, func(a, b int) bool { return better(cands[rivals[a]], cands[rivals[b]]) })
	rivals = rivals[:min(len(rivals), maxRivals)]
	cmp := func(a, b int) int {
		n, rate, ok := nested(paths, explained, cands, keys, a, b, base, count)
		if !ok {
			if cands[a].Score-cands[b].Score > margin {
				return -1
			}
			if cands[b].Score-cands[a].Score > margin {
				return 1
			}
			return 0
		}
		switch {
		case rate > margin:
			return n // the larger
		case rate < -margin:
			return -n // the smaller
		}
		return 0
	}
	first := best
	for _, i := range rivals {
		if cmp(best, i) > 0 {
			best = i
		}
	}
	var ties []int
	for _, i := range append(rivals, first) {
		if i != best && !slices.Contains(ties, i) && cmp(best, i) == 0 {
			ties = append(ties, i)
		}
	}
	return best, ties
}

// nested reports whether candidates a and b lie on nested path sets (over
// the unexplained paths), which one is the larger (n: -1 a, 1 b), and the
// log-likelihood ratio of the paths only the larger lies on, lossy at the
// smaller's ratio against healthy at base.
func nested(paths []PathStat, explained []bool, cands []Suspect, keys []suspect, a, b int, base float64,
	count func(*PathStat) (uint64, uint64)) (n int, llr float64, ok bool) {
	var onlyA, onlyB int
	var nA, kA, nB, kB uint64
	for i := range paths {
		p := &paths[i]
		if explained[i] {
			continue
		}
		inA, inB := keys[a].covers(p), keys[b].covers(p)
		if inA == inB {
			continue
		}
		pn, pk := count(p)
		if inA {
			onlyA++
			nA, kA = nA+pn, kA+pk
		} else {
			onlyB++
			nB, kB = nB+pn, kB+pk
		}
	}
	if onlyA > 0 && onlyB > 0 {
		return 0, 0, false
	}
	rate := func(s Suspect) float64 { return min(max(s.Ratio, base), 1-1e-9) }
	ll := func(nn, k uint64, p float64) float64 {
		return float64(k)*math.Log(p/base) + float64(nn-k)*math.Log((1-p)/(1-base))
	}
	if onlyA > 0 {
		return -1, ll(nA, kA, rate(cands[b])), true
	}
	return 1, ll(nB, kB, rate(cands[a])), true
}

// oneHost folds the directions of one host that tie (its sends unseen, as
// when its agent is down) into the host as a whole, keeping the best's
// place.
func oneHost(sus []Suspect, ties []suspect) ([]Suspect, []suspect) {
	if len(sus) < 2 {
		return sus, ties
	}
	for i := 1; i < len(sus); i++ {
		if (sus[0].Kind == KindHost || sus[0].Kind == KindRail) && sus[i].Kind == sus[0].Kind && sus[i].Name == sus[0].Name {
			if sus[i].Direction == DirBoth {
				sus[0].Direction = DirBoth
			}
			sus = append(sus[:i], sus[i+1:]...)
			ties = append(ties[:i-1], ties[i:]...)
			i--
		}
	}
	return sus, ties
}

// better orders candidates: higher score, then coarser kind, then name.
func better(a, b Suspect) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	if rank(a.Kind) != rank(b.Kind) {
		return rank(a.Kind) < rank(b.Kind)
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.Direction < b.Direction
}

// baseline is the pooled ratio of the unexplained paths at or under the
// threshold: what a healthy path loses. It is at least 1e-6 (a log of it
// is taken).
func baseline(paths []PathStat, explained []bool, thr float64, count func(*PathStat) (uint64, uint64)) float64 {
	var n, bad uint64
	for i := range paths {
		pn, pb := count(&paths[i])
		if explained[i] || pn == 0 || float64(pb) > thr*float64(pn) {
			continue
		}
		n += pn
		bad += pb
	}
	if n == 0 {
		return 1e-6
	}
	return max(float64(bad)/float64(n), 1e-6)
}

// shared counts the bad probes of the unexplained paths both a and b lie on.
func shared(paths []PathStat, explained []bool, a, b suspect, count func(*PathStat) (uint64, uint64)) uint64 {
	var s uint64
	for i := range paths {
		p := &paths[i]
		if !explained[i] && a.covers(p) && b.covers(p) {
			_, bad := count(p)
			s += bad
		}
	}
	return s
}

// kl is the Kullback-Leibler divergence of Bernoulli(p) from Bernoulli(q).
func kl(p, q float64) float64 {
	d := 0.0
	if p > 0 {
		d += p * math.Log(p/q)
	}
	if p < 1 {
		d += (1 - p) * math.Log((1-p)/(1-q))
	}
	return max(d, 0)
}

// binomialTail is P(X >= k) for X ~ Binomial(n, p), summed in log space
// from k up until the terms no longer count (or, below the mean, as one
// minus the sum from k-1 down).
func binomialTail(n, k uint64, p float64) float64 {
	if k == 0 {
		return 1
	}
	if k > n {
		return 0
	}
	if p <= 0 {
		return 0
	}
	if p >= 1 {
		return 1
	}
	lp, lq := math.Log(p), math.Log1p(-p)
	nf := float64(n)
	lgn, _ := math.Lgamma(nf + 1)
	term := func(i uint64) float64 {
		x := float64(i)
		a, _ := math.Lgamma(x + 1)
		b, _ := math.Lgamma(nf - x + 1)
		return math.Exp(lgn - a - b + x*lp + (nf-x)*lq)
	}
	sum := 0.0
	if float64(k) >= nf*p {
		for i := k; i <= n; i++ {
			t := term(i)
			sum += t
			if t < sum*1e-12 {
				break
			}
		}
		return min(sum, 1)
	}
	for i := k - 1; ; i-- {
		t := term(i)
		sum += t
		if t < sum*1e-12 || i == 0 {
			break
		}
	}
	return max(1-sum, 0)
}

// separate returns up to max host pairs of the topology, not among the
// paths probed, that some of the suspects lie on and others do not: probes
// there would tell them apart. With none, note says why.
func separate(hosts map[string]string, paths []PathStat, sus []suspect, max int) (pairs []string, note string) {
	probed := make(map[[2]string]bool, len(paths))
	for i := range paths {
		probed[[2]string{paths[i].Src, paths[i].Dst}] = true
	}
	names := make([]string, 0, len(hosts))
	for h := range hosts {
		names = append(names, h)
	}
	sort.Strings(names)
	telling := 0
	for _, s := range names {
		for _, d := range names {
			if s == d {
				continue
			}
			p := PathStat{Src: s, Dst: d, SrcGroup: hosts[s], DstGroup: hosts[d]}
			on := 0
			for _, x := range sus {
				if x.covers(&p) {
					on++
				}
			}
			if on == 0 || on == len(sus) {
				continue
			}
			telling++
			if !probed[[2]string{s, d}] {
				pairs = append(pairs, LinkName(s, d))
				if len(pairs) >= max {
					return pairs, ""
				}
			}
		}
	}
	switch {
	case len(pairs) > 0:
		return pairs, ""
	case telling == 0:
		return nil, "no probe can tell them apart: every path of the topology through one goes through all"
	}
	return nil, "the probes on the paths that would tell them apart are too few yet"
}
