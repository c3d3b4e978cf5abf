package probe

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/verbs"
)

// SelfServerOptions are the settings of NewSelfServer.
type SelfServerOptions struct {
	// QPs is the number of responder UD QPs (ResponderOptions.QPs;
	// default 1).
	QPs int
	// Listen is the TCP address of the HTTP server (default ":9478",
	// DefaultHTTPPort; port 0: any free port).
	Listen string
	// Name is the node's name in its Self (default: the host name).
	Name string
	// Provider and Device name the device in the Self (as "soft" and
	// "soft0").
	Provider, Device string
}

// SelfServer is a Responder whose Self is served as JSON at SelfPath over
// HTTP, so that probers find it by address alone: `goroce probe
// responder`.
type SelfServer struct {
	r    *Responder
	self Self
	srv  *http.Server
	ln   net.Listener
}

// NewSelfServer starts a Responder on vctx and an HTTP server on
// o.Listen serving its Self at SelfPath, until Close.
func NewSelfServer(vctx verbs.Context, o SelfServerOptions) (*SelfServer, error) {
	if o.Listen == "" {
		o.Listen = ":" + strconv.Itoa(DefaultHTTPPort)
	}
	if o.Name == "" {
		o.Name, _ = os.Hostname()
	}
	r, err := NewResponder(vctx, ResponderOptions{QPs: o.QPs})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		r.Close()
		return nil, err
	}
	s := &SelfServer{r: r, ln: ln, self: Self{Name: o.Name, Addr: r.GID().Addr().String(), GID: r.GID().String(), QPNs: r.QPNs(), QKey: QKey,
		Provider: o.Provider, Device: o.Device, Timestamps: r.Timestamps().String(), Started: time.Now().UTC()}}
	mux := http.NewServeMux()
	mux.Handle(SelfPath, SelfHandler(func() Self { return s.self }))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// Self is the document served at SelfPath.
func (s *SelfServer) Self() Self { return s.self }

// Port is the TCP port the HTTP server listens on.
func (s *SelfServer) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// URL is where the Self is served: http://ADDR:PORT/probe/v1/self, ADDR
// the responder's IP address.
func (s *SelfServer) URL() string {
	return "http://" + net.JoinHostPort(s.self.Addr, strconv.Itoa(s.Port())) + SelfPath
}

// Stats returns the responder's counters.
func (s *SelfServer) Stats() ResponderStats { return s.r.Stats() }

// Close stops the HTTP server and the responder.
func (s *SelfServer) Close() error {
	s.srv.Close()
	return s.r.Close()
}

// FormatQPNs formats QPNs as goroce prints them: six hex digits each
// ("0x000011,0x000012").
func FormatQPNs(qpns []uint32) string {
	qs := make([]string, len(qpns))
	for i, q := range qpns {
		qs[i] = fmt.Sprintf("0x%06x", q)
	}
	return strings.Join(qs, ",")
}
