package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/goroce/goroce/internal/devinfo"
	"github.com/goroce/goroce/probe/agent"
	"github.com/goroce/goroce/probe/pinglist"
)

// nodeRails returns the rails of the node the pinglist at path gives the
// address self, when it lists them (nil otherwise, and when the list does
// not load: the agent then reports why).
func nodeRails(path string, self netip.Addr) []pinglist.Node {
	l, err := pinglist.Load(path)
	if err != nil {
		return nil
	}
	n, ok := l.Self(self)
	if !ok || n.Host == "" {
		return nil
	}
	return l.Rails(n.Host)
}

// probeRails runs one agent a rail of a multi-rail node, each on its
// rail's device (the rail's device in the pinglist, else -d, else the soft
// device on the rail's address) and serving HTTP on its rail's address (the port
// of --listen, or the pinglist's http_port), until a signal ends them all.
// The rails' JSON-lines logs, when asked for, go to FILE.<rail>.
func probeRails(sc devinfo.Soft, devName string, rails []pinglist.Node, o agent.Options, jsonl string) error {
	port := ""
	if o.Listen != "" {
		_, p, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		port = p
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make([]error, len(rails))
	var wg sync.WaitGroup
	for i, r := range rails {
		ro := o
		ro.Self = r.Addr
		ro.Logger = o.Logger.With("rail", r.Rail)
		ro.Registry = nil // each rail serves its own metrics
		if port != "" {
			ro.Listen = net.JoinHostPort(r.Addr.String(), port)
		}
		rsc := sc
		rsc.Addr = r.Addr.String()
		dev := devName
		if r.Device != "" {
			dev = r.Device
		}
		j := ""
		if jsonl != "" {
			j = jsonl + "." + r.Rail
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runRail(ctx, rsc, dev, ro, j)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("rail %s (%s): %w", r.Rail, r.Addr, errs[i])
				cancel() // one rail failing stops the node's agent
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runRail opens one rail's device and runs its agent until ctx ends or a
// signal comes.
func runRail(ctx context.Context, sc devinfo.Soft, devName string, o agent.Options, jsonl string) error {
	dev, err := sc.OpenContext(devName)
	if err != nil {
		return err
	}
	defer dev.Close()
	if o.Listen == "" {
		l, err := pinglist.Load(o.Pinglist)
		if err != nil {
			return err
		}
		o.Listen = net.JoinHostPort(o.Self.String(), strconv.Itoa(l.Settings.HTTPPort))
	}
	if jsonl != "" {
		f, err := openJSONL(jsonl)
		if err != nil {
			return err
		}
		defer f.Close()
		o.JSONL = f
	}
	o.Device, o.Provider = dev.Context, dev.Provider
	a, err := agent.New(o)
	if err != nil {
		return err
	}
	return a.RunUntilSignal(ctx)
}
