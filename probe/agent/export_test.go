package agent

import "github.com/goroce/goroce/probe"

// Feed hands r to the agent as if its prober had reported it (benchmarks
// fill the analysis state with it).
func (a *Agent) Feed(r probe.Result) { a.onResult(r) }

// AppendJSONL is appendJSONL, for tests.
func AppendJSONL(b []byte, src, srcGroup string, r *probe.Result) []byte {
	return appendJSONL(b, src, srcGroup, r)
}
