// Package verbs is goroce's RDMA verbs API: devices, protection domains,
// memory regions, completion queues, queue pairs, shared receive queues,
// address handles, work requests and work completions, with the names and
// values libibverbs gives them (include/infiniband/verbs.h), so that rdma-core
// documentation reads straight onto it.
//
// The value types (SendWR, RecvWR, WC, the enums) are also the vocabulary of
// the soft engine below, so that a work request goes from PostSend to the wire
// without being converted.
package verbs
