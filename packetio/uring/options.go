package uring

import "github.com/goroce/goroce/packetio/internal/udpsock"

// AnyPort, as Options.Port, lets the kernel choose the local port.
const AnyPort = udpsock.AnyPort

// DefaultSocketBuffer is the default SO_RCVBUF and SO_SNDBUF size, in bytes.
const DefaultSocketBuffer = udpsock.DefaultSocketBuffer

// maxRxBuffers bounds Options.RxBuffers: buffer IDs are 16 bits and a
// provided-buffer ring has at most 32768 entries.
const maxRxBuffers = 1 << 15

// Options configures Listen. The zero value gives the defaults.
type Options struct {
	// Port, DstPort, MaxPacket, RecvBuffer, SendBuffer and TOS are package
	// udp's, with its defaults: the local UDP port (4791; AnyPort lets the
	// kernel choose), the destination port of transmitted packets (the
	// local port), the largest transport packet (packetio.DefaultMaxPacket;
	// longer datagrams received are dropped and counted), the requested
	// SO_RCVBUF and SO_SNDBUF sizes (DefaultSocketBuffer, forced as root;
	// negative keeps the kernel's) and the IPv4 TOS byte (IP_TOS, 0).
	Port, DstPort          int
	MaxPacket              int
	RecvBuffer, SendBuffer int
	TOS                    uint8
	// Batch is the largest number of packets one Receive returns and one
	// TxBatch lends (one SQE each, one io_uring_enter per Transmit).
	// Default packetio.DefaultBatch; at most 1024.
	Batch int
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
	o.shared().Defaults()
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

// shared returns the options shared with the other socket-based path.
func (o *Options) shared() udpsock.Shared {
	return udpsock.Shared{Port: &o.Port, DstPort: &o.DstPort, Batch: &o.Batch, MaxPacket: &o.MaxPacket,
		RecvBuffer: &o.RecvBuffer, SendBuffer: &o.SendBuffer}
}
