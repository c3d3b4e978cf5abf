package agent

import (
	"net"
	"net/http"

	toolkit "github.com/prometheus/exporter-toolkit/web"
)

// basicAuth adds HTTP basic authentication to every request.
type basicAuth struct {
	user, password string
	next           http.RoundTripper
}

func (b basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.user, b.password)
	return b.next.RoundTrip(r)
}

// peerClient is the default HTTPClient: no proxy, FetchTimeout, TLS with
// PeerTLS (when set) and basic authentication as PeerUser (when set).
func (o *Options) peerClient() *http.Client {
	var rt http.RoundTripper = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: 90e9, TLSClientConfig: o.PeerTLS}
	if o.PeerUser != "" {
		rt = basicAuth{user: o.PeerUser, password: o.PeerPassword, next: rt}
	}
	return &http.Client{Timeout: o.FetchTimeout, Transport: rt}
}

// scheme is how peers are reached: https when PeerTLS is set.
func (o *Options) scheme() string {
	if o.PeerTLS != nil {
		return "https"
	}
	return "http"
}

// serve serves srv on ln: through the Prometheus exporter toolkit's web
// configuration (TLS, basic authentication) when WebConfig names a file,
// plain HTTP otherwise.
func (a *Agent) serve(srv *http.Server, ln net.Listener) error {
	if a.opts.WebConfig == "" {
		return srv.Serve(ln)
	}
	cfg := a.opts.WebConfig
	return toolkit.Serve(ln, srv, &toolkit.FlagConfig{WebConfigFile: &cfg}, a.log)
}
