// Package ping is `goroce probe once` as a library: it finds each host's
// responder (over HTTP, or at a QPN given), sends a number of probes to each
// through a probe.Prober, rotating over the flow labels and the responder's
// QPs, prints a ping-like line per outcome, and summarises each host (loss,
// and the minimum, median, 99th percentile and maximum of the network RTT
// and of both hosts' delays).
package ping
