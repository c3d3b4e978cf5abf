// Package rdmacm connects RC queue pairs the way Linux's rdma_cm does: the
// InfiniBand communication manager's protocol (REQ, REP, RTU, REJ, MRA,
// DREQ, DREP in MADs on QP 1, the GSI) with rdma_cm's conventions on top
// (port-space service IDs, the 36-byte private-data header, listener
// matching by port and address). Linux's rping, perftest -R and any other
// librdmacm program can connect to goroce, and goroce to them.
//
// # The Go API
//
// In the style of package net, with connections that own their verbs
// objects (a context, PD, completion channel, CQ, registered memory and
// the RC QP, built from ConnOptions; Close disconnects, then frees them
// in order):
//
//	l, err := rdmacm.Listen(ctx, dev, ":7174")
//	c, err := l.AcceptConn(ctx, &rdmacm.ConnOptions{Recvs: 16}) // receives posted first
//
//	c, err := rdmacm.DialConn(ctx, dev, "192.0.2.10:7174", nil)
//	r := c.Remote()                       // the memory the peer offered (a RemoteBuffer)
//	err = c.Post(ctx, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: c.SGE(0, 64),
//		RemoteAddr: r.Addr, RKey: r.RKey, Flags: verbs.SendSignaled})
//	wc, err := c.Wait(ctx)                // the completion; err is wc.Err() when it failed
//	c.Close()
//
// Each side's private data starts with an offer of its memory (OfferMagic
// and a RemoteBuffer, unless ConnOptions.NoOffer); what the application
// adds arrives exactly as long as it was sent when both sides are goroce
// (the REQ and REP say how long in a byte Linux leaves reserved).
//
// With a QP of your own:
//
//	l, err := rdmacm.Listen(ctx, dev, ":7174")
//	req, err := l.Accept(ctx)            // peer address, private data, requested depths
//	conn, err := req.Accept(ctx, qp, rdmacm.AcceptOptions{})  // or req.Reject(privateData)
//
//	conn, err := rdmacm.Dial(ctx, dev, "192.0.2.10:7174", qp, rdmacm.DialOptions{})
//	<-conn.Done()                         // the peer disconnected
//	conn.Close()                          // DREQ, DREP (bounded wait)
//
// Both sides bring the QP from RESET to RTS themselves, with attributes
// derived from the REQ and REP as Linux's ib_cm derives them (QPPlan): the
// passive side before its REP leaves, the active side before its RTU. Post
// the receives the peer's first messages need before Dial or Accept.
// Errors match ErrRefused (any REJ; a *RejectError has the reason and the
// private data), ErrUnreachable and ErrTimedOut (no answer),
// ErrDisconnected, ErrClosed; contexts cancel every wait.
//
// Failures are fast: a soft device answers a REQ with REJ 8 (no listener)
// from the moment it opens, whether a connection manager runs on it or
// not; a dial's REQs leave from a socket of its own (on Linux, in the
// calling thread's network namespace), so that a send the routing table
// refuses fails the dial at once and ICMP errors (a host with no RoCE
// device) fail it within about 650 ms (UnreachableGrace), as a *PathError
// matching ErrUnreachable and the errno; the first REQ is resent after
// 50 and 100 ms and then every 100 ms until Linux's first resend
// (MachineConfig.QuickRetry), so a server that comes up a moment after the
// dial is found a moment later; a server that was unreachable and now
// refuses is asked again, as the same connection, for a second
// (RefusedGrace, and DialOptions.RetryRefused for a client that may start
// before its server's listener).
//
// A device needs a QP 1 for this (the Device interface): the soft
// provider's devices have one. On the ibverbs provider the kernel owns QP 1
// and connections would go through librdmacm, which this package does not
// do.
//
// # Layers
//
// Package cm/ib is the wire format. Machine is the protocol, sans I/O:
// MADs, application calls and the time go in; MADs to send, events and
// deadlines come out, so that it is tested on a manual clock and fuzzed.
// Manager runs a Machine for a device on its own goroutine, fed by the
// device's QP 1; it is attached to the device (Attach) and closes with it.
//
// # Protocol details
//
//   - Timers as Linux's: a REQ is resent every 2 x ms(packet life time 18)
//     plus ms(CM response timeout 20), 6.4 s, 15 times, before the dialer
//     reports the peer unreachable; REP and DREQ likewise. ms(t) is
//     4.096 µs x 2^t.
//   - A duplicate REQ while the application decides is answered with an
//     MRA (service timeout 22), a duplicate REP of an established
//     connection with the RTU again, a DREQ for an unknown or closed
//     connection with a DREP.
//   - REJ reasons: 8 no listener for the service ID (or address), 28 the
//     application refused (or its listener closed, or its backlog was
//     full), 10 a REQ from a QPN still in time-wait (2 s), 4 the
//     application did not answer within the MRA timeout, or a REP was
//     never answered.
//   - Messages are matched by comm IDs (random, non-zero) and the sender's
//     address; anything else is dropped and counted (Stats), and moves no
//     QP.
//   - Starting PSNs are random; each side advertises the PSN it receives.
package rdmacm
