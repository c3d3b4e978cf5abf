// Package deploy holds what runs a fleet of goroce probe agents, and tests
// that keep it consistent with the code:
//
//	pinglist.yaml                   the example pinglist (every setting at its default)
//	kubernetes/namespace.yaml       the goroce namespace
//	kubernetes/configmap.yaml       the pinglist, as the ConfigMap every agent mounts
//	kubernetes/daemonset.yaml       one agent per node, host network; capabilities per packet path
//	kubernetes/podmonitor.yaml      scraping for the Prometheus operator
//	prometheus/prometheus.yml       scraping by kubernetes_sd (role pod)
//	prometheus/prometheus-static.yml  scraping agents listed by address
//	prometheus/rules.yml            recording rules (loss per pair and per group pair, RTT and delay
//	                                quantiles) and alerts (the fleet verdict's faults, a pair's loss
//	                                no verdict explains, RTT p99, an agent down, no exporter, reload,
//	                                discovery and probe errors, an unlisted node, the series cap)
//	prometheus/rules_test.yml       promtool unit tests of the rules
//	prometheus/alertmanager.yml     grouping and inhibition of those alerts
//	grafana/goroce-probe.json       the dashboard: group × group loss matrix, worst pairs, RTT heat
//	                                map, p50/p99, prober and responder delay, faulty components
//	Dockerfile                      the image the DaemonSet runs (the libibverbs build)
//
// Deploy with
//
//	kubectl apply -f deploy/kubernetes/namespace.yaml -f deploy/kubernetes/configmap.yaml \
//	    -f deploy/kubernetes/daemonset.yaml
//
// then point Prometheus at prometheus/prometheus.yml (or apply the
// PodMonitor) and import the dashboard into Grafana.
//
// The tests parse every file; run promtool check and test on the rules
// and configurations (skipping when promtool is missing); check that every
// metric a rule or a panel queries is one package probe/metrics exposes or
// a rule records; and run the Prometheus server with the rules, scraping
// probe/metrics over HTTP, to read back the loss of a lossy and a healthy
// pair, their groups' loss and the pending alert (skipping when prometheus
// is missing).
package deploy
