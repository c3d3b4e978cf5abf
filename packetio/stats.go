package packetio

import "sync/atomic"

// Stats is a snapshot of a Conn's counters.
type Stats struct {
	PacketsIn   uint64 // packets returned by Receive
	BytesIn     uint64 // their bytes (UDP payload)
	PacketsOut  uint64 // packets handed to the kernel (or the peer) by Transmit
	BytesOut    uint64 // their bytes (UDP payload)
	RxBatches   uint64 // Receive calls that returned at least one packet
	TxBatches   uint64 // batches handed to the kernel (sendmmsg calls) or the peer
	RxDrops     uint64 // received packets dropped: truncated (longer than MaxPacket), queue full
	AsyncErrors uint64 // asynchronous socket errors (ICMP unreachable, ...) the kernel reported on a receive or send call, skipped
	TxErrors    uint64 // packets Transmit did not send (EMSGSIZE, bad address, too large, ...)
	Wakes       uint64 // pending Wakes consumed by Receive
	TxWaits     uint64 // times Transmit waited for a socket's full send buffer to drain (EAGAIN)
	// SourcePortFallbacks counts packets sent from the Conn's own port,
	// their ICRC recomputed, because the source port they asked for
	// (Packet.Port) could not be bound (see SourcePorts).
	SourcePortFallbacks uint64
	// SourcePortSockets counts the sockets opened to send from ports other
	// than the Conn's own (closed again when the least recently used).
	SourcePortSockets uint64
	// GSOMessages counts the UDP segmentation offload messages sent (one
	// sendmmsg entry carrying several packets, which the kernel or the NIC
	// cuts into datagrams), GSOSegments the packets they carried, and
	// GSOFallbacks the messages the kernel refused and whose packets went
	// one datagram each instead.
	GSOMessages, GSOSegments, GSOFallbacks uint64
	// GROBuffers counts the received buffers that UDP GRO coalesced from
	// several datagrams, GROSegments the packets split out of them.
	GROBuffers, GROSegments uint64
	// KernelRxDrops counts the datagrams the kernel dropped before the
	// Conn read them: a socket's receive buffer was full (SO_RXQ_OVFL;
	// the udp and uring paths), or an AF_XDP socket found its RX ring full
	// or no fill-ring frame (XDP_STATISTICS). It is what RxDropped
	// (RxDropCounter) returns, and lags the kernel's own count (see each
	// path's documentation for when it is learnt). Not in RxDrops, which
	// counts what the Conn itself dropped.
	KernelRxDrops uint64
}

// Counters holds the counters behind Stats for an implementation of Conn.
// Each is updated atomically, so that Stats can be read from any goroutine
// while the driver goroutine counts; implementations add once per batch.
// The zero value is ready to use.
type Counters struct {
	PacketsIn, BytesIn   atomic.Uint64
	PacketsOut, BytesOut atomic.Uint64
	RxBatches, TxBatches atomic.Uint64
	RxDrops, AsyncErrors atomic.Uint64
	TxErrors             atomic.Uint64
	Wakes                atomic.Uint64
	TxWaits              atomic.Uint64
	SourcePortFallbacks  atomic.Uint64
	SourcePortSockets    atomic.Uint64
	GSOMessages          atomic.Uint64
	GSOSegments          atomic.Uint64
	GSOFallbacks         atomic.Uint64
	GROBuffers           atomic.Uint64
	GROSegments          atomic.Uint64
	// KernelRxDrops is set (not added to) by the receive side as it learns
	// the kernel's count: NoteKernelRxDrops32 or Store.
	KernelRxDrops atomic.Uint64
}

// Stats returns a snapshot of the counters. Counters updated concurrently
// may be seen at slightly different instants.
func (c *Counters) Stats() Stats {
	return Stats{
		PacketsIn:   c.PacketsIn.Load(),
		BytesIn:     c.BytesIn.Load(),
		PacketsOut:  c.PacketsOut.Load(),
		BytesOut:    c.BytesOut.Load(),
		RxBatches:   c.RxBatches.Load(),
		TxBatches:   c.TxBatches.Load(),
		RxDrops:     c.RxDrops.Load(),
		AsyncErrors: c.AsyncErrors.Load(),
		TxErrors:    c.TxErrors.Load(),
		Wakes:       c.Wakes.Load(),
		TxWaits:     c.TxWaits.Load(),

		SourcePortFallbacks: c.SourcePortFallbacks.Load(),
		SourcePortSockets:   c.SourcePortSockets.Load(),
		GSOMessages:         c.GSOMessages.Load(),
		GSOSegments:         c.GSOSegments.Load(),
		GSOFallbacks:        c.GSOFallbacks.Load(),
		GROBuffers:          c.GROBuffers.Load(),
		GROSegments:         c.GROSegments.Load(),
		KernelRxDrops:       c.KernelRxDrops.Load(),
	}
}

// Received counts one Receive that returned n packets of the given total
// size (nothing when n is 0).
func (c *Counters) Received(n int, bytes uint64) {
	if n == 0 {
		return
	}
	c.PacketsIn.Add(uint64(n))
	c.BytesIn.Add(bytes)
	c.RxBatches.Add(1)
}

// Transmitted counts one Transmit of pkts that sent sent packets of the
// given total size and failed those fail holds, and returns what Transmit
// returns: sent, and fail's *TransmitError when a packet was not sent.
func (c *Counters) Transmitted(sent int, bytes uint64, fail *TxFailures, pkts []Packet) (int, error) {
	if sent > 0 {
		c.PacketsOut.Add(uint64(sent))
		c.BytesOut.Add(bytes)
	}
	if fail.Len() > 0 {
		c.TxErrors.Add(uint64(fail.Len()))
		return sent, fail.Err(pkts)
	}
	return sent, nil
}

// NoteKernelRxDrops32 sets KernelRxDrops from total, a socket's cumulative
// drop count as the kernel reports it with each datagram (SO_RXQ_OVFL: 32
// bits, which wrap): KernelRxDrops goes up by total's increase since the
// last one noted, modulo 2^32, so that it keeps counting past the wrap. A
// total of 0 (no drop reported) leaves it. Only the receive side calls it.
func (c *Counters) NoteKernelRxDrops32(total uint32) {
	if total == 0 {
		return
	}
	old := c.KernelRxDrops.Load()
	if d := total - uint32(old); d != 0 {
		c.KernelRxDrops.Store(old + uint64(d))
	}
}
