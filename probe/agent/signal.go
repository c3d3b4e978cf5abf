package agent

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// RunUntilSignal is Run until ctx ends or the process receives SIGINT or
// SIGTERM; every SIGHUP meanwhile reloads the pinglist (Reload, which logs
// and counts its errors), as `goroce probe agent` runs it.
func (a *Agent) RunUntilSignal(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go a.reloadOn(ctx, hup)
	return a.Run(ctx)
}

// reloadOn calls Reload for every value of c until ctx ends.
func (a *Agent) reloadOn(ctx context.Context, c <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c:
			a.log.Info("SIGHUP: reloading the pinglist")
			a.Reload() // logs and counts its errors
		}
	}
}
