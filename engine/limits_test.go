package engine

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// limitStep is one call of TestLimits and the limit it must hit ("": none).
type limitStep struct {
	what     string
	call     func() error
	limit    string // the limit the error names
	capacity bool   // a capacity: the error matches verbs.ErrInvalidAttr too
	also     error  // another sentinel the error matches (ErrQPLimit, ErrMRLimit)
}

// limits is TestLimits' world: an engine with every limit low, the MR and
// QP a step gives back later, and a CQ for the QPs.
type limits struct {
	e  *Engine
	mr *MR
	qp *QP
	cq *CQ
}

func (l *limits) reserve(r Resource) func() error { return func() error { return l.e.Reserve(r) } }

func (l *limits) release(r Resource) func() error { return func() error { l.e.Release(r); return nil } }

// reg registers an MR, kept for a later step when keep is set.
func (l *limits) reg(keep bool) func() error {
	return func() error {
		m, err := l.e.MRs.Register(make([]byte, 64), verbs.AccessLocalWrite, 1)
		if keep && err == nil {
			l.mr = m
		}
		return err
	}
}

// create creates an RC QP of capacities c, kept for a later step when keep
// is set.
func (l *limits) create(c verbs.QPCap, keep bool) func() error {
	return func() error {
		q, err := l.e.CreateQP(&QPInit{Type: verbs.QPTRC, PD: 1, SendCQ: l.cq, RecvCQ: l.cq, Cap: c})
		if keep && err == nil {
			l.qp = q
		}
		return err
	}
}

// objectSteps count PDs, CQs and MRs, and check a CQ's size.
func (l *limits) objectSteps() []limitStep {
	return []limitStep{
		{what: "first PD", call: l.reserve(ResPD)},
		{what: "second PD", call: l.reserve(ResPD)},
		{what: "third PD", call: l.reserve(ResPD), limit: "max_pd"},
		{what: "a PD released", call: l.release(ResPD)},
		{what: "the other PD released", call: l.release(ResPD)},
		{what: "a PD released when none is reserved: no count below 0", call: l.release(ResPD)},
		{what: "first PD again", call: l.reserve(ResPD)},
		{what: "second PD again", call: l.reserve(ResPD)},
		{what: "third PD after releases and reserves", call: l.reserve(ResPD), limit: "max_pd"},

		{what: "CQ of 9 entries", call: func() error { return l.e.CheckCQSize(9) }, limit: "max_cqe", capacity: true},
		{what: "CQ of 8 entries", call: func() error { return l.e.CheckCQSize(8) }},
		{what: "first CQ", call: l.reserve(ResCQ)},
		{what: "second CQ", call: l.reserve(ResCQ)},
		{what: "third CQ", call: l.reserve(ResCQ)},
		{what: "fourth CQ", call: l.reserve(ResCQ), limit: "max_cq"},
		{what: "a CQ released", call: l.release(ResCQ)},
		{what: "third CQ again", call: l.reserve(ResCQ)},

		{what: "first MR", call: l.reg(true)},
		{what: "second MR", call: l.reg(false)},
		{what: "third MR", call: l.reg(false), limit: "max_mr", also: ErrMRLimit},
		{what: "first MR deregistered", call: func() error { return l.mr.Deregister() }},
		{what: "third MR after a deregistration", call: l.reg(false)},
	}
}

// queueSteps check QP capacities and count QPs, SRQs and AHs.
func (l *limits) queueSteps() []limitStep {
	full := verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 16}
	return []limitStep{
		{what: "QP with max_send_wr 9", call: l.create(verbs.QPCap{MaxSendWR: 9, MaxRecvWR: 1}, false), limit: "max_qp_wr", capacity: true},
		{what: "QP with max_recv_wr 9", call: l.create(verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 9}, false), limit: "max_qp_wr", capacity: true},
		{what: "QP with max_send_sge 3", call: l.create(verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 3}, false), limit: "max_sge", capacity: true},
		{what: "QP with max_recv_sge 3", call: l.create(verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxRecvSGE: 3}, false), limit: "max_sge", capacity: true},
		{what: "QP with max_inline_data 17", call: l.create(verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxInlineData: 17}, false), limit: "max_inline_data", capacity: true},
		{what: "first QP", call: l.create(full, true)},
		{what: "second QP", call: l.create(full, false)},
		{what: "third QP", call: l.create(full, false), limit: "max_qp", also: ErrQPLimit},
		{what: "first QP destroyed", call: func() error { l.qp.Destroy(); return nil }},
		{what: "third QP after a destroy", call: l.create(full, false)},

		{what: "SRQ of 5 WRs", call: func() error { return l.e.CheckSRQ(5, 1) }, limit: "max_srq_wr", capacity: true},
		{what: "SRQ of 3 SGEs", call: func() error { return l.e.CheckSRQ(4, 3) }, limit: "max_sge", capacity: true},
		{what: "SRQ of 4 WRs and 2 SGEs", call: func() error { return l.e.CheckSRQ(4, 2) }},
		{what: "first SRQ", call: l.reserve(ResSRQ)},
		{what: "second SRQ", call: l.reserve(ResSRQ), limit: "max_srq"},
		{what: "the SRQ released", call: l.release(ResSRQ)},
		{what: "an SRQ again", call: l.reserve(ResSRQ)},

		{what: "first AH", call: l.reserve(ResAH)},
		{what: "second AH", call: l.reserve(ResAH), limit: "max_ah"},
		{what: "the AH released", call: l.release(ResAH)},
		{what: "an AH again", call: l.reserve(ResAH)},
	}
}

// TestLimits sets every device limit low and checks that Limits reports
// them and that each is enforced: one object or capacity too many gives a
// *LimitError naming the limit, matching verbs.ErrResourceLimit (and
// verbs.ErrInvalidAttr for a capacity, as libibverbs answers EINVAL), and
// giving an object back makes room for another. provider/soft's TestLimits
// checks the same through the device's verbs.
func TestLimits(t *testing.T) {
	cfg := Config{Local: netip.MustParseAddr("10.9.0.1"), MaxQP: 2, MaxQPWR: 8, MaxSGE: 2, MaxInlineData: 16, MaxCQ: 3,
		MaxCQE: 8, MaxMR: 2, MaxPD: 2, MaxSRQ: 1, MaxSRQWR: 4, MaxAH: 1}
	e, err := New(cfg)
	must(t, err)
	want := Limits{MaxQP: 2, MaxQPWR: 8, MaxSGE: 2, MaxInlineData: 16, MaxCQ: 3, MaxCQE: 8, MaxMR: 2, MaxPD: 2, MaxSRQ: 1, MaxSRQWR: 4, MaxAH: 1}
	if got := e.Limits(); got != want {
		t.Fatalf("Limits %+v, want %+v", got, want)
	}
	l := &limits{e: e, cq: NewCQ(8)}
	for _, s := range slices.Concat(l.objectSteps(), l.queueSteps()) {
		err := s.call()
		switch {
		case s.limit == "" && err != nil:
			t.Fatalf("%s: %v", s.what, err)
		case s.limit == "":
		case err == nil:
			t.Errorf("%s: no error, want the %s limit", s.what, s.limit)
		case !errors.Is(err, verbs.ErrResourceLimit):
			t.Errorf("%s: %v does not match verbs.ErrResourceLimit", s.what, err)
		case s.capacity != errors.Is(err, verbs.ErrInvalidAttr):
			t.Errorf("%s: %v: matches verbs.ErrInvalidAttr %v, want %v", s.what, err, !s.capacity, s.capacity)
		case s.also != nil && !errors.Is(err, s.also):
			t.Errorf("%s: %v does not match %v", s.what, err, s.also)
		case !strings.Contains(err.Error(), s.limit):
			t.Errorf("%s: %q does not name %s", s.what, err, s.limit)
		case s.capacity && strings.HasPrefix(s.what, "QP with ") && !strings.Contains(err.Error(), strings.TrimPrefix(s.what, "QP with ")):
			t.Errorf("%s: %q does not name what was asked", s.what, err)
		default:
			t.Logf("%s: %v", s.what, err)
		}
	}
	if n := e.InUse(ResPD); n != 2 {
		t.Errorf("%d PDs in use, want 2", n)
	}
}

// TestLimitsDefaults: an engine configured without limits has the
// documented defaults.
func TestLimitsDefaults(t *testing.T) {
	e, err := New(Config{Local: netip.MustParseAddr("10.9.0.1")})
	must(t, err)
	want := Limits{MaxQP: DefaultMaxQP, MaxQPWR: DefaultMaxQPWR, MaxSGE: DefaultMaxSGE, MaxInlineData: DefaultMaxInlineData,
		MaxCQ: DefaultMaxCQ, MaxCQE: DefaultMaxCQE, MaxMR: DefaultMaxMR, MaxPD: DefaultMaxPD, MaxSRQ: DefaultMaxSRQ,
		MaxSRQWR: DefaultMaxSRQWR, MaxAH: DefaultMaxAH}
	if got := e.Limits(); got != want {
		t.Fatalf("default limits %+v, want %+v", got, want)
	}
}
