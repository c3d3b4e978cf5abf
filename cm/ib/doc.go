// Package ib is the InfiniBand communication manager's wire format (IBTA
// Vol 1 chapters 12 and 13), as Linux's ib_cm and rdma_cm put it on the wire
// over RoCEv2: the 24-byte MAD header of the CM class and the messages REQ,
// MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP that fill the rest
// of a 256-byte MAD, plus rdma_cm's conventions (port-space service IDs and
// the 36-byte private-data header of a REQ).
//
// A CM MAD travels as a UD SEND ONLY from QP 1 to QP 1 with Q_Key
// GSIQKey. Each message type has a struct with one field per wire field;
// its Marshal writes a whole MAD body (CMSize bytes) and the package-level
// Parse functions read one. Reserved bits are written as zero and ignored on
// read, so Parse then Marshal may clear bits a peer set but never changes a
// field. Parsers never panic: short input gives ErrTruncated.
//
// Multi-bit fields are laid out most significant bit first, as in IBTA's
// tables: byte 43 of a REQ holds the remote CM response timeout in its top
// five bits, the transport service type in the next two and the end-to-end
// flow control flag in the lowest.
package ib
