package ping

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/verbs"
)

func TestLabels(t *testing.T) {
	for _, c := range []struct {
		labels, paths int
		prob          float64
		want          int
	}{
		{0, 0, 0.99, 1},
		{3, 0, 0.99, 3},
		{0, 16, 0.99, probe.LabelCount(16, 0.99)},
		{7, 16, 0.99, probe.LabelCount(16, 0.99)}, // paths wins
		{probe.MaxLabels + 10, 0, 0.99, probe.MaxLabels},
		{0, 16, 0.5, probe.LabelCount(16, 0.5)},
	} {
		got := Labels(c.labels, c.paths, c.prob, 42)
		if len(got) != c.want {
			t.Errorf("Labels(%d, %d, %v) gave %d labels, want %d", c.labels, c.paths, c.prob, len(got), c.want)
		}
		if want := probe.FlowLabels(42, c.want); !slices.Equal(got, want) {
			t.Errorf("Labels(%d, %d, %v) = %v, want FlowLabels(42, %d)", c.labels, c.paths, c.prob, got, c.want)
		}
	}
	if probe.LabelCount(16, 0.99) != 115 {
		t.Errorf("LabelCount(16, 0.99) = %d, want 115", probe.LabelCount(16, 0.99))
	}
}

func TestResolveAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs, err := ResolveAll(ctx, []string{"127.0.0.1", "::ffff:10.1.2.3"}, 0x123, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Arg != "127.0.0.1" || hs[1].Peer.Addr.String() != "10.1.2.3" ||
		hs[1].Peer.GID != verbs.GIDFromAddr(hs[1].Peer.Addr) || !slices.Equal(hs[0].QPNs, []uint32{0x123}) || hs[0].Peer.QKey != probe.QKey {
		t.Errorf("hosts %+v %+v", hs[0], hs[1])
	}
	if _, err := ResolveAll(ctx, []string{"127.0.0.1", "::1"}, 0x123, 0); err == nil || !strings.HasPrefix(err.Error(), "::1: ") {
		t.Errorf("an IPv6 host with --qpn: %v", err)
	}
}
