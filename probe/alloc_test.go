package probe_test

import (
	"testing"

	"github.com/goroce/goroce/probe"
)

// TestAllocs: a probe's whole round trip (Probe, the responder's two ACKs,
// the prober's matching and its result) allocates nothing once warm, with
// probes kept in flight so that neither side goes to sleep. AllocsPerRun
// counts the allocations of every goroutine: the soft devices' included.
func TestAllocs(t *testing.T) {
	_, ca := softContext(t, addrA)
	_, cb := softContext(t, addrB)
	r, err := probe.NewResponder(cb, probe.ResponderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan probe.Outcome, 64)
	p, err := probe.NewProber(ca, probe.ProberOptions{OnResult: func(x probe.Result) { done <- x.Outcome }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	peer := peerOf(r, 0)
	const window = 16
	for i := 0; i < window; i++ {
		if err := p.Probe(peer, 5, ""); err != nil {
			t.Fatal(err)
		}
	}
	step := func() {
		if o := <-done; o != probe.OutcomeOK {
			t.Fatalf("outcome %v", o)
		}
		if err := p.Probe(peer, 5, ""); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2000; i++ {
		step()
	}
	n := testing.AllocsPerRun(2000, step)
	for i := 0; i < window; i++ {
		<-done
	}
	t.Logf("%.3f allocations per probe", n)
	if n > 0.05 {
		t.Fatalf("%.3f allocations per probe", n)
	}
}
