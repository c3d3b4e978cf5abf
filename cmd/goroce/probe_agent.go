package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/goroce/goroce/internal/cliflag"
	"github.com/goroce/goroce/internal/devinfo"
	"github.com/goroce/goroce/provider/soft"

	"github.com/goroce/goroce/probe/agent"
)

// runProbeAgent is `goroce probe agent`: the long-running prober,
// responder and HTTP server of one node of a pinglist, until SIGINT or
// SIGTERM; SIGHUP reloads the pinglist.
func runProbeAgent(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sc devinfo.Soft
	registerSoft(fs, &sc)
	var config, devName, listen, jsonl, level string
	fs.StringVar(&config, "config", "", "the pinglist `file` (YAML; see package probe/pinglist); required")
	fs.StringVar(&devName, "d", "", "use device `dev` (default: the soft device "+softName+" on --addr)")
	fs.StringVar(&listen, "listen", "", "HTTP listen `address` for /metrics, /probe/v1/... and the page (default \":<the pinglist's http_port>\", 9478)")
	fs.StringVar(&jsonl, "jsonl", "", "append every probe (T1..T6, seq, label, source port, outcome) to `file` as JSON lines")
	fs.StringVar(&level, "log-level", "info", "log level: debug, info, warn or error (logs go to stderr)")
	var web webFlags
	fs.StringVar(&web.config, "web.config.file", "", "serve HTTP as the Prometheus exporter toolkit web configuration `file` says (TLS, basic auth)")
	fs.StringVar(&web.peerCA, "peer-ca", "", "fetch from peers over HTTPS, trusting the CA certificates in `file` (PEM)")
	fs.StringVar(&web.peerUser, "peer-user", "", "basic auth `user` of the fetches from peers")
	fs.StringVar(&web.peerPasswordFile, "peer-password-file", "", "basic auth password of the fetches from peers, read from `file`")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goroce probe agent --config FILE [-d dev] [--path P] [--addr A] [--listen :9478] [--jsonl FILE]")
		fmt.Fprintln(stderr, "\nRuns the prober of one node of a fleet: a responder, probes to every target the\npinglist gives this node (found by --addr), and an HTTP server with /metrics,\n/probe/v1/self, /probe/v1/paths, /probe/v1/fleet and a live page at /.\nThe pinglist is reloaded when the file changes and on SIGHUP. A node the\npinglist gives several rails runs all of them, each on its own address.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := cliflag.Parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || config == "" {
		if config == "" {
			fmt.Fprintln(stderr, "goroce probe agent: --config is required")
		}
		fs.Usage()
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		fmt.Fprintln(stderr, "goroce probe agent: --log-level:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	if err := probeAgent(sc, devName, config, listen, jsonl, web, log); err != nil {
		fmt.Fprintln(stderr, "goroce probe agent:", err)
		return 1
	}
	return 0
}

// probeAgent runs the agent (agent.RunUntilSignal) on the device -d names.
func probeAgent(sc devinfo.Soft, devName, config, listen, jsonl string, web webFlags, log *slog.Logger) error {
	self, _, err := sc.Resolve()
	if err != nil {
		return err
	}
	o := agent.Options{Pinglist: config, Self: self, Listen: listen, Logger: log, WebConfig: web.config}
	if err := web.peers(&o); err != nil {
		return err
	}
	if rails := nodeRails(config, self); len(rails) > 1 {
		return probeRails(sc, devName, rails, o, jsonl)
	}
	if _, ok := devinfo.OpenHW(devName); ok && sc.Addr == "" {
		return errors.New("-d " + devName + ": give this node's address (as the pinglist lists it) with --addr")
	}
	dev, err := sc.OpenContext(devName)
	if err != nil {
		return err
	}
	defer dev.Close()
	if sd, ok := dev.Device.(*soft.Device); ok {
		log.Info("soft device", "name", sd.Name(), "addr", sd.Addr(), "packet_path", sd.Path())
	}
	var jw io.Writer
	if jsonl != "" {
		f, err := openJSONL(jsonl)
		if err != nil {
			return err
		}
		defer f.Close()
		jw = f
	}
	o.Device, o.Provider, o.JSONL = dev.Context, dev.Provider, jw
	a, err := agent.New(o)
	if err != nil {
		return err
	}
	return a.RunUntilSignal(context.Background())
}

// openJSONL opens the JSON-lines probe log for appending.
func openJSONL(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
}

// webFlags are goroce probe agent's HTTP security flags.
type webFlags struct {
	config, peerCA, peerUser, peerPasswordFile string
}

// peers sets o's peer TLS and basic auth from the flags.
func (w webFlags) peers(o *agent.Options) error {
	if w.peerCA != "" {
		b, err := os.ReadFile(w.peerCA)
		if err != nil {
			return fmt.Errorf("--peer-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("--peer-ca: no PEM certificate in %s", w.peerCA)
		}
		o.PeerTLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if (w.peerUser == "") != (w.peerPasswordFile == "") {
		return errors.New("--peer-user and --peer-password-file go together")
	}
	if w.peerUser != "" {
		b, err := os.ReadFile(w.peerPasswordFile)
		if err != nil {
			return fmt.Errorf("--peer-password-file: %w", err)
		}
		o.PeerUser, o.PeerPassword = w.peerUser, strings.TrimRight(string(b), "\r\n")
	}
	return nil
}
