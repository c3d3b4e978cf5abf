// Package verbs is goroce's RDMA verbs API: devices, protection domains,
// memory regions, completion queues, queue pairs, shared receive queues,
// address handles, work requests and work completions, with the names and
// values libibverbs gives them (include/infiniband/verbs.h), so that rdma-core
// documentation reads straight onto it.
//
// The value types (SendWR, RecvWR, WC, the enums) are also the vocabulary of
// the soft engine below, so that a work request goes from PostSend to the wire
// without being converted.
//
// # Getting going
//
// A provider makes devices: provider/soft over a packet path (a UDP
// socket, io_uring, AF_XDP, or packetio/pipe in memory), provider/ibverbs
// over libibverbs. A program opens a Context on a device and builds on it.
// The helpers here remove the boilerplate without hiding the verbs:
//
//   - NewQPSet makes a QP with its PD, CQ, completion channel and
//     registered memory, in order; QPSet.Close destroys them in the reverse
//     order. Every object is a field to use directly.
//   - Endpoint describes one side of a connection (QPN, PSN, GID, MTU,
//     READ/atomic depth, and memory it exposes); NewEndpoint fills it in
//     for a QP. cm.ExchangeEndpoints swaps Endpoints between two processes
//     over TCP (cm.DialEndpoint, cm.AcceptEndpoint).
//   - Connect takes an RC QP from RESET through INIT and RTR to RTS toward
//     a remote Endpoint with the attributes and masks of rdma-core's
//     examples and perftest (timeout 14, retry_cnt 7, rnr_retry 7,
//     min_rnr_timer 12, the smaller MTU of the two sides), each
//     overridable in ConnectOptions; ConnectUD does the same for UD.
//   - PollWait returns completions of a CQ, waiting on its channel without
//     spinning: the poll, arm, poll, wait cycle; it returns the CQ's fatal
//     error (CQ.Err: ErrCQOverrun, ErrDestroyed) instead of waiting on.
//   - PostSendContext and PostRecvContext wait for room in a full queue
//     under a context, beside the non-blocking PostSend and PostRecv.
//
// # Errors
//
// A failed completion is an error where Go programs look: WC.Err returns
// nil or one sentinel per status (ErrRemoteAccess, ErrRetryExceeded,
// ErrFlushed, ...), each a *StatusError, without allocating. Posts refuse
// what would only kill the connection at the peer, naming the field
// (CheckSendWRs: the zero SendWR, an RDMA or atomic request without an
// RKey), with errors matching ErrInvalidWR.
//
// Example_operations and ExamplePollWait are complete programs; package
// verbs/rdmatest gives tests two connected devices in one line.
//
// # Lifetimes
//
// Objects are destroyed as libibverbs destroys them, and close the Go way
// too: every object has a Close method (io.Closer) beside the Destroy,
// Dealloc or Dereg named after its libibverbs call.
//
//   - Destroying what something still uses fails with an error matching
//     ErrBusy and changes nothing (libibverbs' EBUSY): a PD with QPs, MRs,
//     SRQs or AHs; a CQ or an SRQ a QP uses; a completion channel with CQs.
//     Destroy users first: QPs, then AHs, SRQs and MRs, then CQs, then
//     channels and PDs.
//   - Context.Close (ibv_close_device; for a soft device also
//     soft.Device.Close) destroys what is left of the context's objects.
//     Every later call on the context or its objects fails with an error
//     matching ErrDestroyed, except Destroy and Close, which return nil: a
//     second Destroy of anything is harmless.
//   - Destroying a completion channel and closing its context wake every
//     goroutine waiting in CompChannel.Wait (and so PollWait) and in
//     Context.GetAsyncEvent, with an error matching ErrDestroyed.
//   - Destroying a QP completes its outstanding work requests with
//     WR_FLUSH_ERR, which its CQs still deliver.
//
// # Concurrency
//
// Every method of every object may be called from any goroutine.
//
//   - Posts (QP.PostSend, QP.PostRecv, SRQ.PostRecv): posts to one queue
//     from several goroutines are serialised; each post's work requests
//     stay together and in order, but the order between goroutines is
//     whichever posts first. Posts to different QPs do not wait for each
//     other.
//   - Polls (CQ.Poll): several goroutines may poll one CQ; each completion
//     goes to exactly one of them, in the CQ's order within each Poll.
//   - Waits: each event of a completion channel wakes one waiter. A
//     PollWait per CQ, each CQ with its own channel, is the simple
//     arrangement; PollWait consumes the channel's events of other CQs.
//   - Control operations (Create*, Modify, Query, Destroy, Close) may run
//     beside posts and polls. A post that races with the Destroy of its QP
//     (or the Close of its context) either is posted before it and
//     flushed, or fails with ErrDestroyed; a refused Destroy (ErrBusy)
//     leaves the object as it was.
//   - Registered memory belongs to the device from the post that names it
//     until the work request's completion: do not write a buffer a SEND,
//     WRITE or atomic is reading, nor read one a RECV or READ is filling,
//     in between. Memory the peer writes (WRITE, atomics) is the peer's to
//     change at any time; agree on who owns what, as with any RDMA
//     program.
//
// # Atomics
//
// COMP_AND_SWAP and FETCH_AND_ADD act on 8 bytes at an 8-byte aligned
// remote address (the soft provider refuses a misaligned one at post time;
// hardware completes it with an error). The target
// word is in the responder host's byte order, as its CPU reads a uint64
// (binary.NativeEndian); SendWR.CompareAdd and SendWR.Swap are plain
// integers; the original value lands in the 8 bytes of the request's SGE
// in the requester host's byte order. On the wire the operands and the
// original travel big-endian (AtomicETH, AtomicAckETH), as the InfiniBand
// specification says; both providers behave the same (verbstest checks
// it).
//
// # MTU
//
// A port's active MTU (PortAttr.ActiveMTU) is the largest path MTU its
// link carries; a soft device derives it from the link as rdma_rxe does
// (soft.PortMTU: 1024 on a 1500-byte Ethernet, 4096 on 9000), and its
// Modify refuses a path MTU above it with an error naming both, rather
// than letting packets the link cannot carry retry into RETRY_EXC_ERR.
// Connect uses the smaller of the two Endpoints' MTU, which is safe.
package verbs
