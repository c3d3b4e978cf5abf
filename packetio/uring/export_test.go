//go:build linux

package uring

import "net/netip"

// ListenSingleshot opens a Conn that receives with batched single-shot
// RECVMSGs even where the kernel has multishot receive (the fallback).
func ListenSingleshot(local netip.Addr, opts Options) (*Conn, error) {
	return listen(local, opts, disable{multishot: true, mode: taskrunCoop})
}

// ListenNoCoop opens a Conn with Options.NoCoopTaskrun.
func ListenNoCoop(local netip.Addr, opts Options) (*Conn, error) {
	opts.NoCoopTaskrun = true
	return Listen(local, opts)
}
