// Package analysis turns probe results into judgements: per path (prober to
// target), a sliding window of what the probes saw, whether the path is
// degraded, and which components of the fabric explain the degraded paths.
//
// A [Window] takes the results of one prober ([probe.Result], via Add) and
// keeps, per path, the window (30 s by default) in slices (10 by default,
// so it slides by 3 s): counts of resolved, completed, lost and late probes
// and of errors, and a histogram of network RTTs with fixed log-scale
// buckets (8 per doubling, 1 µs to 16 s), from which p50 and p99 are read
// to within about 9 %. Per flow label it keeps resolved and lost counts over
// two half windows, so that a lossy ECMP member shows as loss on some labels
// only (LossyLabels) while a dead host loses on all. Memory is bounded:
// about 4 KiB per path plus 70 bytes per label (12 KiB for a path probed
// with 115 labels, TestWindowMemory), for at most MaxPaths paths and
// MaxLabels labels per path.
//
// A path is judged once it has MinProbes resolved probes in the window; it
// is then degraded when its loss ratio is above MaxLoss or its RTT p99 above
// MaxP99.
//
// [Diagnose] is the fleet's localisation: over the topology (every host
// and its group), candidates (links one way or both, hosts sending,
// receiving or both, groups, uplinks, the spine) scored by the
// log-likelihood their paths' pooled loss gains, named when a binomial
// test puts them over the SLA with 99 % confidence and their paths lose
// more than the rest of any component holding them that is not (a host is
// not named for its ToR's loss), several at once, and reported as
// ambiguous when the probes cannot tell candidates apart (with the probes
// that would). [Confirmer] holds a verdict back until a second analysis
// names its components; [VerdictHistory] keeps the verdicts with their
// start and end.
//
// [Localize], one agent's view of its own paths, names the faulty components: a smallest set of links (ordered
// host pairs "A->B"), hosts and groups (ToRs) that lies on every degraded
// path and on no healthy one (R-Pingmesh's localisation), found greedily.
// A host is named when none of its paths, from or to it, is healthy and its
// degraded paths reach at least two other hosts; a group when no path
// crossing its boundary is healthy and its degraded crossing paths involve
// two of its hosts and two outside; otherwise each degraded path names its
// link. Agents exchange their paths as a JSON [Report] and [Merge] them, so
// any agent can localise over the whole fleet.
package analysis
