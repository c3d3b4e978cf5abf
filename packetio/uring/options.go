package uring

import (
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/wire"
)

// AnyPort, as Options.Port, lets the kernel choose the local port.
const AnyPort = -1

// DefaultSocketBuffer is the default SO_RCVBUF and SO_SNDBUF size, in bytes.
const DefaultSocketBuffer = 4 << 20

// maxBatch bounds Options.Batch (as for package udp).
const maxBatch = 1024

// maxRxBuffers bounds Options.RxBuffers: buffer IDs are 16 bits and a
// provided-buffer ring has at most 32768 entries.
const maxRxBuffers = 1 << 15

// Options configures Listen. The zero value gives the defaults. The fields
// shared with package udp mean the same.
type Options struct {
	// Port is the local UDP port. Default 4791 (RoCEv2); AnyPort lets the
	// kernel choose one (tests).
	Port int
	// DstPort is the destination UDP port of transmitted packets. Default:
	// the local port.
	DstPort int
	// Batch is the largest number of packets one Receive returns and one
	// TxBatch lends (one SQE each, one io_uring_enter per Transmit).
	// Default packetio.DefaultBatch; at most 1024.
	Batch int
	// MaxPacket is the largest transport packet (UDP payload), in bytes.
	// Longer datagrams received are dropped and counted. Default
	// packetio.DefaultMaxPacket.
	MaxPacket int
	// RecvBuffer and SendBuffer are the requested SO_RCVBUF and SO_SNDBUF
	// sizes, in bytes. Default DefaultSocketBuffer; negative keeps the
	// kernel's default. As root SO_RCVBUFFORCE/SO_SNDBUFFORCE are used.
	RecvBuffer, SendBuffer int
	// TOS is the IPv4 TOS byte (DSCP << 2 | ECN) of transmitted packets
	// (IP_TOS). Default 0.
	TOS uint8
	// RxBuffers is the number of receive buffers the kernel fills (the
	// provided-buffer ring's size, or the number of single-shot RECVMSGs
	// outstanding), rounded up to a power of two. Default 8 x Batch, at
	// least 256; at most 32768.
	RxBuffers int
	// SingleIssuer promises that every Receive, TxBatch and Transmit call
	// comes from one OS thread: the goroutine that makes them called
	// runtime.LockOSThread before the first and keeps the thread. The ring
	// then uses IORING_SETUP_SINGLE_ISSUER and IORING_SETUP_DEFER_TASKRUN
	// (Linux 6.1), where the kernel completes receives only when that
	// thread waits for them. A call from another thread fails with
	// ErrWrongThread. Default false: Go moves goroutines between threads,
	// so the ring is set up for any thread to submit and reap.
	SingleIssuer bool
	// NoCoopTaskrun leaves IORING_SETUP_COOP_TASKRUN out. With it (the
	// default, Linux 5.19) the kernel does not interrupt the thread that
	// armed the receive when a datagram arrives but completes the receive
	// at that thread's next kernel entry, which batches receive work;
	// without it the kernel interrupts that thread at once, wherever it
	// is, which shortens single-packet round trips when Receive is called
	// from goroutines on other threads (provider/soft calls it from
	// PostSend and Poll too) and costs bulk throughput (see the package
	// documentation).
	NoCoopTaskrun bool
}

func (o Options) withDefaults() Options {
	if o.Port == 0 {
		o.Port = wire.RoCEv2Port
	}
	if o.Batch <= 0 {
		o.Batch = packetio.DefaultBatch
	}
	o.Batch = min(o.Batch, maxBatch)
	if o.MaxPacket <= 0 {
		o.MaxPacket = packetio.DefaultMaxPacket
	}
	if o.RecvBuffer == 0 {
		o.RecvBuffer = DefaultSocketBuffer
	}
	if o.SendBuffer == 0 {
		o.SendBuffer = DefaultSocketBuffer
	}
	if o.RxBuffers <= 0 {
		o.RxBuffers = max(8*o.Batch, 256)
	}
	o.RxBuffers = pow2(min(o.RxBuffers, maxRxBuffers))
	return o
}

// pow2 rounds n (> 0) up to a power of two.
func pow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
