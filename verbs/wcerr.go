package verbs

import "fmt"

// StatusError is the error of a work completion that did not succeed: its
// status. WC.Err returns one of the sentinels below (never allocating), so
// that errors.Is(wc.Err(), verbs.ErrRemoteAccess) tells what happened, and
// errors.As with a *StatusError gives the status.
type StatusError struct {
	Status WCStatus
	msg    string
}

func (e *StatusError) Error() string { return e.msg }

func newStatusError(s WCStatus, what string) *StatusError {
	return &StatusError{Status: s, msg: fmt.Sprintf("verbs: %s (%v)", what, s)}
}

// The errors of work completions, one for each WCStatus but WCSuccess, as
// WC.Err returns them.
var (
	ErrLocalLength            = newStatusError(WCLocLenErr, "local length error")
	ErrLocalQPOp              = newStatusError(WCLocQPOpErr, "local QP operation error")
	ErrLocalEECOp             = newStatusError(WCLocEECOpErr, "local EEC operation error")
	ErrLocalProtection        = newStatusError(WCLocProtErr, "local protection error")
	ErrFlushed                = newStatusError(WCWRFlushErr, "work request flushed")
	ErrMWBind                 = newStatusError(WCMWBindErr, "memory window bind error")
	ErrBadResponse            = newStatusError(WCBadRespErr, "bad response")
	ErrLocalAccess            = newStatusError(WCLocAccessErr, "local access error")
	ErrRemoteInvalidRequest   = newStatusError(WCRemInvReqErr, "remote invalid request")
	ErrRemoteAccess           = newStatusError(WCRemAccessErr, "remote access error")
	ErrRemoteOp               = newStatusError(WCRemOpErr, "remote operation error")
	ErrRetryExceeded          = newStatusError(WCRetryExcErr, "transport retry counter exceeded")
	ErrRNRRetryExceeded       = newStatusError(WCRNRRetryExcErr, "RNR retry counter exceeded")
	ErrLocalRDDViolation      = newStatusError(WCLocRDDViolErr, "local RDD violation")
	ErrRemoteInvalidRDRequest = newStatusError(WCRemInvRDReqErr, "remote invalid RD request")
	ErrRemoteAborted          = newStatusError(WCRemAbortErr, "remote aborted")
	ErrInvalidEECN            = newStatusError(WCInvEECNErr, "invalid EE context number")
	ErrInvalidEECState        = newStatusError(WCInvEECStateErr, "invalid EE context state")
	ErrFatal                  = newStatusError(WCFatalErr, "fatal error")
	ErrResponseTimeout        = newStatusError(WCRespTimeoutErr, "response timeout")
	ErrGeneral                = newStatusError(WCGeneralErr, "general error")
)

var statusErrors = [...]*StatusError{nil, ErrLocalLength, ErrLocalQPOp, ErrLocalEECOp, ErrLocalProtection,
	ErrFlushed, ErrMWBind, ErrBadResponse, ErrLocalAccess, ErrRemoteInvalidRequest, ErrRemoteAccess,
	ErrRemoteOp, ErrRetryExceeded, ErrRNRRetryExceeded, ErrLocalRDDViolation, ErrRemoteInvalidRDRequest,
	ErrRemoteAborted, ErrInvalidEECN, ErrInvalidEECState, ErrFatal, ErrResponseTimeout, ErrGeneral}

// Err returns nil for a successful completion, else the sentinel error of
// its status (ErrRemoteAccess, ErrRetryExceeded, ErrFlushed, ...), which
// is a *StatusError. It does not allocate for the statuses libibverbs
// defines.
func (wc *WC) Err() error { return wc.Status.Err() }

// Err returns nil for WCSuccess, else the status's sentinel error (see
// WC.Err).
func (s WCStatus) Err() error {
	if s == WCSuccess {
		return nil
	}
	if int(s) < len(statusErrors) {
		return statusErrors[s]
	}
	return &StatusError{Status: s, msg: fmt.Sprintf("verbs: work completion status %d", uint8(s))}
}
