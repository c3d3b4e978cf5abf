package probe_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/probe"
)

// TestSelfServer starts a responder with its HTTP server, fetches its Self
// at URL and probes it through what was fetched.
func TestSelfServer(t *testing.T) {
	_, rctx := softContext(t, addrA)
	_, pctx := softContext(t, addrB)
	s, err := probe.NewSelfServer(rctx, probe.SelfServerOptions{QPs: 2, Listen: "127.0.0.1:0", Name: "node-a", Provider: "soft", Device: "soft0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	self := s.Self()
	if self.Name != "node-a" || self.Addr != addrA.String() || len(self.QPNs) != 2 || self.QKey != probe.QKey || self.Provider != "soft" || self.Device != "soft0" {
		t.Errorf("Self = %+v", self)
	}
	wantURL := "http://" + addrA.String() + ":" + strconv.Itoa(s.Port()) + probe.SelfPath
	if s.URL() != wantURL {
		t.Errorf("URL = %s, want %s", s.URL(), wantURL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := probe.FetchSelf(ctx, nil, "http://127.0.0.1:"+strconv.Itoa(s.Port()))
	if err != nil || got.GID != self.GID || len(got.QPNs) != 2 || got.QPNs[1] != self.QPNs[1] {
		t.Fatalf("FetchSelf = %+v, %v", got, err)
	}
	peer, err := got.Peer()
	if err != nil {
		t.Fatal(err)
	}
	c := newCollector()
	p, err := probe.NewProber(pctx, probe.ProberOptions{OnResult: c.add})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Probe(peer, 0, "test"); err != nil {
		t.Fatal(err)
	}
	rs := c.wait(t, 5*time.Second, count(1))
	if rs[0].Outcome != probe.OutcomeOK {
		t.Errorf("probe: %+v", rs[0])
	}
	if st := s.Stats(); st.Received != 1 || st.Answered != 1 {
		t.Errorf("Stats = %+v", st)
	}
	s.Close()
	if _, err := http.Get(wantURL); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("after Close: %v", err)
	}
}

// TestSelfServerListenError: a taken port is an error, and the responder
// started before it is closed again.
func TestSelfServerListenError(t *testing.T) {
	_, rctx := softContext(t, addrA)
	s, err := probe.NewSelfServer(rctx, probe.SelfServerOptions{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := probe.NewSelfServer(rctx, probe.SelfServerOptions{Listen: "127.0.0.1:" + strconv.Itoa(s.Port())}); err == nil {
		t.Error("a second server on the same port: no error")
	}
}

func TestFormatQPNs(t *testing.T) {
	for _, c := range []struct {
		in   []uint32
		want string
	}{
		{nil, ""},
		{[]uint32{0x11}, "0x000011"},
		{[]uint32{0x11, 0xabcdef, 0}, "0x000011,0xabcdef,0x000000"},
	} {
		if got := probe.FormatQPNs(c.in); got != c.want {
			t.Errorf("FormatQPNs(%x) = %q, want %q", c.in, got, c.want)
		}
	}
}
