package soft

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/verbs"
)

// TestLimits configures every device limit low, checks that QueryDevice
// reports them, and that each is enforced: one object or capacity too many
// gives an error naming the limit that matches verbs.ErrResourceLimit (and
// verbs.ErrInvalidAttr for a capacity, as libibverbs answers EINVAL), and
// destroying an object makes room for another.
func TestLimits(t *testing.T) {
	cfg := engine.Config{MaxQP: 2, MaxQPWR: 8, MaxSGE: 2, MaxInlineData: 16, MaxCQ: 3, MaxCQE: 8, MaxMR: 2,
		MaxPD: 2, MaxSRQ: 1, MaxSRQWR: 4, MaxAH: 1}
	ca, cb := pipe.New(netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.9.0.2"), pipe.Options{})
	defer cb.Close()
	d, err := New(Options{Name: "limits", Conn: ca, Engine: cfg})
	must(t, err)
	defer d.Close()
	ctx, err := d.Open()
	must(t, err)
	attr, err := ctx.QueryDevice()
	must(t, err)
	want := verbs.DeviceAttr{MaxQP: 2, MaxQPWR: 8, MaxSGE: 2, MaxCQ: 3, MaxCQE: 8, MaxMR: 2, MaxPD: 2, MaxSRQ: 1, MaxSRQWR: 4, MaxAH: 1}
	got := verbs.DeviceAttr{MaxQP: attr.MaxQP, MaxQPWR: attr.MaxQPWR, MaxSGE: attr.MaxSGE, MaxCQ: attr.MaxCQ, MaxCQE: attr.MaxCQE,
		MaxMR: attr.MaxMR, MaxPD: attr.MaxPD, MaxSRQ: attr.MaxSRQ, MaxSRQWR: attr.MaxSRQWR, MaxAH: attr.MaxAH}
	if got != want {
		t.Fatalf("QueryDevice limits %+v, want %+v", got, want)
	}

	// limited checks err: the limit's error, naming it.
	limited := func(what string, err error, limit string, capacity bool) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: no error, want the %s limit", what, limit)
		case !errors.Is(err, verbs.ErrResourceLimit):
			t.Errorf("%s: %v does not match verbs.ErrResourceLimit", what, err)
		case capacity != errors.Is(err, verbs.ErrInvalidAttr):
			t.Errorf("%s: %v: matches verbs.ErrInvalidAttr %v, want %v", what, err, !capacity, capacity)
		case !strings.Contains(err.Error(), limit):
			t.Errorf("%s: %q does not name %s", what, err, limit)
		default:
			t.Logf("%s: %v", what, err)
		}
	}

	// PDs: 2.
	pd, err := ctx.AllocPD()
	must(t, err)
	pd2, err := ctx.AllocPD()
	must(t, err)
	_, err = ctx.AllocPD()
	limited("third PD", err, "max_pd", false)
	must(t, pd2.Dealloc())
	must(t, pd2.Dealloc()) // twice: released once
	pd2, err = ctx.AllocPD()
	must(t, err)
	_, err = ctx.AllocPD()
	limited("third PD after a Dealloc and an AllocPD", err, "max_pd", false)

	// CQs: 3, of at most 8 entries.
	_, err = ctx.CreateCQ(9, nil)
	limited("CQ of 9 entries", err, "max_cqe", true)
	if _, err = ctx.CreateCQ(0, nil); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("CQ of 0 entries: %v, want verbs.ErrInvalidAttr", err)
	}
	var cqs []verbs.CQ
	for range 3 {
		cq, err := ctx.CreateCQ(8, nil)
		must(t, err)
		cqs = append(cqs, cq)
	}
	_, err = ctx.CreateCQ(1, nil)
	limited("fourth CQ", err, "max_cq", false)
	must(t, cqs[2].Destroy())
	cqs[2], err = ctx.CreateCQ(1, nil)
	must(t, err)

	// MRs: 2.
	mr1, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	must(t, err)
	_, err = pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	must(t, err)
	_, err = pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	limited("third MR", err, "max_mr", false)
	must(t, mr1.Dereg())
	_, err = pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	must(t, err)

	// QP capacities, then QPs: 2.
	qpAttr := func(c verbs.QPCap) *verbs.QPInitAttr {
		return &verbs.QPInitAttr{SendCQ: cqs[0], RecvCQ: cqs[1], QPType: verbs.QPTRC, Cap: c}
	}
	for _, c := range []struct {
		name, limit string
		cap         verbs.QPCap
	}{
		{"max_send_wr 9", "max_qp_wr", verbs.QPCap{MaxSendWR: 9, MaxRecvWR: 1}},
		{"max_recv_wr 9", "max_qp_wr", verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 9}},
		{"max_send_sge 3", "max_sge", verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 3}},
		{"max_recv_sge 3", "max_sge", verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxRecvSGE: 3}},
		{"max_inline_data 17", "max_inline_data", verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxInlineData: 17}},
	} {
		_, err := pd.CreateQP(qpAttr(c.cap))
		limited("QP with "+c.name, err, c.limit, true)
		if err != nil && !strings.Contains(err.Error(), c.name) {
			t.Errorf("QP with %s: %q does not name what was asked", c.name, err)
		}
	}
	full := verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 16}
	qp1, err := pd.CreateQP(qpAttr(full))
	must(t, err)
	_, err = pd.CreateQP(qpAttr(full))
	must(t, err)
	_, err = pd.CreateQP(qpAttr(full))
	limited("third QP", err, "max_qp", false)
	if !errors.Is(err, engine.ErrQPLimit) {
		t.Errorf("third QP: %v does not match engine.ErrQPLimit", err)
	}
	must(t, qp1.Destroy())
	_, err = pd.CreateQP(qpAttr(full))
	must(t, err)

	// SRQs: 1, of at most 4 WRs and 2 SGEs.
	_, err = pd.CreateSRQ(5, 1)
	limited("SRQ of 5 WRs", err, "max_srq_wr", true)
	_, err = pd.CreateSRQ(4, 3)
	limited("SRQ of 3 SGEs", err, "max_sge", true)
	srq, err := pd.CreateSRQ(4, 2)
	must(t, err)
	_, err = pd.CreateSRQ(1, 1)
	limited("second SRQ", err, "max_srq", false)
	must(t, srq.Destroy())
	_, err = pd.CreateSRQ(1, 1)
	must(t, err)

	// AHs: 1.
	ah, err := pd.CreateAH(&verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: verbs.GIDFromAddr(netip.MustParseAddr("10.9.0.2"))})
	must(t, err)
	_, err = pd.CreateAH(&verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: verbs.GIDFromAddr(netip.MustParseAddr("10.9.0.2"))})
	limited("second AH", err, "max_ah", false)
	must(t, ah.Destroy())
	_, err = pd.CreateAH(&verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: verbs.GIDFromAddr(netip.MustParseAddr("10.9.0.2"))})
	must(t, err)
}

// TestLimitsDefaults: a device created without limits reports the
// documented defaults.
func TestLimitsDefaults(t *testing.T) {
	d, _ := pipeDevices(t)
	ctx, err := d.Open()
	must(t, err)
	a, err := ctx.QueryDevice()
	must(t, err)
	if a.MaxQP != engine.DefaultMaxQP || a.MaxQPWR != engine.DefaultMaxQPWR || a.MaxSGE != engine.DefaultMaxSGE ||
		a.MaxCQ != engine.DefaultMaxCQ || a.MaxCQE != engine.DefaultMaxCQE || a.MaxMR != engine.DefaultMaxMR ||
		a.MaxPD != engine.DefaultMaxPD || a.MaxSRQ != engine.DefaultMaxSRQ || a.MaxSRQWR != engine.DefaultMaxSRQWR ||
		a.MaxAH != engine.DefaultMaxAH {
		t.Fatalf("default limits %+v", a)
	}
}
