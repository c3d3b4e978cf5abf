package agent

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/pinglist"
)

// peer is what the agent knows of one target node's responder. The
// scheduler reads info atomically; the discovery goroutine writes it.
type peer struct {
	node pinglist.Node
	info atomic.Pointer[peerInfo]
	// lostRun counts consecutive lost probes (written by the result
	// callback), a hint that the responder restarted with other QPNs.
	lostRun atomic.Uint32

	// The discovery goroutine's own fields.
	failures int
	due      time.Time
	busy     bool
	gone     bool
}

// peerInfo is a discovered responder: one Peer per responder QPN.
type peerInfo struct {
	peers   []probe.Peer
	fetched time.Time
}

// discoveryResult is the outcome of one fetch of a peer's Self.
type discoveryResult struct {
	p    *peer
	self probe.Self
	err  error
}

// backoff is the wait before retry number failures (1 based) of an
// unreachable peer: doubling from RetryMin up to RetryMax, with ±25 %
// jitter so that a fleet does not retry in step.
func (o *Options) backoff(failures int) time.Duration {
	d := o.RetryMin
	for i := 1; i < failures && d < o.RetryMax; i++ {
		d *= 2
	}
	d = min(d, o.RetryMax)
	return d - d/4 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// discover runs the discovery loop until ctx ends: it fetches the Self of
// every peer that has none yet (at most Options.DiscoveryWorkers at once),
// retries failures with backoff, refreshes known peers every
// Options.Refresh, and at once when a peer's probes keep being lost.
func (a *Agent) discover(ctx context.Context) {
	peers := map[netip.Addr]*peer{}
	results := make(chan discoveryResult, a.opts.DiscoveryWorkers)
	inFlight := 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		var next time.Time
		inFlight, next = a.startFetches(ctx, peers, inFlight, results, now)
		timer.Reset(max(next.Sub(now), time.Millisecond))
		select {
		case <-ctx.Done():
			for ; inFlight > 0; inFlight-- {
				<-results
			}
			return
		case set := <-a.peerSet:
			reloadPeers(peers, set, now)
		case p := <-a.rediscover:
			// Lost probes hint that the responder restarted; a peer
			// already failing is in its backoff, which holds: a dead
			// peer is fetched at the backoff's pace, not at every run of
			// lost probes.
			if !p.gone && !p.busy && p.failures == 0 {
				p.due = now
			}
		case r := <-results:
			inFlight--
			r.p.busy = false
			if r.p.gone || !a.fetched(r, now) {
				continue // the unresolved peers are the same
			}
		case <-timer.C:
		}
		a.unresolved.Set(float64(countUnresolved(peers)))
	}
}

// startFetches starts a fetch of every peer that is due and not being
// fetched, as long as fewer than Options.DiscoveryWorkers fetches are in
// flight (inFlight of them before the call). It returns the fetches in
// flight after the call and when the loop should next wake: when the
// next peer falls due, or in an hour when every worker is busy (a
// result wakes the loop then).
func (a *Agent) startFetches(ctx context.Context, peers map[netip.Addr]*peer, inFlight int, results chan<- discoveryResult, now time.Time) (int, time.Time) {
	next := now.Add(time.Hour)
	for _, p := range peers {
		if p.busy {
			continue
		}
		if !p.due.After(now) && inFlight < a.opts.DiscoveryWorkers {
			p.busy = true
			inFlight++
			go a.fetchSelf(ctx, p, results)
			continue
		}
		if p.due.Before(next) {
			next = p.due
		}
	}
	if inFlight >= a.opts.DiscoveryWorkers {
		next = now.Add(time.Hour) // a result wakes the loop
	}
	return inFlight, next
}

// reloadPeers makes peers the reloaded set: it keeps the peers that stay
// (with what they know), marks the others gone and drops them, and adds
// the new ones, due now. A peer whose node changed (renamed, regrouped) is
// a new record.
func reloadPeers(peers, set map[netip.Addr]*peer, now time.Time) {
	for addr, p := range peers {
		if set[addr] != p {
			p.gone = true
			delete(peers, addr)
		}
	}
	for addr, p := range set {
		if _, ok := peers[addr]; !ok {
			p.due = now
			peers[addr] = p
		}
	}
}

// fetched takes the outcome of a fetch of a peer that is still wanted:
// the peer's responders on success, due again after Options.Refresh; a
// failure (unreachable, or a description that makes no peer) counted and
// logged, and the peer due again after its backoff. It reports whether
// the fetch succeeded, the only outcome that can change the count of
// unresolved peers.
func (a *Agent) fetched(r discoveryResult, now time.Time) bool {
	if r.err != nil {
		r.p.failures++
		r.p.due = now.Add(a.opts.backoff(r.p.failures))
		a.discoveryErrors.Inc()
		if r.p.failures == 1 || r.p.failures%10 == 0 {
			a.log.Info("responder not reachable yet", "target", r.p.node.Name, "addr", r.p.node.Addr, "failures", r.p.failures, "err", r.err)
		}
		return false
	}
	info, err := peerInfoOf(r.p.node, r.self, now)
	if err != nil {
		r.p.failures++
		r.p.due = now.Add(a.opts.backoff(r.p.failures))
		a.discoveryErrors.Inc()
		a.log.Warn("bad responder description", "target", r.p.node.Name, "err", err)
		return false
	}
	old := r.p.info.Load()
	if old == nil || !samePeers(old.peers, info.peers) {
		a.log.Info("responder found", "target", r.p.node.Name, "addr", r.p.node.Addr, "qpns", r.self.QPNs, "timestamps", r.self.Timestamps)
	}
	r.p.info.Store(info)
	r.p.lostRun.Store(0)
	r.p.failures = 0
	r.p.due = now.Add(a.opts.Refresh)
	a.discoveryOK.Inc()
	return true
}

func countUnresolved(peers map[netip.Addr]*peer) int {
	n := 0
	for _, p := range peers {
		if p.info.Load() == nil {
			n++
		}
	}
	return n
}

// fetchSelf fetches p's Self and sends the outcome to results.
func (a *Agent) fetchSelf(ctx context.Context, p *peer, results chan<- discoveryResult) {
	fctx, cancel := context.WithTimeout(ctx, a.opts.FetchTimeout)
	defer cancel()
	s, err := probe.FetchSelf(fctx, a.opts.HTTPClient, a.baseURL(p.node.Addr))
	results <- discoveryResult{p: p, self: s, err: err}
}

// baseURL is the HTTP base of the agent at addr, on the pinglist's port.
func (a *Agent) baseURL(addr netip.Addr) string {
	return a.opts.scheme() + "://" + netip.AddrPortFrom(addr, uint16(a.httpPort.Load())).String()
}

// peerInfoOf turns a fetched Self into one Peer per responder QPN, named
// and grouped as the pinglist says (the pinglist, not the peer, is the
// authority on names).
func peerInfoOf(n pinglist.Node, s probe.Self, now time.Time) (*peerInfo, error) {
	base, err := s.Peer()
	if err != nil {
		return nil, err
	}
	base.Name, base.Group, base.Addr = n.Name, n.Group, n.Addr
	info := &peerInfo{fetched: now}
	for _, q := range s.QPNs {
		p := base
		p.QPN = q & 0xFFFFFF
		info.peers = append(info.peers, p)
	}
	return info, nil
}

func samePeers(a, b []probe.Peer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
