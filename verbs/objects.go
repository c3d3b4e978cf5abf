package verbs

import (
	"context"
	"errors"
)

// Errors common to providers. Provider errors wrap them, so errors.Is works.
var (
	ErrNotSupported  = errors.New("verbs: not supported")
	ErrInvalidState  = errors.New("verbs: invalid QP state for this operation")
	ErrInvalidAttr   = errors.New("verbs: invalid attribute")
	ErrQueueFull     = errors.New("verbs: queue full")
	ErrInvalidWR     = errors.New("verbs: invalid work request")
	ErrNoDevice      = errors.New("verbs: no such device")
	ErrResourceLimit = errors.New("verbs: resource limit reached")
	ErrDestroyed     = errors.New("verbs: object destroyed")
	// ErrBusy: an object cannot be destroyed while another uses it (a PD
	// with QPs, MRs, SRQs or AHs; a CQ or SRQ a QP uses; a completion
	// channel with CQs), as libibverbs' ibv_destroy_* and ibv_dealloc_pd
	// answer EBUSY. The refused call changes nothing.
	ErrBusy = errors.New("verbs: object in use")
)

// Device is an RDMA device a provider found (struct ibv_device).
type Device interface {
	Name() string
	GUID() uint64
	Open() (Context, error)
}

// DeviceAttr holds device attributes (a subset of struct ibv_device_attr).
type DeviceAttr struct {
	FWVer           string
	NodeGUID        uint64
	SysImageGUID    uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int
	MaxQPWR         int
	MaxSGE          int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxMRSize       uint64
	MaxPD           int
	MaxQPRdAtom     int
	MaxQPInitRdAtom int
	MaxSRQ          int
	MaxSRQWR        int
	MaxAH           int
	AtomicCap       int // 0 none, 1 HCA (atomic within the device), 2 global
	PhysPortCnt     int
	// CompletionTimestamps says whether and how the device stamps its
	// work completions (WC.Timestamp).
	CompletionTimestamps TimestampKind
	// CapFlags are the device's capability flags (memory windows, fast
	// registration, FLUSH and ATOMIC_WRITE among them).
	CapFlags DeviceCap
}

// TimestampKind says where a device's completion timestamps come from.
type TimestampKind uint8

// Completion timestamp kinds.
const (
	// TimestampNone: completions carry no timestamp (WC.Timestamp is 0).
	TimestampNone TimestampKind = iota
	// TimestampSoftware: the provider reads the host clock (Now) when it
	// produces the completion, not when the application polls it.
	TimestampSoftware
	// TimestampHardware: the device stamps completions with its own
	// clock (libibverbs' completion timestamps), converted to Now's.
	TimestampHardware
)

// String returns "none", "software" or "hardware".
func (k TimestampKind) String() string {
	return name([]string{"none", "software", "hardware"}, int(k), "TimestampKind")
}

// PortState is a port's logical state (enum ibv_port_state).
type PortState uint8

// Port states.
const (
	PortNop    PortState = 0
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

// String returns "PORT_ACTIVE" and so on, as ibv_devinfo prints them.
func (s PortState) String() string {
	return name([]string{"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE"}, int(s), "PortState")
}

// PortAttr holds port attributes (a subset of struct ibv_port_attr).
type PortAttr struct {
	State      PortState
	MaxMTU     MTU
	ActiveMTU  MTU
	GIDTblLen  int
	PKeyTblLen int
	LID        uint16
	LinkLayer  string // "Ethernet" for RoCE
}

// Context is an open device (struct ibv_context).
type Context interface {
	Device() Device
	QueryDevice() (DeviceAttr, error)
	QueryPort(port uint8) (PortAttr, error)
	QueryGID(port uint8, index int) (GID, error)
	AllocPD() (PD, error)
	CreateCompChannel() (CompChannel, error)
	// CreateCQ creates a completion queue of at least cqe entries, reporting
	// events to ch when armed (ch may be nil).
	CreateCQ(cqe int, ch CompChannel) (CQ, error)
	// GetAsyncEvent blocks until an asynchronous event of an object created
	// through this context arrives, and returns it (ibv_get_async_event;
	// events need no acknowledgement here), or ctx's error when ctx ends
	// first.
	GetAsyncEvent(ctx context.Context) (AsyncEvent, error)
	// Close closes the context (ibv_close_device). Objects made through it
	// are destroyed with it; every later call on them fails with an error
	// matching ErrDestroyed (their Destroy, Dealloc, Dereg and Close
	// return nil), and waiters in CompChannel.Wait and GetAsyncEvent wake
	// with that error.
	Close() error
}

// PD is a protection domain.
type PD interface {
	// RegMR registers buf. Its address is the MR's virtual address, as with
	// ibv_reg_mr. The MR keeps buf alive; do not use buf for anything the
	// remote side must not see until Dereg.
	RegMR(buf []byte, access AccessFlags) (MR, error)
	CreateQP(attr *QPInitAttr) (QP, error)
	CreateSRQ(maxWR, maxSGE int) (SRQ, error)
	CreateAH(attr *AHAttr) (AH, error)
	// Dealloc releases the PD (ibv_dealloc_pd). It fails with an error
	// matching ErrBusy while QPs, MRs, SRQs or AHs of the PD live.
	Dealloc() error
	// Close is Dealloc, for io.Closer.
	Close() error
}

// MR is a registered memory region.
type MR interface {
	LKey() uint32
	RKey() uint32
	Addr() uint64 // virtual address of Buf()[0]
	Buf() []byte
	// Dereg deregisters the region (ibv_dereg_mr): its keys stop working.
	Dereg() error
	// Close is Dereg, for io.Closer.
	Close() error
}

// CQ is a completion queue.
type CQ interface {
	// Poll moves up to len(wc) completions into wc and returns how many.
	Poll(wc []WC) int
	// ReqNotify arms the CQ: the next completion (the next solicited or error
	// one with solicitedOnly) raises one event on its channel.
	ReqNotify(solicitedOnly bool) error
	// Err returns nil while the CQ works, else why it will give no more
	// completions: an error matching ErrCQOverrun (a completion found it
	// full and was lost: the CQ is in error, as IBV_EVENT_CQ_ERR says) or
	// ErrDestroyed (the CQ was destroyed, or its context or device
	// closed). The completions it held can still be polled. An error
	// wakes the CQ's completion channel, so that PollWait returns it.
	Err() error
	// Destroy destroys the CQ (ibv_destroy_cq). It fails with an error
	// matching ErrBusy while a QP uses the CQ.
	Destroy() error
	// Close is Destroy, for io.Closer.
	Close() error
}

// CompChannel delivers completion events (struct ibv_comp_channel).
type CompChannel interface {
	// Wait blocks until an armed CQ of the channel raised an event, and
	// returns it (ibv_get_cq_event; events need no acknowledgement here).
	// It returns ctx's error when ctx ends first, and an error matching
	// ErrDestroyed when the channel is destroyed or its context or device
	// closed, which wakes every waiter.
	Wait(ctx context.Context) (CQ, error)
	// Destroy destroys the channel (ibv_destroy_comp_channel). It fails with
	// an error matching ErrBusy while CQs report to it.
	Destroy() error
	// Close is Destroy, for io.Closer.
	Close() error
}

// QP is a queue pair.
type QP interface {
	Num() uint32
	Type() QPType
	// Modify changes the attributes mask names (ibv_modify_qp).
	Modify(attr *QPAttr, mask QPAttrMask) error
	Query() (QPAttr, error)
	// PostSend posts wrs in order. It returns how many were posted; when
	// that is fewer than len(wrs), wrs[n] is the bad WR (bad_wr) and the
	// error says what is wrong with it.
	PostSend(wrs []SendWR) (int, error)
	// PostRecv posts receive WRs, with the same contract as PostSend.
	PostRecv(wrs []RecvWR) (int, error)
	// Destroy destroys the QP (ibv_destroy_qp): its outstanding work is
	// flushed, and its CQs, SRQ and PD may then be destroyed.
	Destroy() error
	// Close is Destroy, for io.Closer.
	Close() error
}

// SRQ is a shared receive queue.
type SRQ interface {
	PostRecv(wrs []RecvWR) (int, error)
	// Destroy destroys the SRQ (ibv_destroy_srq). It fails with an error
	// matching ErrBusy while a QP uses it.
	Destroy() error
	// Close is Destroy, for io.Closer.
	Close() error
}
