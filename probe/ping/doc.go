// Package ping is `goroce probe once` as a library: it finds each host's
// responder (over HTTP, or at a QPN given), sends a number of probes to each
// through a probe.Prober, rotating over the flow labels and the responder's
// QPs, prints a ping-like line per outcome, and summarises each host (loss,
// and the minimum, median, 99th percentile and maximum of the network RTT
// and of both hosts' delays). Labels picks the flow labels for a number of
// labels or of equal-cost paths, ResolveAll finds every host's responder,
// and Main runs the whole.
package ping
