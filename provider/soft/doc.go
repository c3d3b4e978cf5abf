// Package soft is goroce's software RDMA provider: verbs over the pure-Go
// RoCEv2 engine (package engine) and a packet path (package packetio).
//
// A Device is bound to one local IPv4 address, as rdma_rxe binds a network
// device, and its GID table holds the IPv4-mapped GID of that address (index
// 0). One goroutine per device drives the engine: it receives packets, lets
// the engine answer and send, and runs its timers. The application reaches the
// engine through lock-free rings: PostSend and PostRecv copy work requests
// into a QP's rings, and a PostSend rings a doorbell (a receive gives the
// driver nothing to do); Poll takes completions out of a CQ's ring. Neither waits for a lock the driver holds. Control operations (creating
// and modifying objects) take the device's mutex, which the driver holds
// while it runs the engine.
//
// The driver spins for a short while (Options.Spin) after the last packet or
// doorbell, then blocks in the packet path until a packet, a timer or a
// doorbell wakes it: an idle device uses no CPU.
//
// The application's goroutines help: when the driver is not using the packet
// path, a PostSend sends what it made ready (one batch at most) and a Poll
// that finds its CQ empty receives what has arrived, each from the caller's
// goroutine, which saves two hand-offs between goroutines per message
// (Options.NoInline turns this off). A post to an RC QP that has packets in
// flight is corked, as Nagle's algorithm holds a TCP segment back: the
// flight's ACK, taken in by the driver or by a Poll, sends it with the posts
// that followed (the retransmission timer does if the ACK is lost), and so
// does the post that makes 48 packets wait (three quarters of a GSO
// message), instead of a system call and a driver wake-up per post. The
// signaled post whose completion the application waits for next is never
// corked, and a Poll that finds its CQ empty sends a corked run of 8
// packets or more (see kickQP). The responder holds the ACK of a message
// that completed a receive for up to DefaultAckDelay, so that the reply the
// application is likely to post carries it in the same batch. Close
// completes every outstanding work request with WR_FLUSH_ERR.
//
// Limits (Options.Engine: max_qp, max_cq, max_qp_wr and the rest) are
// enforced with errors matching verbs.ErrResourceLimit and reported by
// QueryDevice; asynchronous events (IBV_EVENT_CQ_ERR on a CQ overrun,
// IBV_EVENT_QP_FATAL, IBV_EVENT_QP_ACCESS_ERR, IBV_EVENT_QP_REQ_ERR) reach
// the context that created the object through Context.GetAsyncEvent.
//
// Every work completion carries the time the engine produced it
// (WC.Timestamp, on verbs.Now's clock; QueryDevice reports
// verbs.TimestampSoftware): a receive is stamped as its packet is
// processed, however late the application polls.
//
// Source ports: every packet leaves from Options.SourcePort (4791) but UD
// sends whose address handle has a flow label, which leave from the port
// the label maps to (wire.SourcePort), as from rdma_rxe and RoCE NICs, when
// the packet path can send each packet from a port of its own
// (packetio.SourcePorts: udp, afxdp and pipe can, uring cannot).
//
// Lifetimes follow libibverbs (see package verbs): destroying a PD, CQ,
// completion channel or SRQ still in use fails with verbs.ErrBusy and
// changes nothing; Context.Close destroys what is left of the context's
// objects; after it, or after Device.Close, every call fails with
// verbs.ErrDestroyed (Destroy and Close return nil), and the goroutines
// waiting in CompChannel.Wait or GetAsyncEvent wake with that error.
//
// The port's active MTU comes from the link, as rdma_rxe's comes from its
// network device (PortMTU: the largest IB MTU not above the link's MTU less
// 80 bytes, so 1024 on a 1500-byte Ethernet and 4096 on 9000), capped by
// what the packet path carries; Modify refuses a larger path MTU with an
// error naming both. If the network still refuses a packet as too long
// (EMSGSIZE: a route with a smaller MTU), the QP that sent it goes to ERROR
// at once, its context gets IBV_EVENT_QP_FATAL, and QP.Err and its later
// posts say which packet and MTU.
//
// Registered memory: an MR holds the []byte it covers; the slice keeps the
// memory alive and Go does not move heap memory, so the MR's address (that
// of its first byte, as ibv_reg_mr reports) stays valid for the engine until
// Dereg. Do not register stack memory that may move: allocate buffers with
// make.
package soft
