// Package ibverbs is goroce's verbs API over libibverbs (rdma-core), for
// RDMA NICs (mlx5, irdma, bnxt_re, ...) and the kernel's soft-RoCE, rdma_rxe:
// the same verbs.Context, PD, MR, CQ, QP, SRQ and AH as provider/soft, so a
// program moves between the two by changing a device name.
//
// The provider is thin: every call is the libibverbs verb of the same name,
// values pass through 1:1, and no protocol logic lives here. Errors name the
// verb that failed, carry its errno (errors.Is(err, syscall.EINVAL)) and wrap
// the verbs sentinels (verbs.ErrInvalidAttr, verbs.ErrNotSupported,
// verbs.ErrQueueFull, ...).
//
// # Building
//
// The provider uses cgo and is compiled only with the build tag ibverbs (and
// cgo on Linux); without it the package holds only this documentation and
// goroce builds as pure Go (CGO_ENABLED=0 works). It needs libibverbs'
// headers and library, on Debian and Ubuntu the package libibverbs-dev:
//
//	apt-get install libibverbs-dev
//	go build -tags ibverbs ./...
//	go test -tags ibverbs ./provider/ibverbs
//
// A binary built so runs where libibverbs.so.1 and a device are: ibv_devices
// lists what it will see. On a machine without an RDMA device the tests skip
// and say so.
//
// # Files
//
// One file per libibverbs object, each with the verb that makes it:
//
//	device.go   Provider, Device, List and Open (ibv_get_device_list, ibv_open_device)
//	context.go  Context: QueryDevice, QueryPort, Close, the lifetimes of what it made
//	gid.go      the GID table: QueryGID, QueryGIDEntry, GIDIndexOf
//	pd.go       PD (ibv_alloc_pd)
//	mr.go       MR (ibv_reg_mr), Alloc and Free
//	cq.go       CQ (ibv_create_cq), Poll, ReqNotify
//	cqex.go     extended CQs (ibv_create_cq_ex): CreateCQEx, PollEx, WCEx
//	channel.go  CompChannel (ibv_create_comp_channel), Wait
//	events.go   GetAsyncEvent, and the waits on libibverbs' descriptors
//	qp.go       QP (ibv_create_qp), Modify, Query
//	post.go     PostSend and PostRecv: the batches of work requests and their
//	            scatter/gather lists, shared with the SRQ
//	srq.go      SRQ (ibv_create_srq)
//	ah.go       AH (ibv_create_ah)
//	errors.go   Error, and the verbs sentinels an errno maps to
//	shim.h      the C shim's declarations, included by every Go file
//	shim.c      the C shim: errno folding, flat work requests and
//	            completions, one call per batch
//
// shim.c and shim.h carry the same build constraint as the Go files, so a
// build without the tag (or with CGO_ENABLED=0) compiles none of them.
//
// # Devices
//
// Provider lists the devices libibverbs reports, under their names (rxe0,
// mlx5_0, ...); register it in a verbs.Registry beside the soft devices to
// open either by name.
//
// # Work requests and completions
//
// PostSend, PostRecv and the SRQ's PostRecv make one cgo call per batch of
// up to 64 work requests: the Go work requests are copied into scratch
// memory the QP allocated in C, linked there and handed to ibv_post_send in
// one list. Poll makes one cgo call per batch of up to 64 completions. A QP
// or CQ serialises its own posts or polls with a mutex (the scratch memory is
// per object); neither allocates.
//
// # Memory
//
// ibv_reg_mr pins the pages of an MR and the device reads and writes them
// while the MR lives, outside the Go runtime's knowledge. Alloc returns
// memory mapped with mmap, outside the Go heap, that the garbage collector
// neither moves nor frees: register that. RegMR also accepts Go heap memory
// (the Go collector does not move heap objects, and the MR keeps the slice
// reachable until Dereg), but not memory that may live on a goroutine stack,
// which moves when the stack grows.
//
// # Completion channels
//
// A CompChannel's file descriptor is put in non-blocking mode and waited on
// through the Go runtime's network poller, so Wait(ctx) parks only its
// goroutine and returns when ctx ends. Every event Wait returns is
// acknowledged at once (ibv_ack_cq_events), so a CQ can always be destroyed.
// Context.GetAsyncEvent waits on the device's asynchronous event descriptor
// the same way (ibv_get_async_event, then ibv_ack_async_event) and names the
// CQ, QP or SRQ of the event.
//
// # Lifetimes
//
// The verbs that destroy (ibv_dealloc_pd, ibv_destroy_cq,
// ibv_destroy_comp_channel, ibv_destroy_srq, ...) refuse objects still in
// use with EBUSY: the error matches verbs.ErrBusy and the Go object stays
// as it was. Context.Close destroys the objects made through the context
// that are still alive, users first, before ibv_close_device; every later
// call on them fails with verbs.ErrDestroyed instead of reaching freed
// libibverbs memory, and Wait and GetAsyncEvent waiters wake with that
// error. Each object guards its libibverbs pointer with its own mutex, so
// a Destroy racing with a post, poll or modify of the same object is safe.
//
// # Extended CQs
//
// CreateCQEx creates a CQ with ibv_create_cq_ex; with CQExOptions.Timestamp
// (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) or Wallclock
// (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) each completion carries the
// device's timestamp. A device without them (rdma_rxe has none) makes
// CreateCQEx return an error matching verbs.ErrNotSupported.
//
// Completion timestamps: on a device that has them (ibv_query_device_ex
// reports a non-zero completion_timestamp_mask, and an extended CQ with
// wall-clock timestamps can be made) CreateCQ makes every CQ that way, Poll
// fills WC.Timestamp with the completion's wall-clock nanoseconds and
// QueryDevice reports verbs.TimestampHardware; elsewhere (rdma_rxe)
// verbs.TimestampNone and WC.Timestamp 0.
package ibverbs
