package verbs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/verbs"
)

func TestWCErrSentinels(t *testing.T) {
	want := map[verbs.WCStatus]error{
		verbs.WCLocLenErr: verbs.ErrLocalLength, verbs.WCLocQPOpErr: verbs.ErrLocalQPOp,
		verbs.WCLocEECOpErr: verbs.ErrLocalEECOp, verbs.WCLocProtErr: verbs.ErrLocalProtection,
		verbs.WCWRFlushErr: verbs.ErrFlushed, verbs.WCMWBindErr: verbs.ErrMWBind,
		verbs.WCBadRespErr: verbs.ErrBadResponse, verbs.WCLocAccessErr: verbs.ErrLocalAccess,
		verbs.WCRemInvReqErr: verbs.ErrRemoteInvalidRequest, verbs.WCRemAccessErr: verbs.ErrRemoteAccess,
		verbs.WCRemOpErr: verbs.ErrRemoteOp, verbs.WCRetryExcErr: verbs.ErrRetryExceeded,
		verbs.WCRNRRetryExcErr: verbs.ErrRNRRetryExceeded, verbs.WCLocRDDViolErr: verbs.ErrLocalRDDViolation,
		verbs.WCRemInvRDReqErr: verbs.ErrRemoteInvalidRDRequest, verbs.WCRemAbortErr: verbs.ErrRemoteAborted,
		verbs.WCInvEECNErr: verbs.ErrInvalidEECN, verbs.WCInvEECStateErr: verbs.ErrInvalidEECState,
		verbs.WCFatalErr: verbs.ErrFatal, verbs.WCRespTimeoutErr: verbs.ErrResponseTimeout,
		verbs.WCGeneralErr: verbs.ErrGeneral,
	}
	if (&verbs.WC{Status: verbs.WCSuccess}).Err() != nil {
		t.Fatal("a successful completion has an error")
	}
	seen := map[error]verbs.WCStatus{}
	for s := verbs.WCStatus(1); s <= verbs.WCGeneralErr; s++ {
		wc := verbs.WC{Status: s}
		err := wc.Err()
		if err == nil {
			t.Fatalf("%v: no error", s)
		}
		if !errors.Is(err, want[s]) {
			t.Errorf("%v: %v does not match its sentinel %v", s, err, want[s])
		}
		if o, dup := seen[err]; dup {
			t.Errorf("%v and %v share the error %v", o, s, err)
		}
		seen[err] = s
		var se *verbs.StatusError
		if !errors.As(err, &se) || se.Status != s {
			t.Errorf("%v: errors.As gives %+v", s, se)
		}
		if !strings.Contains(err.Error(), s.String()) {
			t.Errorf("%v: %q does not name the status", s, err)
		}
		if n := testing.AllocsPerRun(100, func() { _ = wc.Err() }); n != 0 {
			t.Errorf("%v: Err allocates %v times", s, n)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d sentinels, want %d", len(seen), len(want))
	}
	if err := verbs.WCStatus(200).Err(); err == nil || errors.Is(err, verbs.ErrGeneral) {
		t.Errorf("status 200: %v", err)
	}
}
