package probe_test

import (
	"testing"
	"time"

	"github.com/goroce/goroce/probe"
)

func TestLoopbackProbes(t *testing.T) {
	_, ca := softContext(t, addrA)
	_, cb := softContext(t, addrB)
	resp, err := probe.NewResponder(cb, probe.ResponderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Close()
	col := newCollector()
	p, err := probe.NewProber(ca, probe.ProberOptions{OnResult: col.add})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	labels := probe.FlowLabels(1, 8)
	const n = 100
	for i := 0; i < n; i++ {
		if err := p.Probe(peerOf(resp, 0), labels[i%len(labels)], "test"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	rs := col.wait(t, 5*time.Second, count(n))
	for _, r := range rs {
		if r.Outcome != probe.OutcomeOK {
			t.Errorf("%+v", r)
		}
	}
	t.Logf("%+v", rs[0])
	t.Logf("prober %+v responder %+v", p.Stats(), resp.Stats())
}
