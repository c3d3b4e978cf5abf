// Package engine is goroce's RoCEv2 transport, sans I/O: requester, responder
// and completer for RC, and UD, after IBA chapter 9 as Linux's rdma_rxe
// implements it. It never blocks, starts no goroutine, makes no system call
// and reads no clock (but the one Config.Clock may give it to stamp work
// completions): a driver feeds it received packets (Input), asks it for
// packets to send (Output, writing into buffers the driver lends), and calls
// it back at NextDeadline for its timers. Everything takes now, in
// nanoseconds of any monotonic clock.
//
// An Engine is owned by one goroutine. The application reaches it through
// lock-free single-producer/single-consumer rings: it posts work requests into
// a QP's send and receive rings (SQ, RQ, SRQ) and polls completions out of
// a CQ ring, without taking a lock the engine holds. Control operations
// (creating and modifying QPs, registering memory) go through the Engine's
// methods and must be serialised with the driver by the caller.
//
// Device limits (Config.MaxQP and the rest, as struct ibv_device_attr names
// them) bound what the engine creates; a request beyond one fails with a
// *LimitError, which matches verbs.ErrResourceLimit. Asynchronous events
// (a CQ overrun, a responder error that took a QP to ERROR) go to
// Config.OnAsyncEvent.
//
// Memory regions hold the []byte they cover: the slice keeps the memory alive
// for the garbage collector, and Go never moves heap memory, so the address
// the MR reports (the address of its first byte, as ibv_reg_mr reports) stays
// valid until the MR is deregistered and the last reference dropped.
//
// # Files
//
// The engine is laid out by role, as rdma_rxe's drivers/infiniband/sw/rxe:
//
//   - engine.go: Config, Stats, the Engine, Input (parse, ICRC, dispatch to
//     the QP), timers (NextDeadline, Tick) and finish, which seals a packet,
//     or in an output batch (BeginOutputBatch) parks it to seal four packets
//     of a flow together; DiffICRC4 checks four received ones together.
//   - qp.go: the QP: creation, Modify and its state machine, posting
//     (PostSend, PostRecv), flush; and the output arbiter: Output and
//     OutputFrom pick, round-robin over the active QPs, the QP that sends
//     next, and QP.output its packet, responses before requests.
//   - requester.go: send WQEs become request packets (reqOutput, startWQE;
//     rxe_req.c); askLast decides which ask for an ACK (every AckEvery
//     packets, and a message's last when it ends a burst, is signaled, or
//     no ACK is awaited), where rdma_rxe asks on every message's last.
//   - responder.go: request packets are executed and answered (rxe_resp.c):
//     respond checks the PSN and the opcode sequence, then one function per
//     operation family executes: respSend, respWrite, respRead, respAtomic,
//     and duplicate for requests seen before; respOutput sends the queued
//     ACKs, NAKs, READ responses and ATOMIC acknowledgements.
//   - completer.go: responses become completions (rxe_comp.c): complete
//     dispatches ACKs and NAKs (completeAck), READ responses (completeRead)
//     and ATOMIC acknowledgements (completeAtomic); acked retires WQEs,
//     rewind and timeoutExpired resend (go-back-N), fatal and completeError
//     fail them.
//   - ud.go: UD send (udOutput) and receive (udReceive).
//   - sg.go: gather and scatter between work requests and memory regions.
//   - cq.go: the completion queue, pushWC and CQ overrun handling.
//   - ring.go: the send and receive queues the application posts into.
//   - mr.go, limits.go, async.go, icrc.go: memory regions, device limits,
//     asynchronous events, the ICRC flow caches.
package engine
