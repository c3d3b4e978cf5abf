package verbs

import (
	"context"
	"errors"
	"fmt"
)

// QPSet is a queue pair with what it needs: a protection domain, a
// completion queue (for sends and receives) reporting to a completion
// channel, and a registered memory region, made by NewQPSet in the order
// libibverbs needs and destroyed by Close in the reverse order. Every
// field is the plain verbs object: use them directly.
type QPSet struct {
	PD   PD
	Chan CompChannel
	CQ   CQ
	MR   MR
	QP   QP
	// Endpoint describes the QP (port 1, GID index DefaultGIDIndex unless
	// QPSetOptions say otherwise) and exposes MR.
	Endpoint Endpoint
}

// QPSetOptions tune NewQPSet. Zero fields take the defaults.
type QPSetOptions struct {
	// Access is the MR's access (default local write, remote write, read
	// and atomic).
	Access AccessFlags
	// CQE is the CQ's size (default 256); Cap the QP's capacities (default
	// 64 WRs and 1 SGE each way).
	CQE int
	Cap QPCap
	// Port and GIDIndex are those of the Endpoint (default 1 and
	// DefaultGIDIndex).
	Port     uint8
	GIDIndex int
}

// NewQPSet makes a QPSet of a QP of type typ on ctx, registering mem. On an
// error it destroys what it made.
func NewQPSet(ctx Context, typ QPType, mem []byte, opts *QPSetOptions) (s *QPSet, err error) {
	var o QPSetOptions
	if opts != nil {
		o = *opts
	}
	if o.Access == 0 {
		o.Access = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	}
	if o.CQE <= 0 {
		o.CQE = 256
	}
	if o.Cap == (QPCap{}) {
		o.Cap = QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}
	}
	if ctx == nil {
		return nil, fmt.Errorf("verbs: QP set on a nil context: %w", ErrInvalidAttr)
	}
	s = &QPSet{}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	if s.PD, err = ctx.AllocPD(); err != nil {
		return s, err
	}
	if s.Chan, err = ctx.CreateCompChannel(); err != nil {
		return s, err
	}
	if s.CQ, err = ctx.CreateCQ(o.CQE, s.Chan); err != nil {
		return s, err
	}
	if s.MR, err = s.PD.RegMR(mem, o.Access); err != nil {
		return s, err
	}
	if s.QP, err = s.PD.CreateQP(&QPInitAttr{SendCQ: s.CQ, RecvCQ: s.CQ, QPType: typ, Cap: o.Cap}); err != nil {
		return s, err
	}
	ep, err := NewEndpoint(ctx, s.QP, o.Port, o.GIDIndex)
	if err != nil {
		return s, err
	}
	s.Endpoint = ep.WithMR(s.MR)
	return s, nil
}

// SGE returns the scatter/gather list of n bytes at off in the MR.
func (s *QPSet) SGE(off, n int) []SGE {
	return []SGE{{Addr: s.MR.Addr() + uint64(off), Length: uint32(n), LKey: s.MR.LKey()}}
}

// Wait returns completions of the CQ, waiting for them on the channel
// (PollWait).
func (s *QPSet) Wait(ctx context.Context, wc []WC) (int, error) {
	return PollWait(ctx, s.Chan, s.CQ, wc)
}

// Close destroys the QP, the MR, the CQ, the channel and the PD, in that
// order, and returns their errors joined. Objects not made are skipped.
func (s *QPSet) Close() error {
	var errs []error
	if s.QP != nil {
		errs = append(errs, s.QP.Close())
	}
	if s.MR != nil {
		errs = append(errs, s.MR.Close())
	}
	if s.CQ != nil {
		errs = append(errs, s.CQ.Close())
	}
	if s.Chan != nil {
		errs = append(errs, s.Chan.Close())
	}
	if s.PD != nil {
		errs = append(errs, s.PD.Close())
	}
	return errors.Join(errs...)
}
