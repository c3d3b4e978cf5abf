//go:build linux

package uring

import (
	"net/netip"

	"golang.org/x/sys/unix"
)

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

// ListenGRORoom opens a Conn whose receive slots, with GRO, hold room
// bytes of payload instead of a whole 64 KiB train, so that the kernel
// cuts trains (MSG_TRUNC); singleshot selects the single-shot receive.
func ListenGRORoom(local netip.Addr, opts Options, room int, singleshot bool) (*Conn, error) {
	return listen(local, opts, disable{multishot: singleshot, mode: taskrunCoop, groRoom: room})
}

// SetSockoptInt sets an integer socket option on the Conn's socket behind
// its back (tests of refused GSO messages).
func SetSockoptInt(c *Conn, level, opt, value int) error {
	return unix.SetsockoptInt(c.sock, level, opt, value)
}
