package verbs

import "strconv"

// WCStatus is a work completion status (enum ibv_wc_status).
type WCStatus uint8

// Work completion statuses.
const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocEECOpErr    WCStatus = 3
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCMWBindErr      WCStatus = 6
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCLocRDDViolErr  WCStatus = 14
	WCRemInvRDReqErr WCStatus = 15
	WCRemAbortErr    WCStatus = 16
	WCInvEECNErr     WCStatus = 17
	WCInvEECStateErr WCStatus = 18
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = [...]string{"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
	"WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR",
	"REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR",
	"REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR"}

// String returns the status name as ibv_wc_status_str spells it in the enum
// (e.g. "REM_ACCESS_ERR").
func (s WCStatus) String() string { return name(wcStatusNames[:], int(s), "WCStatus") }

// WCOpcode is a work completion opcode (enum ibv_wc_opcode).
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCFlush           WCOpcode = 8  // IBV_WC_FLUSH
	WCAtomicWrite     WCOpcode = 9  // IBV_WC_ATOMIC_WRITE
	WCRegMR           WCOpcode = 10 // IB_WC_REG_MR (a fast-register WR; kernel verbs only in libibverbs)
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// String returns the opcode name, e.g. "RDMA_WRITE", "RECV_RDMA_WITH_IMM".
func (o WCOpcode) String() string {
	switch o {
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return name([]string{"SEND", "RDMA_WRITE", "RDMA_READ", "COMP_SWAP", "FETCH_ADD", "BIND_MW", "LOCAL_INV", "TSO",
		"FLUSH", "ATOMIC_WRITE", "REG_MR"}, int(o), "WCOpcode")
}

// WCFlags are work completion flags (enum ibv_wc_flags).
type WCFlags uint32

// Work completion flags.
const (
	WCFlagGRH      WCFlags = 1 << 0 // the receive buffer starts with a 40-byte GRH
	WCFlagWithImm  WCFlags = 1 << 1 // Imm is valid
	WCFlagIPCsumOK WCFlags = 1 << 2
	WCFlagWithInv  WCFlags = 1 << 3 // InvalidatedRKey is valid
)

// WROpcode is a send work request opcode (enum ibv_wr_opcode).
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRLocalInv          WROpcode = 7
	WRBindMW            WROpcode = 8
	WRSendWithInv       WROpcode = 9
	// WRFlush asks the responder to make earlier writes to a range (or a
	// whole region) visible or persistent (IBV_WR_FLUSH, IBA A19).
	WRFlush WROpcode = 14
	// WRAtomicWrite writes 8 bytes atomically (IBV_WR_ATOMIC_WRITE).
	WRAtomicWrite WROpcode = 15
	// WRRegMR fast-registers a memory region (IB_WR_REG_MR, a kernel verb:
	// libibverbs has none).
	WRRegMR WROpcode = 0x20
)

// String returns the opcode name, e.g. "RDMA_WRITE_WITH_IMM".
func (o WROpcode) String() string {
	switch o {
	case WRFlush:
		return "FLUSH"
	case WRAtomicWrite:
		return "ATOMIC_WRITE"
	case WRRegMR:
		return "REG_MR"
	}
	return name([]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ",
		"ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV"}, int(o), "WROpcode")
}

// Placement types of a FLUSH (SendWR.FlushType; enum ib_placement_type).
const (
	FlushGlobal     uint8 = 1 << 0 // global visibility
	FlushPersistent uint8 = 1 << 1 // persistence
)

// Selectivity levels of a FLUSH (SendWR.FlushLevel; enum
// ib_selectivity_level).
const (
	FlushRange uint8 = 0 // RemoteAddr and FlushLen
	FlushMR    uint8 = 1 // the whole region RKey names
)

// MWType is a memory window type (enum ibv_mw_type).
type MWType uint8

// Memory window types.
const (
	MWType1 MWType = 1 // bound with QP.BindMW (ibv_bind_mw); cannot be invalidated
	MWType2 MWType = 2 // bound with a BIND_MW work request to one QP; invalidated remotely or locally
)

// DeviceCap is a set of device capability flags (enum ibv_device_cap_flags
// and the extended flags of ibv_query_device_ex).
type DeviceCap uint64

// Device capabilities.
const (
	DeviceCapRCRNRNAKGen      DeviceCap = 1 << 12
	DeviceCapMemWindow        DeviceCap = 1 << 17
	DeviceCapMemMgtExtensions DeviceCap = 1 << 21 // fast registration, LOCAL_INV, SEND_WITH_INV
	DeviceCapMemWindowType2A  DeviceCap = 1 << 23
	DeviceCapMemWindowType2B  DeviceCap = 1 << 24
	DeviceCapFlushGlobal      DeviceCap = 1 << 38 // IB_UVERBS_DEVICE_FLUSH_GLOBAL
	DeviceCapFlushPersistent  DeviceCap = 1 << 39 // IB_UVERBS_DEVICE_FLUSH_PERSISTENT
	DeviceCapAtomicWrite      DeviceCap = 1 << 40 // IB_UVERBS_DEVICE_ATOMIC_WRITE
)

// IncRKey returns key with its low 8 bits (the key part a consumer owns)
// advanced by one, the index part kept (ibv_inc_rkey, ib_inc_rkey).
func IncRKey(key uint32) uint32 { return key&^0xFF | (key+1)&0xFF }

// SendFlags are send work request flags (enum ibv_send_flags).
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
	SendIPCsum    SendFlags = 1 << 4
)

// AccessFlags are memory region and QP access flags (enum ibv_access_flags).
type AccessFlags uint32

// Access flags.
const (
	AccessLocalWrite   AccessFlags = 1 << 0
	AccessRemoteWrite  AccessFlags = 1 << 1
	AccessRemoteRead   AccessFlags = 1 << 2
	AccessRemoteAtomic AccessFlags = 1 << 3
	AccessMWBind       AccessFlags = 1 << 4
	AccessZeroBased    AccessFlags = 1 << 5
	AccessOnDemand     AccessFlags = 1 << 6
	// AccessFlushGlobal and AccessFlushPersistent let a remote FLUSH of
	// that placement type name the region (IB_ACCESS_FLUSH_*), and a QP
	// take such FLUSHes.
	AccessFlushGlobal     AccessFlags = 1 << 8
	AccessFlushPersistent AccessFlags = 1 << 9
)

// QPState is a queue pair state (enum ibv_qp_state).
type QPState uint8

// Queue pair states.
const (
	QPSReset QPState = 0
	QPSInit  QPState = 1
	QPSRTR   QPState = 2
	QPSRTS   QPState = 3
	QPSSQD   QPState = 4
	QPSSQE   QPState = 5
	QPSErr   QPState = 6
)

// String returns "RESET", "INIT", "RTR", "RTS", "SQD", "SQE" or "ERR".
func (s QPState) String() string {
	return name([]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}, int(s), "QPState")
}

// QPType is a queue pair transport type (enum ibv_qp_type).
type QPType uint8

// Queue pair types.
const (
	QPTRC QPType = 2
	QPTUC QPType = 3
	QPTUD QPType = 4
)

// String returns "RC", "UC" or "UD".
func (t QPType) String() string {
	switch t {
	case QPTRC:
		return "RC"
	case QPTUC:
		return "UC"
	case QPTUD:
		return "UD"
	}
	return "QPType(" + strconv.Itoa(int(t)) + ")"
}

// MTU is an InfiniBand path MTU code (enum ibv_mtu).
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUFromBytes returns the code of an MTU given in bytes, or 0.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// String returns the MTU in bytes, e.g. "1024".
func (m MTU) String() string { return strconv.Itoa(m.Bytes()) }

// QPAttrMask says which QPAttr fields a Modify call sets (enum ibv_qp_attr_mask).
type QPAttrMask uint32

// QP attribute mask bits (IBV_QP_STATE, IBV_QP_ACCESS_FLAGS, ...).
const (
	AttrState            QPAttrMask = 1 << 0
	AttrCurState         QPAttrMask = 1 << 1
	AttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	AttrAccessFlags      QPAttrMask = 1 << 3
	AttrPKeyIndex        QPAttrMask = 1 << 4
	AttrPort             QPAttrMask = 1 << 5
	AttrQKey             QPAttrMask = 1 << 6
	AttrAV               QPAttrMask = 1 << 7
	AttrPathMTU          QPAttrMask = 1 << 8
	AttrTimeout          QPAttrMask = 1 << 9
	AttrRetryCnt         QPAttrMask = 1 << 10
	AttrRNRRetry         QPAttrMask = 1 << 11
	AttrRQPSN            QPAttrMask = 1 << 12
	AttrMaxQPRdAtomic    QPAttrMask = 1 << 13
	AttrAltPath          QPAttrMask = 1 << 14
	AttrMinRNRTimer      QPAttrMask = 1 << 15
	AttrSQPSN            QPAttrMask = 1 << 16
	AttrMaxDestRdAtomic  QPAttrMask = 1 << 17
	AttrPathMigState     QPAttrMask = 1 << 18
	AttrCap              QPAttrMask = 1 << 19
	AttrDestQPN          QPAttrMask = 1 << 20
)

func name(names []string, i int, typ string) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return typ + "(" + strconv.Itoa(i) + ")"
}
