package ping

import (
	"context"
	"fmt"

	"github.com/goroce/goroce/probe"
)

// DefaultCount is the number of probes per host when neither a count nor
// a number of labels or paths is given.
const DefaultCount = 5

// Labels returns the flow labels the probes rotate over: probe.FlowLabels
// of seed, as many as cover paths equal-cost paths with probability prob
// (probe.LabelCount) when paths > 0, else labels (one when labels is 0),
// at most probe.MaxLabels.
func Labels(labels, paths int, prob float64, seed uint64) []uint32 {
	n := 1
	if paths > 0 {
		n = probe.LabelCountAtMost(paths, prob, probe.MaxLabels)
	} else if labels > 0 {
		n = labels
	}
	return probe.FlowLabels(seed, min(n, probe.MaxLabels))
}

// ResolveAll finds the responder of every host (Resolve); an error names
// the host it is about.
func ResolveAll(ctx context.Context, args []string, qpn uint32, httpPort int) ([]*Host, error) {
	hs := make([]*Host, len(args))
	for i, a := range args {
		h, err := Resolve(ctx, a, qpn, httpPort)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a, err)
		}
		hs[i] = h
	}
	return hs, nil
}
