package agent_test

import (
	"encoding/json"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/probe/agent"
)

// A result's way through the agent (metrics, window, history) and its
// probe-log line allocate nothing once the path is known; the line is
// valid JSON with every field.
func TestResultPathAllocs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pinglist.yaml")
	port := freePort(t, 2)
	write(t, path, pinglist(port, "a/0/g1", "b/1/g1"))
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr(0), uint16(port)).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := agent.New(agent.Options{Device: softContext(t, addr(0)), Pinglist: path, Self: addr(0), Listener: ln, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	r := probe.Result{Peer: probe.Peer{Name: "b", Group: "g1", Addr: addr(1), QPN: 17}, Class: "tor_mesh", Seq: 1<<32 | 7,
		FlowLabel: 0x12345, SrcPort: probe.SourcePort(0x12345), ResponderQPN: 17, Sent: time.Now(),
		T1: 1000, T2: 2000, T3: 50000, T4: 60000, T5: 80000, T6: 81000,
		NetworkRTT: 68 * time.Microsecond, ProberDelay: time.Microsecond, ResponderDelay: 10 * time.Microsecond, Outcome: probe.OutcomeOK}
	a.Feed(r)
	if n := testing.AllocsPerRun(1000, func() { r.Sent = time.Now(); a.Feed(r) }); n != 0 {
		t.Errorf("a result allocates %v times", n)
	}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(1000, func() { buf = agent.AppendJSONL(buf[:0], "a", "g1", &r) }); n != 0 {
		t.Errorf("a probe-log line allocates %v times", n)
	}
	var m map[string]any
	if err := json.Unmarshal(buf, &m); err != nil {
		t.Fatalf("%v: %s", err, buf)
	}
	for _, k := range []string{"time", "src", "dst", "dst_addr", "group", "dst_group", "class", "seq", "label", "sport", "qpn", "outcome", "t1", "t2", "t3", "t4", "t5", "t6", "rtt_ns", "prober_delay_ns", "responder_delay_ns", "timestamps"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %s in %s", k, buf)
		}
	}
	if m["dst_addr"] != addr(1).String() || m["outcome"] != "ok" || m["label"] != float64(0x12345) || m["rtt_ns"] != float64(68000) {
		t.Errorf("line %s", buf)
	}
}
