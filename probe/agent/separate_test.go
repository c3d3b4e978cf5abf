package agent

import (
	"reflect"
	"testing"
	"time"

	"github.com/goroce/goroce/probe/analysis"
)

func TestSeparationHold(t *testing.T) {
	amb := analysis.Verdict{Symptom: "loss", Ambiguous: true, Separate: []string{"a->c", "c->a"},
		Suspects: []analysis.Suspect{{Kind: "uplink", Name: "g1"}, {Kind: "spine", Name: "spine"}}}
	settled := analysis.Verdict{Symptom: "loss", Suspects: []analysis.Suspect{{Kind: "uplink", Name: "g1"}}}
	other := analysis.Verdict{Symptom: "loss", Suspects: []analysis.Suspect{{Kind: "host", Name: "b"}}}
	s := separation{hold: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	want := []string{"a->c", "c->a"}
	if got := s.update(t0, []analysis.Verdict{amb}); !reflect.DeepEqual(got, want) {
		t.Fatalf("ambiguous: %v, want %v", got, want)
	}
	// Settled on one of its suspects: the pairs stay, long after the hold.
	for k := 1; k <= 6; k++ {
		if got := s.update(t0.Add(time.Duration(k)*5*time.Second), []analysis.Verdict{settled}); !reflect.DeepEqual(got, want) {
			t.Fatalf("settled, %d s on: %v, want %v", k*5, got, want)
		}
	}
	// Another verdict does not keep them; the hold ends them.
	t1 := t0.Add(30 * time.Second)
	if got := s.update(t1.Add(5*time.Second), []analysis.Verdict{other}); !reflect.DeepEqual(got, want) {
		t.Fatalf("within the hold: %v, want %v", got, want)
	}
	if got := s.update(t1.Add(11*time.Second), []analysis.Verdict{other}); len(got) != 0 {
		t.Fatalf("after the hold: %v, want none", got)
	}
}
