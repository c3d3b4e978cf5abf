package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/verbs"
)

// Backend is a device whose connections a connection manager of its own
// makes: the ibverbs provider's devices, through librdmacm and the
// kernel's rdma_cm (build tag ibverbs), where the kernel owns QP 1. Dial,
// Listen, DialConn and the rest take one as they take a soft device, with
// the same options and errors; the Machine, the Manager and MachineConfig
// do not apply (the kernel's timers and retries do).
type Backend interface {
	verbs.Device
	// CMDial connects qp (in RESET, or INIT with receives posted) to
	// the listener at the address, bringing it to RTS, and returns once
	// the connection is established.
	CMDial(ctx context.Context, to netip.AddrPort, qp verbs.QP, p CMParams) (CMConn, error)
	// CMListen listens at the address (unspecified: any of the device's).
	CMListen(ctx context.Context, at netip.AddrPort) (CMListener, error)
}

// CMParams are a connection's parameters for a Backend, from DialOptions
// or AcceptOptions with their defaults applied.
type CMParams struct {
	ResponderResources, InitiatorDepth uint8
	RetryCount, RNRRetryCount          uint8
	PrivateData                        []byte
}

// CMListener is a Backend's listener.
type CMListener interface {
	Accept(ctx context.Context) (CMRequest, error)
	Close() error
}

// CMRequest is a connection request a Backend's listener received.
type CMRequest interface {
	Peer() netip.AddrPort
	Local() netip.AddrPort
	PrivateData() []byte
	ResponderResources() int
	InitiatorDepth() int
	// Accept brings qp to RTS and accepts; it returns once the
	// connection is established.
	Accept(ctx context.Context, qp verbs.QP, p CMParams) (CMConn, error)
	Reject(privateData []byte) error
}

// CMConn is a Backend's connection.
type CMConn interface {
	Local() netip.AddrPort
	Remote() netip.AddrPort
	PeerPrivateData() []byte
	// Done is closed when the connection ends (the peer disconnected, or
	// Close).
	Done() <-chan struct{}
	// Close disconnects (the QP goes to ERROR) and waits, within ctx, for
	// the peer's answer.
	Close(ctx context.Context) error
}

func errNoCM(dev verbs.Device) error {
	return fmt.Errorf("rdmacm: device %s has no connection manager (neither a QP 1 of goroce's nor librdmacm: an ibverbs device needs the ibverbs build tag)", dev.Name())
}

func backendDial(ctx context.Context, b Backend, address string, qp verbs.QP, opts DialOptions) (*Conn, error) {
	if qp == nil || qp.Type() != verbs.QPTRC {
		return nil, errors.New("rdmacm: Dial needs an RC QP")
	}
	ap, err := ParseAddr(address)
	if err != nil {
		return nil, err
	}
	if ap.Addr().IsUnspecified() {
		return nil, fmt.Errorf("rdmacm: dial %q: no host", address)
	}
	if len(opts.PrivateData) > MaxREQPrivate {
		return nil, fmt.Errorf("rdmacm: dial %v: %d bytes of private data, at most %d", ap, len(opts.PrivateData), MaxREQPrivate)
	}
	bc, err := b.CMDial(ctx, ap, qp, CMParams{ResponderResources: depth(opts.ResponderResources),
		InitiatorDepth: depth(opts.InitiatorDepth), RetryCount: retries(opts.RetryCount),
		RNRRetryCount: retries(opts.RNRRetryCount), PrivateData: opts.PrivateData})
	if err != nil {
		return nil, err
	}
	return newBackendConn(bc, qp), nil
}

func backendListen(ctx context.Context, b Backend, address string) (*Listener, error) {
	ap, err := ParseAddr(address)
	if err != nil {
		return nil, err
	}
	bl, err := b.CMListen(ctx, ap)
	if err != nil {
		return nil, err
	}
	return &Listener{dev: b, be: bl, addr: ap, closed: make(chan struct{})}, nil
}

func newBackendConn(bc CMConn, qp verbs.QP) *Conn {
	c := &Conn{be: bc, qp: qp, local: bc.Local(), remote: bc.Remote(), peerPrivate: bc.PeerPrivateData(),
		done: make(chan struct{})}
	go func() {
		<-bc.Done()
		c.mu.Lock()
		ended := c.ended
		c.mu.Unlock()
		if !ended { // the peer disconnected
			toError(qp)
			c.finish(ErrDisconnected)
		}
	}()
	return c
}

// acceptBackend is Request.Accept on a Backend's request.
func (r *Request) acceptBackend(ctx context.Context, qp verbs.QP, opts AcceptOptions) (*Conn, error) {
	if qp == nil || qp.Type() != verbs.QPTRC {
		return nil, errors.New("rdmacm: Accept needs an RC QP")
	}
	bc, err := r.be.Accept(ctx, qp, CMParams{ResponderResources: depth(opts.ResponderResources),
		InitiatorDepth: depth(opts.InitiatorDepth), RNRRetryCount: retries(opts.RNRRetryCount),
		PrivateData: opts.PrivateData})
	if err != nil {
		return nil, err
	}
	return newBackendConn(bc, qp), nil
}
