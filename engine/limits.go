package engine

import (
	"errors"
	"fmt"

	"github.com/goroce/goroce/verbs"
)

// Default device limits (Config fields left zero take them).
const (
	DefaultMaxQP         = 4096
	DefaultMaxQPWR       = 1 << 16
	DefaultMaxSGE        = 32
	DefaultMaxInlineData = 4096
	DefaultMaxCQ         = 1 << 16
	DefaultMaxCQE        = 1 << 20
	DefaultMaxMR         = 65536
	DefaultMaxPD         = 1 << 16
	DefaultMaxSRQ        = 1 << 16
	DefaultMaxSRQWR      = 1 << 16
	DefaultMaxAH         = 1 << 16
)

// Limits are a device's resource limits, named after the fields of struct
// ibv_device_attr (max_qp, max_qp_wr, ...) but for MaxInlineData, the most
// inline data a QP may ask for (max_inline_data of struct ibv_qp_cap).
type Limits struct {
	MaxQP         int // queue pairs
	MaxQPWR       int // work requests in a send or receive queue (max_send_wr, max_recv_wr)
	MaxSGE        int // scatter/gather elements of a work request (max_send_sge, max_recv_sge, SRQ max_sge)
	MaxInlineData int // bytes of inline data a QP takes
	MaxCQ         int // completion queues
	MaxCQE        int // entries of a completion queue
	MaxMR         int // memory regions
	MaxPD         int // protection domains
	MaxSRQ        int // shared receive queues
	MaxSRQWR      int // work requests in a shared receive queue
	MaxAH         int // address handles
}

// Limits returns the engine's limits, defaults filled in.
func (e *Engine) Limits() Limits {
	c := &e.cfg
	return Limits{MaxQP: c.MaxQP, MaxQPWR: c.MaxQPWR, MaxSGE: c.MaxSGE, MaxInlineData: c.MaxInlineData,
		MaxCQ: c.MaxCQ, MaxCQE: c.MaxCQE, MaxMR: c.MaxMR, MaxPD: c.MaxPD, MaxSRQ: c.MaxSRQ, MaxSRQWR: c.MaxSRQWR,
		MaxAH: c.MaxAH}
}

// fillLimits gives the limits left zero their defaults.
func (l *Config) fillLimits() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxQP, DefaultMaxQP)
	def(&l.MaxQPWR, DefaultMaxQPWR)
	def(&l.MaxSGE, DefaultMaxSGE)
	def(&l.MaxInlineData, DefaultMaxInlineData)
	def(&l.MaxCQ, DefaultMaxCQ)
	def(&l.MaxCQE, DefaultMaxCQE)
	def(&l.MaxMR, DefaultMaxMR)
	def(&l.MaxPD, DefaultMaxPD)
	def(&l.MaxSRQ, DefaultMaxSRQ)
	def(&l.MaxSRQWR, DefaultMaxSRQWR)
	def(&l.MaxAH, DefaultMaxAH)
}

// LimitError reports a request beyond a device limit. It matches
// verbs.ErrResourceLimit with errors.Is; a capacity asked beyond a limit
// (a queue depth, a number of SGEs, a CQ size) also matches
// verbs.ErrInvalidAttr, as libibverbs answers EINVAL, and the QP and MR
// count limits match ErrQPLimit and ErrMRLimit.
type LimitError struct {
	// Limit is the limit's libibverbs name: "max_qp", "max_qp_wr", ...
	Limit string
	// Max is its value.
	Max int
	// Asked names what was asked ("max_send_wr 100") for a capacity, and is
	// empty for a count of objects.
	Asked string
}

func (e *LimitError) Error() string {
	if e.Asked == "" {
		return fmt.Sprintf("engine: device limit %s (%d) reached: %v", e.Limit, e.Max, verbs.ErrResourceLimit)
	}
	return fmt.Sprintf("engine: %s exceeds the device limit %s (%d): %v", e.Asked, e.Limit, e.Max, verbs.ErrResourceLimit)
}

// Is matches the sentinels the doc comment lists.
func (e *LimitError) Is(target error) bool {
	switch target {
	case verbs.ErrResourceLimit:
		return true
	case verbs.ErrInvalidAttr:
		return e.Asked != ""
	case ErrQPLimit:
		return e.Limit == "max_qp"
	case ErrMRLimit:
		return e.Limit == "max_mr"
	}
	return false
}

// Resource is a kind of object the engine counts for its limits but does not
// hold itself: the provider reserves one before creating it and releases it
// when the object is destroyed.
type Resource uint8

// Resources counted by Reserve.
const (
	ResPD Resource = iota
	ResCQ
	ResSRQ
	ResAH
	numResources
)

var resourceLimitNames = [numResources]string{"max_pd", "max_cq", "max_srq", "max_ah"}

func (e *Engine) resourceMax(r Resource) int {
	switch r {
	case ResPD:
		return e.cfg.MaxPD
	case ResCQ:
		return e.cfg.MaxCQ
	case ResSRQ:
		return e.cfg.MaxSRQ
	case ResAH:
		return e.cfg.MaxAH
	}
	return 0
}

var errResource = errors.New("engine: unknown resource kind")

// Reserve counts one more object of kind r, or returns a *LimitError when
// the device has its limit of them. Serialise it with the driver, as the
// other control operations.
func (e *Engine) Reserve(r Resource) error {
	if r >= numResources {
		return errResource
	}
	if m := e.resourceMax(r); e.inUse[r] >= m {
		return &LimitError{Limit: resourceLimitNames[r], Max: m}
	}
	e.inUse[r]++
	return nil
}

// Release gives back an object Reserve counted.
func (e *Engine) Release(r Resource) {
	if r < numResources && e.inUse[r] > 0 {
		e.inUse[r]--
	}
}

// InUse returns how many objects of kind r are reserved.
func (e *Engine) InUse(r Resource) int {
	if r >= numResources {
		return 0
	}
	return e.inUse[r]
}

// CheckCQSize returns a *LimitError when a CQ of n entries exceeds max_cqe,
// and an error matching verbs.ErrInvalidAttr when n < 1.
func (e *Engine) CheckCQSize(n int) error {
	if n < 1 {
		return fmt.Errorf("engine: a CQ of %d entries: %w", n, verbs.ErrInvalidAttr)
	}
	if n > e.cfg.MaxCQE {
		return &LimitError{Limit: "max_cqe", Max: e.cfg.MaxCQE, Asked: fmt.Sprintf("a CQ of %d entries", n)}
	}
	return nil
}

// CheckSRQ returns a *LimitError when a shared receive queue of maxWR
// requests of maxSGE elements exceeds max_srq_wr or max_sge, and an error
// matching verbs.ErrInvalidAttr when either is below 1.
func (e *Engine) CheckSRQ(maxWR, maxSGE int) error {
	if maxWR < 1 || maxSGE < 1 {
		return fmt.Errorf("engine: SRQ of %d WRs x %d SGEs: %w", maxWR, maxSGE, verbs.ErrInvalidAttr)
	}
	if maxWR > e.cfg.MaxSRQWR {
		return &LimitError{Limit: "max_srq_wr", Max: e.cfg.MaxSRQWR, Asked: fmt.Sprintf("SRQ max_wr %d", maxWR)}
	}
	if maxSGE > e.cfg.MaxSGE {
		return &LimitError{Limit: "max_sge", Max: e.cfg.MaxSGE, Asked: fmt.Sprintf("SRQ max_sge %d", maxSGE)}
	}
	return nil
}

// checkQPCap checks a QP's capacities against the limits.
func (e *Engine) checkQPCap(c verbs.QPCap) error {
	for _, x := range []struct {
		name  string
		v     uint32
		limit string
		max   int
	}{
		{"max_send_wr", c.MaxSendWR, "max_qp_wr", e.cfg.MaxQPWR},
		{"max_recv_wr", c.MaxRecvWR, "max_qp_wr", e.cfg.MaxQPWR},
		{"max_send_sge", c.MaxSendSGE, "max_sge", e.cfg.MaxSGE},
		{"max_recv_sge", c.MaxRecvSGE, "max_sge", e.cfg.MaxSGE},
		{"max_inline_data", c.MaxInlineData, "max_inline_data", e.cfg.MaxInlineData},
	} {
		if uint64(x.v) > uint64(x.max) {
			return &LimitError{Limit: x.limit, Max: x.max, Asked: fmt.Sprintf("%s %d", x.name, x.v)}
		}
	}
	return nil
}
