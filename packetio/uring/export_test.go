//go:build linux

package uring

import "net/netip"

// ListenSingleshot opens a Conn that receives with batched single-shot
// RECVMSGs even where the kernel has multishot receive (the fallback).
func ListenSingleshot(local netip.Addr, opts Options) (*Conn, error) {
	return listen(local, opts, disable{multishot: true, mode: taskrunCoop})
}

// ListenNoCoop opens a Conn whose ring does not use
// IORING_SETUP_COOP_TASKRUN: the kernel interrupts the arming thread for
// each completion (for benchmarks against the default).
func ListenNoCoop(local netip.Addr, opts Options) (*Conn, error) {
	return listen(local, opts, disable{mode: taskrunNormal})
}
