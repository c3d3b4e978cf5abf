// Package agent is goroce's long-running prober: on one node of a fleet it
// runs a responder (so that peers can probe it), a prober that probes every
// target the pinglist gives the node, and an HTTP server for Prometheus, for
// peers and for people.
//
// # What it does
//
// New loads the pinglist (package pinglist), finds the node whose address
// is Options.Self, computes its targets (List.Targets: the same function on
// every node, so no controller is needed) and starts a probe.Responder and a
// probe.Prober on the device. Run then:
//
//   - discovers each target's responder by fetching
//     http://target:http_port/probe/v1/self (probe.FetchSelf), at most
//     Options.DiscoveryWorkers at a time. A target not reachable yet is
//     retried with exponential backoff (1 s doubling to 30 s, jittered),
//     counted in goroce_probe_agent_discoveries_total{result="error"} and
//     goroce_probe_agent_targets_unresolved, and not probed until found; it
//     is never fatal. Known targets are fetched again every minute, and
//     after RediscoverAfter consecutive lost probes (a restarted responder
//     has new QPNs) unless the target is already failing: a dead peer is
//     fetched at its backoff's pace;
//   - probes each target at its class's rate, from one scheduling goroutine
//     over a heap of targets ordered by their next probe time (no goroutine
//     and no timer per target), cycling through the flow labels
//     (probe.FlowLabels, as many as the pinglist's paths and probability
//     ask for) and the target's responder QPNs: probe n of a target takes
//     label n mod L and QPN (n div L) mod Q, each with its class's DSCP.
//     A probe more than an interval late (after a stall) is skipped and its
//     target keeps its phase, so the schedule stays spread;
//   - feeds every result (from the prober's OnResult, never blocking)
//     to the Prometheus metrics (package metrics), the sliding analysis
//     window (package analysis), a bounded RTT history per path, and, with
//     Options.JSONL, a JSON-lines log of every probe;
//   - every AnalysisInterval recomputes the window's path statistics and
//     the local fault analysis (analysis.Localize), for the metrics and
//     HTTP;
//   - reloads the pinglist when the file changes (polled every second: its
//     modification time and size, and its SHA-256 every ten seconds, which
//     catches every way of replacing a file, including a Kubernetes
//     ConfigMap's symlink swap that inotify on the file misses) and when
//     Reload is called (RunUntilSignal, as goroce probe agent runs, calls
//     it on SIGHUP). Targets
//     come and go without a restart, and those that stay keep their place
//     in the label cycle and what was discovered of them. A file that does
//     not parse is logged, counted in
//     goroce_probe_agent_reloads_total{result="error"}, and the old
//     pinglist stays. A node the pinglist does not name (at start or after
//     a reload) runs as a responder only, warns, gauges
//     goroce_probe_agent_listed 0, and joins when a reload names it. The
//     settings timeout, responder_qps, window, sla and max_pairs take
//     effect at the next start;
//   - every FleetInterval finds the fleet's exporter, the first node by
//     name whose agent answers; the exporter computes the fleet view and
//     exports its verdicts (goroce_probe_fleet_fault), the others none.
//
// Memory and goroutines are bounded whatever the pinglist's size: a
// scheduling, a discovery, an analysis and a watching goroutine, at most
// DiscoveryWorkers fetches and FleetWorkers fleet fetches at a time; per
// target one heap entry, one peer record and one history ring of
// HistoryLen points; per path the analysis window's fixed slices.
//
// # HTTP
//
//	/                    the live page (embedded; no external resources)
//	/metrics             Prometheus metrics (native histograms when the scraper asks for protobuf)
//	/probe/v1/self       this node's responder: GID, QPNs, Q_Key (probe.Self)
//	/probe/v1/paths      this agent's path statistics over the window (PathsDoc, an analysis.Report)
//	/probe/v1/history    ?dst=NAME: the RTT history of the path to NAME ([]Point)
//	/probe/v1/fleet      every node's paths merged, and the faulty components (FleetDoc)
//	/probe/v1/fleet/history  ?src=NAME&dst=NAME: a path's history, fetched from src's agent
//
// The fleet view fetches /probe/v1/paths of every node of the pinglist (at
// most FleetWorkers at a time), merges them (analysis.Merge), runs
// analysis.Diagnose over the pinglist's topology, records the verdicts in
// a history (start, end), and reuses the result for FleetTTL, so a page
// left open on many screens costs one round of fetches per FleetTTL.
//
// The page shows the group × group and host × host matrices of loss and
// p99 network RTT coloured against the pinglist's SLA (green healthy,
// yellow some loss or p99 above half the threshold, red degraded, grey too
// few probes), the worst paths, the faulty components, and a path's RTT
// history (p50 and maximum per slot, lost probes as red bars) when its cell
// or row is clicked. A fleet of more than 48 nodes shows the host matrix of
// one group pair at a time (the worst, or the group cell clicked). It refreshes every 2 s. Each matrix cell carries its
// position in a data-rect attribute, for tests that check screenshots.
//
// With Options.WebConfig the server takes a Prometheus exporter toolkit
// web configuration (TLS, basic authentication); PeerTLS, PeerUser and
// PeerPassword make the agent's own fetches from peers match.
//
// # The probe log
//
// With Options.JSONL every result is written as one line: time (T1 as RFC
// 3339), src, dst, dst_addr, group, dst_group, class, seq, label (the AH
// flow label), sport (the UDP source port it maps to), qpn (the responder
// QP), outcome (ok, lost, late, error), reason (for errors), t1..t6 (ns;
// t1, t2, t5, t6 on this host's clock, t3, t4 on the responder's), rtt_ns,
// prober_delay_ns, responder_delay_ns and timestamps (software or
// hardware). The writer is fed through a queue; when it falls behind,
// results are left out of the file and counted in
// goroce_probe_agent_jsonl_dropped_total, and probing never waits.
package agent
