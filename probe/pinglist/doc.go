// Package pinglist reads the pinglist of a probing fleet: one YAML file that
// every agent reads, and from which each computes its own targets the same
// way, so that a fleet needs no controller (ship the file as a Kubernetes
// ConfigMap, or with any configuration tool).
//
// # The file
//
// A complete example, with every field at its default where it has one:
//
//	settings:
//	  timeout: 1s          # a probe with no answer after this is lost
//	  paths: 16            # ECMP paths N to cover between two hosts
//	  probability: 0.99    # chance P of covering all N
//	  labels: 0            # flow labels per target; 0: from paths and probability (N=16, P=0.99: 115)
//	  http_port: 9478      # the agent's /metrics, /probe/v1/self and pages
//	  window: 30s          # the analysis's sliding window
//	  responder_qps: 1     # UD QPs per responder (more for fabrics hashing on the destination QPN)
//	  max_pairs: 256       # per-target counter series per agent; beyond, target="other"
//	  pair_histograms: false # RTT and delay histograms per target (true) or per target group
//	  sla:
//	    max_loss: 0.01     # a path losing more than this ratio in the window is degraded
//	    max_p99_rtt: 5ms   # ... or whose network RTT p99 is above this
//	    min_probes: 20     # a path with fewer probes in the window is not judged
//	classes:
//	  tor_mesh:            # every other node of the same group
//	    enabled: true
//	    rate: 10           # probes/s to each target
//	    max_rate: 2000     # probes/s of the whole class on one agent
//	  inter_tor:           # a sample of the nodes of other groups
//	    rate: 10
//	    max_rate: 2000
//	    sample: 16         # targets per node
//	    seed: 0            # the sample's hash seed
//	  static:              # every static target, from every agent
//	    rate: 1            # for static targets without a rate of their own
//	    max_rate: 2000
//	nodes:
//	  - {name: host-a1, addr: 10.0.1.1, group: tor-a}
//	  - {name: host-a2, addr: 10.0.1.2, group: tor-a}
//	  - {name: host-b1, addr: 10.0.2.1, group: tor-b}
//	  - {name: host-b2, addr: 10.0.2.2, group: tor-b}
//	static:
//	  - {addr: 10.0.9.1, name: storage-1, group: storage, rate: 2}
//
// # Several rails
//
// A node with several addresses or RNICs (rails) lists them instead of
// addr:
//
//	settings:
//	  rail_pairs: same     # same (default): a rail probes the peers' rails of its name; all: every rail
//	nodes:
//	  - name: host-a1
//	    rails:
//	      - {addr: 10.0.1.1, group: tor-a-r0, device: mlx5_0, gid_index: 3}
//	      - {addr: 10.1.1.1, group: tor-a-r1, device: mlx5_1}
//
// Each rail is a [Node] of its own, named "<node>/<rail>" (rails are named
// rail0, rail1, ... unless they say name:), in its own group (its ToR;
// the node's group when it gives none), with the device and GID index its
// probes use. A rail never probes a rail of its own host; with rail_pairs
// same it probes only the rails of the same name (and nodes of one
// address), as a rail-optimised fabric routes. The agent of a multi-rail
// node runs a prober and responder on every rail.
//
// Durations take Go's syntax (1s, 500ms). Every field may be left out;
// unknown fields and classes are errors. A node's name and address must be
// unique over nodes and static targets; a node's group may be left out
// (nodes without a group form one group, named ""). Rates are probes per
// second and must be positive.
//
// Why these SLA defaults: at 10 probes/s a 30 s window holds 300 probes per
// path, so a loss threshold of 0.001 would call a path degraded on a single
// lost probe; 0.01 needs four, and still catches a lossy ECMP member (one
// of 16 paths dropping everything loses about 6 %). 5 ms of p99 leaves room
// for software timestamps taken by a soft provider on a busy host (they
// include scheduling); with hardware timestamps on RNICs, 100 µs or less is
// a sensible setting.
//
// # Targets
//
// [List.Targets] gives a node its targets, as R-Pingmesh's pinglists do:
//
//   - tor_mesh: every other node of its group, so that the fault of one
//     host (all its peers under the same ToR see it) is told apart from a
//     network fault;
//   - inter_tor: Sample nodes of other groups. The other groups are put in
//     an order of the node's group's own (by a hash of seed and the two
//     group names), and the members of the group, in name order, take
//     Sample consecutive slots of that order each, wrapping around. So the
//     groups are spread over the members, and every other group is probed
//     from each group as soon as members × sample reaches the number of
//     other groups. In a group, a slot takes the member ranked first by a
//     hash of (seed, prober, member), the next one when the prober already
//     holds one there. The hash is FNV-1a with splitmix64's finisher: a
//     pure function, so every agent computes every other's targets alike;
//   - static: every static target, at its own rate.
//
// When a class's rates add up to more than its max_rate, all its targets'
// rates are scaled down by the same factor. [Schedule] then spreads the
// probes of the targets evenly in time with a heap, for one goroutine: no
// goroutine and no timer per target.
//
// Memory: a 10,000-node list (250 groups of 40) takes about 1 MiB, and a
// node's 55 targets about 6 KiB, computed in well under a millisecond
// (TestLargeList and BenchmarkTargets10k measure both).
package pinglist
