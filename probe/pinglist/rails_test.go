package pinglist

import (
	"errors"
	"strings"
	"testing"
)

const railList = `
nodes:
  - name: a1
    group: tor-a
    rails:
      - {addr: 10.0.1.1, group: tor-a0, device: mlx5_0, gid_index: 3}
      - {addr: 10.1.1.1, group: tor-a1, device: mlx5_1}
  - name: a2
    rails:
      - {addr: 10.0.1.2, group: tor-a0}
      - {addr: 10.1.1.2, group: tor-a1}
  - name: b1
    rails:
      - {addr: 10.0.2.1, group: tor-b0}
      - {name: east, addr: 10.1.2.1, group: tor-b1}
  - {name: c1, addr: 10.0.3.1, group: tor-c}
`

func targetNames(t []Target) string {
	var s []string
	for _, x := range t {
		s = append(s, x.Node.Name)
	}
	return strings.Join(s, " ")
}

func TestRails(t *testing.T) {
	l, err := Parse([]byte(railList))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Nodes) != 7 {
		t.Fatalf("%d nodes, want 7 (three hosts of two rails, one of one)", len(l.Nodes))
	}
	r := l.Rails("a1")
	if len(r) != 2 || r[0].Name != "a1/rail0" || r[1].Name != "a1/rail1" || r[0].Device != "mlx5_0" || r[0].GIDIndex != 3 ||
		r[1].Group != "tor-a1" || r[0].HostName() != "a1" || r[1].Rail != "rail1" {
		t.Fatalf("rails of a1: %+v", r)
	}
	if n, ok := l.Self(r[1].Addr); !ok || n != r[1] {
		t.Fatalf("Self(%s) = %+v, %v", r[1].Addr, n, ok)
	}
	if c := l.Rails("c1"); len(c) != 1 || c[0].Name != "c1" || c[0].HostName() != "c1" {
		t.Fatalf("rails of c1: %+v", c)
	}
	// Same-rail pairs: a1's rail0 probes a2's rail0 (its ToR) and, of the
	// other groups, b1's rail0 and the one-address c1; never a rail of
	// its own host, nor another rail.
	if got, want := targetNames(l.Targets(r[0])), "a2/rail0 b1/rail0 c1"; got != want {
		t.Errorf("targets of a1/rail0: %q, want %q", got, want)
	}
	// b1's second rail is named "east": no other host has such a rail.
	if got, want := targetNames(l.Targets(l.Rails("b1")[1])), "c1"; got != want {
		t.Errorf("targets of b1/east: %q, want %q", got, want)
	}
	// c1 pairs with every rail.
	if got, want := targetNames(l.Targets(l.Rails("c1")[0])), "a1/rail0 a1/rail1 a2/rail0 a2/rail1 b1/east b1/rail0"; got != want {
		t.Errorf("targets of c1: %q, want %q", got, want)
	}
	all, err := Parse([]byte("settings: {rail_pairs: all}\n" + railList))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := targetNames(all.Targets(all.Rails("a1")[0])), "a2/rail0 a2/rail1 b1/east b1/rail0 c1"; got != want {
		t.Errorf("rail_pairs all: targets of a1/rail0: %q, want %q", got, want)
	}
}

func TestRailsInvalid(t *testing.T) {
	for _, c := range []struct{ name, list, want string }{
		{"addr and rails", "nodes:\n  - {name: a, addr: 10.0.0.1, rails: [{addr: 10.0.0.2}]}\n", "not addr"},
		{"slash in name", "nodes:\n  - {name: a/b, addr: 10.0.0.1}\n", "may not contain"},
		{"duplicate rail", "nodes:\n  - {name: a, rails: [{name: x, addr: 10.0.0.1}, {name: x, addr: 10.0.0.2}]}\n", "duplicate rail"},
		{"rail address twice", "nodes:\n  - {name: a, rails: [{addr: 10.0.0.1}]}\n  - {name: b, addr: 10.0.0.1}\n", "duplicate address"},
		{"bad rail address", "nodes:\n  - {name: a, rails: [{addr: nope}]}\n", "bad addr"},
		{"gid index", "nodes:\n  - {name: a, rails: [{addr: 10.0.0.1, gid_index: 300}]}\n", "gid_index"},
		{"rail_pairs", "settings: {rail_pairs: some}\n", "rail_pairs"},
	} {
		_, err := Parse([]byte(c.list))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", c.name, err, c.want)
		}
	}
}
