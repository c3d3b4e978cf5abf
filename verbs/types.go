package verbs

import (
	"net/netip"
)

// GID is a 128-bit global identifier. For RoCEv2 it is an IPv6 address; an
// IPv4 port's GID is the IPv4-mapped address ::ffff:a.b.c.d.
type GID [16]byte

// GIDFromAddr returns the GID of an IP address (IPv4 addresses mapped).
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the GID as an IP address, IPv4-mapped ones unmapped.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String formats the GID as libibverbs examples do: eight groups of four hex
// digits separated by colons.
func (g GID) String() string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 39)
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hex[g[i]>>4], hex[g[i]&15], hex[g[i+1]>>4], hex[g[i+1]&15])
	}
	return string(b)
}

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at virtual
// address Addr inside the memory region whose local key is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (struct ibv_send_wr). Fields a given opcode
// does not use are ignored.
type SendWR struct {
	WRID   uint64
	SGList []SGE // copied at post time; the slice may be reused afterwards
	Opcode WROpcode
	// FLUSH: placement type (FlushGlobal, FlushPersistent) and selectivity
	// level (FlushRange, FlushMR); see FlushLen. (Here, beside Opcode, they
	// take no room: the struct's padding.)
	FlushType  uint8
	FlushLevel uint8
	Flags      SendFlags
	// Imm is the immediate data of *_WITH_IMM, as the 32-bit value carried on
	// the wire (libibverbs' imm_data is the same bits in network byte order).
	Imm uint32
	// InvalidateRKey is the remote key SEND_WITH_INV invalidates.
	InvalidateRKey uint32
	// RDMA (WRITE, READ) and atomics: the remote address and key.
	RemoteAddr uint64
	RKey       uint32
	// FLUSH: the range [RemoteAddr, RemoteAddr+FlushLen) of RKey's region
	// (FlushLevel FlushRange) or the whole region (FlushMR), made visible
	// (FlushType FlushGlobal) or persistent (FlushPersistent). ATOMIC_WRITE
	// takes its 8 bytes from SGList (one 8-byte SGE, or inline).
	FlushLen uint32
	// Atomics: CompareAdd is the compare value (CMP_AND_SWP) or the addend
	// (FETCH_AND_ADD); Swap the value stored when the compare matches.
	CompareAdd uint64
	Swap       uint64
	// UD: the destination.
	AH         AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// REG_MR: the fast registration (ib_reg_wr). BIND_MW: the type 2
	// window's bind (ibv_mw_bind_info with the window and its new R_Key).
	// Copied at post time.
	Reg  *RegMRWR
	Bind *BindMWWR
	// LOCAL_INV invalidates InvalidateRKey, as SEND_WITH_INV does remotely.
}

// RegMRWR is what a REG_MR work request registers (struct ib_reg_wr): a
// region from PD.AllocMR, whose pages MapSG set, under Key (the MR's index
// part with a new 8-bit key part: IncRKey) with Access.
type RegMRWR struct {
	MR     FastRegMR
	Key    uint32
	Access AccessFlags
}

// BindMWWR binds a memory window (struct ibv_mw_bind with its
// ibv_mw_bind_info): Length bytes of MR at Addr, with Access, under RKey.
// For a type 2 window (a BIND_MW work request) RKey is the window's new key
// (IncRKey of its current one); QP.BindMW picks it for a type 1 window. An
// MR of nil or a zero Length unbinds a type 1 window.
type BindMWWR struct {
	MW     MW
	RKey   uint32
	MR     MR
	Addr   uint64
	Length uint64
	Access AccessFlags
}

// MW is a memory window (struct ibv_mw).
type MW interface {
	RKey() uint32
	Type() MWType
	// Dealloc releases the window (ibv_dealloc_mw).
	Dealloc() error
	// Close is Dealloc, for io.Closer.
	Close() error
}

// MWAllocator is a PD that allocates memory windows (ibv_alloc_mw).
type MWAllocator interface {
	AllocMW(t MWType) (MW, error)
}

// MWBinder is a QP that binds type 1 windows (ibv_bind_mw): the bind goes
// as a work request through the send queue (its completion is WCBindMW
// with wrid), and the window's new R_Key is returned. b.RKey is ignored.
type MWBinder interface {
	BindMW(b *BindMWWR, wrid uint64, flags SendFlags) (rkey uint32, err error)
}

// FastRegMR is a region for fast registration (ib_alloc_mr of type
// IB_MR_TYPE_MEM_REG): it starts FREE (its keys work nowhere), MapSG gives
// it pages, a REG_MR work request makes it VALID under a key, and LOCAL_INV
// or a remote SEND_WITH_INV makes it FREE again.
type FastRegMR interface {
	MR
	// MapSG maps the memory the SGEs name (in regions registered in the
	// same PD; ib_map_mr_sg) as the MR's pages, in order from the first
	// SGE's address, which becomes the MR's address. It returns how many
	// SGEs it mapped.
	MapSG(sges []SGE) (int, error)
}

// FastRegAllocator is a PD that allocates fast-registration regions of at
// most maxPages pages (ib_alloc_mr).
type FastRegAllocator interface {
	AllocMR(maxPages int) (FastRegMR, error)
}

// McastAttacher is a UD QP that joins multicast groups (ibv_attach_mcast,
// ibv_detach_mcast): packets to the group's GID and QPN 0xFFFFFF reach it.
type McastAttacher interface {
	AttachMcast(gid GID, lid uint16) error
	DetachMcast(gid GID, lid uint16) error
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID   uint64
	SGList []SGE // copied at post time
}

// WC is a work completion (struct ibv_wc).
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	// Imm is the immediate data (valid with WCFlagWithImm), as carried on the
	// wire; InvalidatedRKey shares its place in libibverbs.
	Imm             uint32
	InvalidatedRKey uint32
	QPNum           uint32
	SrcQP           uint32
	Flags           WCFlags
	PKeyIndex       uint16
	SLID            uint16
	SL              uint8
	DLIDPathBits    uint8
	// Timestamp is when the provider produced the completion, in
	// nanoseconds on the clock of Now, or 0 when the provider does not
	// stamp completions (DeviceAttr.CompletionTimestamps says which kind
	// a device gives).
	Timestamp int64
}

// AHAttr describes a destination (struct ibv_ah_attr with its GRH, as RoCE
// uses it): the GID, and the traffic class, flow label and hop limit.
type AHAttr struct {
	DGID         GID
	SGIDIndex    uint8
	TrafficClass uint8
	FlowLabel    uint32
	HopLimit     uint8
	PortNum      uint8
}

// AH is an address handle: a destination a provider has resolved.
type AH interface {
	Attr() AHAttr
	// Destroy destroys the AH (ibv_destroy_ah). The providers' AHs also
	// have Close (io.Closer), which is Destroy; the interface does not ask
	// for it, so that a destination the engine is handed needs only Attr
	// and Destroy.
	Destroy() error
}

// QPCap holds a queue pair's capacities (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// QPAttr holds the attributes ibv_modify_qp sets and ibv_query_qp reports
// (struct ibv_qp_attr); QPAttrMask says which a call uses.
type QPAttr struct {
	State           QPState
	CurState        QPState
	PathMTU         MTU
	QKey            uint32
	RQPSN           uint32
	SQPSN           uint32
	DestQPN         uint32
	AccessFlags     AccessFlags
	Cap             QPCap
	AHAttr          AHAttr
	PKeyIndex       uint16
	MaxRdAtomic     uint8 // max_rd_atomic: READ/atomic requests outstanding as initiator
	MaxDestRdAtomic uint8 // max_dest_rd_atomic: as responder
	MinRNRTimer     uint8 // RNR NAK timer code this QP asks senders to wait
	PortNum         uint8
	Timeout         uint8 // local ACK timeout: 4.096 us x 2^Timeout (0: infinite)
	RetryCnt        uint8
	RNRRetry        uint8 // 7: retry forever
}

// QPInitAttr describes a queue pair to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	SendCQ   CQ
	RecvCQ   CQ
	SRQ      SRQ
	Cap      QPCap
	QPType   QPType
	SQSigAll bool // every send WR produces a completion, SIGNALED or not
}
