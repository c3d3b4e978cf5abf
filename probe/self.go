package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"

	"github.com/goroce/goroce/verbs"
)

// SelfPath is the HTTP path at which a node serves its Self as JSON.
const SelfPath = "/probe/v1/self"

// DefaultHTTPPort is the TCP port goroce serves SelfPath (and an agent its
// metrics) on by default.
const DefaultHTTPPort = 9478

// maxSelfBody bounds the Self document FetchSelf reads.
const maxSelfBody = 1 << 16

// ErrBadSelf: a Self document that cannot be used (no QPN, an unparsable
// GID or address, not JSON, an HTTP error).
var ErrBadSelf = errors.New("probe: bad self document")

// SelfHandler serves self() as JSON at any path it is mounted on (mount it
// at SelfPath). It answers GET and HEAD; other methods get 405.
func SelfHandler(self func() Self) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		b, err := json.Marshal(self())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if r.Method == http.MethodGet {
			w.Write(append(b, '\n'))
		}
	})
}

// FetchSelf gets the Self a node serves at base+SelfPath (base such as
// "http://10.0.0.2:9478") with c (http.DefaultClient when nil), within
// ctx. The document is checked: it must name at least one QPN and a GID
// that parses.
func FetchSelf(ctx context.Context, c *http.Client, base string) (Self, error) {
	if c == nil {
		c = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+SelfPath, nil)
	if err != nil {
		return Self{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return Self{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Self{}, fmt.Errorf("%w: %s: HTTP %s", ErrBadSelf, req.URL, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxSelfBody+1))
	if err != nil {
		return Self{}, err
	}
	if len(b) > maxSelfBody {
		return Self{}, fmt.Errorf("%w: %s: longer than %d bytes", ErrBadSelf, req.URL, maxSelfBody)
	}
	var s Self
	if err := json.Unmarshal(b, &s); err != nil {
		return Self{}, fmt.Errorf("%w: %s: %v", ErrBadSelf, req.URL, err)
	}
	if _, err := s.Peer(); err != nil {
		return Self{}, fmt.Errorf("%s: %w", req.URL, err)
	}
	return s, nil
}

// Peer returns the Peer that probes s's first responder QP: its GID,
// address, QPN and Q_Key (QKey when s gives none). The address defaults to
// the GID's when s.Addr is empty.
func (s Self) Peer() (Peer, error) {
	if len(s.QPNs) == 0 {
		return Peer{}, fmt.Errorf("%w: no QPN", ErrBadSelf)
	}
	ga, err := netip.ParseAddr(s.GID)
	if err != nil || !ga.Is6() && !ga.Is4() {
		return Peer{}, fmt.Errorf("%w: GID %q", ErrBadSelf, s.GID)
	}
	p := Peer{Name: s.Name, GID: verbs.GID(ga.As16()), QPN: s.QPNs[0] & 0xFFFFFF, QKey: s.QKey}
	if p.QKey == 0 {
		p.QKey = QKey
	}
	p.Addr = p.GID.Addr()
	if s.Addr != "" {
		a, err := netip.ParseAddr(s.Addr)
		if err != nil {
			return Peer{}, fmt.Errorf("%w: address %q", ErrBadSelf, s.Addr)
		}
		p.Addr = a.Unmap()
	}
	if p.Name == "" {
		p.Name = p.Addr.String()
	}
	return p, nil
}
