package probe_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/verbs"
)

func TestSelfHTTP(t *testing.T) {
	self := probe.Self{Name: "h1", Addr: "10.0.0.7", GID: verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.7")).String(),
		QPNs: []uint32{17, 18}, QKey: probe.QKey, Provider: "soft", Device: "soft0", Timestamps: "software",
		Started: time.Unix(1700000000, 0).UTC()}
	mux := http.NewServeMux()
	mux.Handle(probe.SelfPath, probe.SelfHandler(func() probe.Self { return self }))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := probe.FetchSelf(ctx, nil, srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != self.Name || got.GID != self.GID || len(got.QPNs) != 2 || !got.Started.Equal(self.Started) {
		t.Fatalf("got %+v, want %+v", got, self)
	}
	p, err := got.Peer()
	if err != nil {
		t.Fatal(err)
	}
	want := probe.Peer{Name: "h1", Addr: netip.MustParseAddr("10.0.0.7"), GID: verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.7")), QPN: 17, QKey: probe.QKey}
	if p != want {
		t.Fatalf("Peer = %+v, want %+v", p, want)
	}
	resp, err := http.Post(srv.URL+probe.SelfPath, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %s", resp.Status)
	}

	// Bad documents are errors, not panics.
	for _, tc := range []struct{ name, body string }{
		{"not json", "hello"},
		{"no qpn", `{"gid":"::ffff:10.0.0.1","qpns":[]}`},
		{"bad gid", `{"gid":"zz","qpns":[1]}`},
		{"bad addr", `{"gid":"::ffff:10.0.0.1","addr":"x","qpns":[1]}`},
		{"huge", `{"name":"` + strings.Repeat("a", 1<<17) + `"}`},
	} {
		bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(tc.body)) }))
		_, err := probe.FetchSelf(ctx, bad.Client(), bad.URL)
		bad.Close()
		if !errors.Is(err, probe.ErrBadSelf) {
			t.Errorf("%s: err %v, want ErrBadSelf", tc.name, err)
		}
	}
	nf := httptest.NewServer(http.NotFoundHandler())
	defer nf.Close()
	if _, err := probe.FetchSelf(ctx, nil, nf.URL); !errors.Is(err, probe.ErrBadSelf) {
		t.Errorf("404: %v", err)
	}
	// A Self without an address takes its GID's; without a Q_Key, QKey.
	p, err = probe.Self{GID: "::ffff:10.1.2.3", QPNs: []uint32{5}}.Peer()
	if err != nil || p.Addr != netip.MustParseAddr("10.1.2.3") || p.QKey != probe.QKey || p.Name != "10.1.2.3" {
		t.Fatalf("Peer = %+v, %v", p, err)
	}
}
