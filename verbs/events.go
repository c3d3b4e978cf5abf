package verbs

// EventType is the type of an asynchronous event (enum ibv_event_type).
type EventType uint8

// Asynchronous event types, with libibverbs' values.
const (
	EventCQErr            EventType = 0  // IBV_EVENT_CQ_ERR: a CQ overran and is in error
	EventQPFatal          EventType = 1  // IBV_EVENT_QP_FATAL: local work queue catastrophic error
	EventQPReqErr         EventType = 2  // IBV_EVENT_QP_REQ_ERR: invalid request local work queue error
	EventQPAccessErr      EventType = 3  // IBV_EVENT_QP_ACCESS_ERR: local access violation work queue error
	EventCommEst          EventType = 4  // IBV_EVENT_COMM_EST
	EventSQDrained        EventType = 5  // IBV_EVENT_SQ_DRAINED
	EventPathMig          EventType = 6  // IBV_EVENT_PATH_MIG
	EventPathMigErr       EventType = 7  // IBV_EVENT_PATH_MIG_ERR
	EventDeviceFatal      EventType = 8  // IBV_EVENT_DEVICE_FATAL
	EventPortActive       EventType = 9  // IBV_EVENT_PORT_ACTIVE
	EventPortErr          EventType = 10 // IBV_EVENT_PORT_ERR
	EventLIDChange        EventType = 11 // IBV_EVENT_LID_CHANGE
	EventPKeyChange       EventType = 12 // IBV_EVENT_PKEY_CHANGE
	EventSMChange         EventType = 13 // IBV_EVENT_SM_CHANGE
	EventSRQErr           EventType = 14 // IBV_EVENT_SRQ_ERR
	EventSRQLimitReached  EventType = 15 // IBV_EVENT_SRQ_LIMIT_REACHED
	EventQPLastWQEReached EventType = 16 // IBV_EVENT_QP_LAST_WQE_REACHED
	EventClientReregister EventType = 17 // IBV_EVENT_CLIENT_REREGISTER
	EventGIDChange        EventType = 18 // IBV_EVENT_GID_CHANGE
	EventWQFatal          EventType = 19 // IBV_EVENT_WQ_FATAL
)

var eventTypeNames = [...]string{"CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST", "SQ_DRAINED",
	"PATH_MIG", "PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR", "LID_CHANGE", "PKEY_CHANGE",
	"SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED", "CLIENT_REREGISTER", "GID_CHANGE", "WQ_FATAL"}

// String returns the event's name as the enum spells it without its
// IBV_EVENT_ prefix, e.g. "CQ_ERR".
func (t EventType) String() string { return name(eventTypeNames[:], int(t), "EventType") }

// AsyncEvent is an asynchronous event (struct ibv_async_event): its type and
// the object it concerns, which the type tells (CQ for CQ_ERR, QP for the
// QP events, SRQ for the SRQ events, Port for the port events).
type AsyncEvent struct {
	Type EventType
	CQ   CQ
	QP   QP
	SRQ  SRQ
	Port uint8
}
