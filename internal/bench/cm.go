package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/cm/perftest"
	"github.com/goroce/goroce/cm/rdmacm"
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
	for i, qp := range s.qps {
		var c *rdmacm.Conn
		var err error
		if o.Client {
			addr := netip.AddrPortFrom(info.Peer, info.Port).String()
			for {
				c, err = mg.Dial(ctx, addr, qp, rdmacm.DialOptions{ResponderResources: d, InitiatorDepth: d,
					RetryCount: 7, RNRRetryCount: 7, ACKTimeout: ackTimeout})
				var rej *rdmacm.RejectError
				if err == nil || !errors.As(err, &rej) || rej.Reason != 8 {
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("rdma_cm connection of QP %d: %w (%w)", i, err, ctx.Err())
				case <-time.After(100 * time.Millisecond):
				}
			}
		} else {
			var req *rdmacm.Request
			if req, err = ln.Accept(ctx); err == nil {
				c, err = req.Accept(ctx, qp, rdmacm.AcceptOptions{ResponderResources: d, InitiatorDepth: d, RNRRetryCount: 7, ACKTimeout: ackTimeout})
			}
		}
		if err != nil {
			return fmt.Errorf("rdma_cm connection of QP %d: %w", i, err)
		}
		s.cmConns = append(s.cmConns, c)
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

// ackTimeout is the data QPs' local ACK timeout code: perftest's default
// qp_timeout, which it sets on its rdma_cm ids (RDMA_OPTION_ID_ACK_TIMEOUT)
// and uses without -R too.
const ackTimeout = 14

// cmClose disconnects the data connections, all at once, each waiting a
// few seconds at most for its DREP.
func (s *session) cmClose() {
	var wg sync.WaitGroup
	for _, c := range s.cmConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.CloseContext(ctx)
		}()
	}
	wg.Wait()
	s.cmConns = nil
}
