// Package probe is a pingmesh-style RoCE fabric prober and responder over
// unreliable-datagram queue pairs, on any verbs provider.
package probe
