package verbs

import "errors"

// ErrCQOverrun matches the error of a CQ that overran: a completion found
// it full and was lost, so the CQ is in error (IBV_EVENT_CQ_ERR), takes no
// more completions and the QPs it serves went to ERROR. CQ.Err and
// PollWait return it once the completions the CQ still holds are polled.
var ErrCQOverrun = errors.New("verbs: CQ overrun")
