package wire

import (
	"encoding/binary"
	"strconv"
	"time"
)

// AETHLen is the length of the ACK Extended Transport Header.
const AETHLen = 4

// AETH is a view of the ACK Extended Transport Header (IBA 9.3.5), carried by
// ACKNOWLEDGE, ATOMIC ACKNOWLEDGE and RDMA READ RESPONSE FIRST/LAST/ONLY.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Syndrome    |              Message Sequence Number          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AETH []byte

// Syndrome returns the syndrome byte.
func (a AETH) Syndrome() Syndrome { return Syndrome(a[0]) }

// MSNMask is the largest message sequence number: the MSN is a 24-bit
// counter that wraps to 0 after it (IBA 9.7.5.1.2), as the PSN does.
const MSNMask = 0xFFFFFF

// MSN returns the 24-bit message sequence number.
func (a AETH) MSN() uint32 { return binary.BigEndian.Uint32(a) & MSNMask }

// Set writes the syndrome and MSN (the MSN's top 8 bits are dropped).
func (a AETH) Set(s Syndrome, msn uint32) {
	binary.BigEndian.PutUint32(a, msn&MSNMask)
	a[0] = byte(s)
}

// Syndrome is the AETH syndrome (IBA 9.7.5.2.x):
//
//	bit 7: 0 (reserved)
//	bits 6..5: 00 ACK, 01 RNR NAK, 10 reserved, 11 NAK
//	bits 4..0: ACK: credit count (0x1F = no end-to-end flow control)
//	           RNR NAK: RNR timer code
//	           NAK: NAK code (NAKPSNSequence .. NAKInvalidRDRequest)
type Syndrome uint8

// Syndrome kinds (bits 6..5).
const (
	SyndromeACK      = 0x00
	SyndromeRNR      = 0x20
	SyndromeReserved = 0x40
	SyndromeNAK      = 0x60
)

// Well-known syndromes.
const (
	ACKUnlimited        Syndrome = 0x1F // ACK without end-to-end credits
	NAKPSNSequence      Syndrome = 0x60 // NAK: PSN sequence error
	NAKInvalidRequest   Syndrome = 0x61 // NAK: invalid request
	NAKRemoteAccess     Syndrome = 0x62 // NAK: remote access error
	NAKRemoteOperation  Syndrome = 0x63 // NAK: remote operational error
	NAKInvalidRDRequest Syndrome = 0x64 // NAK: invalid RD request
)

// RNRNAK returns the RNR NAK syndrome with the given timer code (0..31).
func RNRNAK(timer uint8) Syndrome { return Syndrome(SyndromeRNR | timer&0x1F) }

// ACKCredits returns the ACK syndrome with the given credit code (0..31).
func ACKCredits(code uint8) Syndrome { return Syndrome(code & 0x1F) }

// Kind returns SyndromeACK, SyndromeRNR, SyndromeNAK or SyndromeReserved.
func (s Syndrome) Kind() uint8 {
	if s&0x80 != 0 {
		return SyndromeReserved
	}
	return uint8(s) & 0x60
}

// IsACK reports whether s is a positive acknowledgement.
func (s Syndrome) IsACK() bool { return s.Kind() == SyndromeACK }

// IsRNR reports whether s is a receiver-not-ready NAK.
func (s Syndrome) IsRNR() bool { return s.Kind() == SyndromeRNR }

// IsNAK reports whether s is a NAK (not RNR).
func (s Syndrome) IsNAK() bool { return s.Kind() == SyndromeNAK }

// Value returns bits 4..0: the credit count, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1F }

// Valid reports whether s is a defined syndrome: bit 7 clear, kind not 10, and
// for a NAK a code from 0 to 4.
func (s Syndrome) Valid() bool {
	switch s.Kind() {
	case SyndromeACK, SyndromeRNR:
		return true
	case SyndromeNAK:
		return s.Value() <= 4
	}
	return false
}

var nakNames = [...]string{"PSN_SEQUENCE_ERROR", "INVALID_REQUEST", "REMOTE_ACCESS_ERROR", "REMOTE_OPERATIONAL_ERROR", "INVALID_RD_REQUEST"}

// String describes the syndrome, e.g. "ACK credits=unlimited",
// "RNR_NAK timer=14 (1.28ms)", "NAK REMOTE_ACCESS_ERROR".
func (s Syndrome) String() string {
	v := s.Value()
	switch s.Kind() {
	case SyndromeACK:
		if v == 0x1F {
			return "ACK credits=unlimited"
		}
		return "ACK credits=" + strconv.Itoa(int(v))
	case SyndromeRNR:
		return "RNR_NAK timer=" + strconv.Itoa(int(v)) + " (" + RNRTimer(v).String() + ")"
	case SyndromeNAK:
		if int(v) < len(nakNames) {
			return "NAK " + nakNames[v]
		}
		return "NAK reserved code " + strconv.Itoa(int(v))
	}
	return "reserved syndrome 0x" + strconv.FormatUint(uint64(s), 16)
}

// rnrTimerMicros is IBA table 45 (the RNR NAK timer field), in microseconds.
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
	163840, 245760, 327680, 491520,
}

// RNRTimer returns the delay an RNR NAK timer code (0..31) asks for
// (IBA table 45; code 0 means 655.36 ms).
func RNRTimer(code uint8) time.Duration {
	return time.Duration(rnrTimerMicros[code&0x1F]) * time.Microsecond
}
