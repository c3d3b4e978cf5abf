// Package metrics exposes the prober's results to Prometheus, in the
// ecosystem's conventions (base units in seconds, _total on counters,
// bounded label sets):
//
//	goroce_probe_network_rtt_seconds       histogram  (T5-T2)-(T4-T3) of completed probes
//	goroce_probe_prober_delay_seconds      histogram  (T6-T1)-(T5-T2)
//	goroce_probe_responder_delay_seconds   histogram  T4-T3
//	goroce_probe_sent_total                counter    probes resolved (completed or lost)
//	goroce_probe_completed_total           counter
//	goroce_probe_lost_total                counter
//	goroce_probe_late_total                counter    answers after the probe was counted lost
//	goroce_probe_errors_total              counter    by reason
//	goroce_probe_pairs                     gauge      targets with series of their own
//	goroce_probe_pairs_capped              gauge      1 when the max_pairs cap bites
//	goroce_probe_capped_results_total      counter    results counted under target="other"
//	goroce_probe_path_loss_ratio           gauge      per path, over the analysis window
//	goroce_probe_path_rtt_p99_seconds      gauge
//	goroce_probe_path_degraded             gauge      1 degraded, 0 healthy, absent if not judged
//	goroce_probe_paths_left_out            gauge      paths beyond the cap
//	goroce_probe_faulty_component          gauge      1 per component named faulty {kind, name}
//	goroce_probe_source_info               gauge      1 {source, source_group}: the prober itself
//	goroce_build_info                      gauge      1 {version, goversion}
//
// The per-result series carry {target, target_group, class, timestamps}
// (timestamps is "software" or "hardware": every figure says which clock it
// came from); the path gauges {source, source_group, target, target_group}.
// An agent's series grow with its targets, and a fleet's with their square:
// Options.MaxPairs caps the targets one agent keeps series for, and results
// for further targets aggregate into target="other", target_group="other".
//
// The histograms have classic buckets (1 µs doubling to 8 s) and native
// histograms alongside (bucket factor 1.1, at most 160 buckets), for
// Prometheus servers that scrape them.
//
// sent_total is counted when the outcome is known, with completed_total or
// lost_total, so loss over a range is increase(lost)/increase(sent) with no
// skew from probes in flight; divide by (rate(sent) > 0), not clamp_min, so
// that a pair probed rarely does not show false loss.
package metrics
