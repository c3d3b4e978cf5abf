package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/cm/ib"
	"github.com/goroce/goroce/cm/perftest"
	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// cmConnect connects the data QPs through rdma_cm, as perftest's -R does
// (create_rdma_cm_connection): a handshake, then one rdma_cm connection per
// QP to the server's port, in order, then another handshake. The server
// listens before its first handshake so that no request comes too early;
// the client retries a request the server refused for want of a listener
// (perftest's server listens only after that handshake).
func (s *session) cmConnect(ctx context.Context, info perftest.CMInfo) error {
	o := &s.o
	mg := rdmacm.Attach(info.Device, rdmacm.MachineConfig{})
	var ln *rdmacm.Listener
	if !o.Client {
		var err error
		if ln, err = mg.Listen(ctx, fmt.Sprintf(":%d", info.Port)); err != nil {
			return fmt.Errorf("rdma_cm: %w", err)
		}
		defer ln.Close()
	}
	var zero perftest.Dest
	if _, err := s.conn.HandShake(zero); err != nil {
		return fmt.Errorf("sync before the rdma_cm connections: %w", err)
	}
	// Responder resources and initiator depth: out_reads for READ and
	// atomics, else none (rdmacm's options: negative asks 0).
	d := -1
	if o.Test.Verb == Read || o.Test.Verb == Atomic {
		d = int(s.out.Local[0].OutReads)
	}
	if o.Client {
		for i, qp := range s.qps {
			c, err := s.cmDial(ctx, mg, netip.AddrPortFrom(info.Peer, info.Port).String(), qp, d)
			if err != nil {
				return fmt.Errorf("rdma_cm connection of QP %d: %w", i, err)
			}
			s.cmConns = append(s.cmConns, c)
		}
	} else if err := s.cmAccept(ctx, ln, d); err != nil {
		return err
	}
	for i, qp := range s.qps {
		if a, err := qp.Query(); err == nil {
			s.out.Local[i].PSN = a.SQPSN
		}
	}
	if ln != nil {
		ln.Close()
	}
	if _, err := s.conn.HandShake(zero); err != nil {
		return fmt.Errorf("sync after the rdma_cm connections: %w", err)
	}
	return nil
}

// cmDial connects qp to the server, retrying while the server has no
// listener yet (REJ 8).
func (s *session) cmDial(ctx context.Context, mg *rdmacm.Manager, addr string, qp verbs.QP, d int) (*rdmacm.Conn, error) {
	for {
		c, err := mg.Dial(ctx, addr, qp, rdmacm.DialOptions{ResponderResources: d, InitiatorDepth: d,
			RetryCount: 7, RNRRetryCount: 7, ACKTimeout: s.o.QPTimeout})
		var rej *rdmacm.RejectError
		if err == nil || !errors.As(err, &rej) || rej.Reason != ib.RejInvalidServiceID {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cmAccept takes the clients' requests in the order they come, QP i for
// the i-th (as perftest's server numbers its connections), and accepts
// them all at once: a request waiting behind another's lost REP or RTU
// would run out of time.
func (s *session) cmAccept(ctx context.Context, ln *rdmacm.Listener, d int) error {
	conns := make([]*rdmacm.Conn, len(s.qps))
	errs := make([]error, len(s.qps))
	var wg sync.WaitGroup
	var err error
	for i, qp := range s.qps {
		var req *rdmacm.Request
		if req, err = ln.Accept(ctx); err != nil {
			err = fmt.Errorf("rdma_cm connection of QP %d: %w", i, err)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[i], errs[i] = req.Accept(ctx, qp, rdmacm.AcceptOptions{ResponderResources: d, InitiatorDepth: d,
				RNRRetryCount: 7, ACKTimeout: s.o.QPTimeout})
		}()
	}
	wg.Wait()
	for i, c := range conns {
		if c != nil {
			s.cmConns = append(s.cmConns, c)
		} else if err == nil {
			err = fmt.Errorf("rdma_cm connection of QP %d: %w", i, errs[i])
		}
	}
	return err
}

// closeWait bounds the wait for a DREP at the end of a run. A DREP usually
// comes within a round trip; a lost DREQ is resent every 6.4 s with Linux's
// CM timers, and a peer that never sees one (perftest's client) waits for
// it forever, so the wait covers several resends: with 5 s, only the first
// DREQ went out before the process ended, and under CM loss a perftest
// client was left waiting.
const closeWait = 60 * time.Second

// cmClose disconnects the data connections, all at once, each waiting for
// its DREP up to closeWait while its DREQ is resent (see closeWait).
func (s *session) cmClose() {
	var wg sync.WaitGroup
	for _, c := range s.cmConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), closeWait)
			defer cancel()
			_ = c.CloseContext(ctx)
		}()
	}
	wg.Wait()
	s.cmConns = nil
}
