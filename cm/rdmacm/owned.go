package rdmacm

import (
	"context"
	"errors"
	"fmt"

	"github.com/goroce/goroce/verbs"
)

// ConnOptions say what DialConn and Listener.AcceptConn build for a
// connection: a context on the device, a PD, a completion channel, one CQ
// for sends and receives, the memory region and the RC QP (a
// verbs.QPSet), with receives posted before it connects. Zero fields take
// the defaults.
type ConnOptions struct {
	// Mem is the memory registered for the connection (default: MemSize
	// new bytes, MemSize default 64 KiB). Its last Recvs x RecvSize bytes
	// take the receives; the rest is offered to the peer (Conn.Mem).
	Mem     []byte
	MemSize int
	// Recvs receives of RecvSize bytes (default 4096) each are posted
	// before the connection is made (default 0), at the end of Mem,
	// their WRIDs their offsets in it (Conn.Received finds their bytes).
	Recvs, RecvSize int
	// QP tunes the QPSet: the MR's access (default local write, remote
	// write, read and atomic), the CQ's size (default 256), the QP's
	// capacities (default 64 WRs and 1 SGE each way).
	QP verbs.QPSetOptions
	// PrivateData follows the offer in the REQ (at most 36 bytes) or the
	// REP (at most 176).
	PrivateData []byte
	// NoOffer sends PrivateData alone, without this side's offer first
	// (for a peer that expects other private data). The offer is
	// OfferMagic and this side's memory as a RemoteBuffer; a peer's
	// private data that starts with one is read as its offer (Conn.Remote)
	// and the rest is Conn.PeerPrivateData.
	NoOffer bool
	// Dial and Accept tune the connection as in Dial and Request.Accept
	// (their PrivateData is ConnOptions').
	Dial   DialOptions
	Accept AcceptOptions
}

// OfferMagic starts the offer DialConn and AcceptConn put in private data,
// before the RemoteBuffer's 16 bytes.
const OfferMagic = "GRB\x01"

// owned is what a connection of DialConn or AcceptConn owns.
type owned struct {
	ctx      verbs.Context
	set      *verbs.QPSet
	offered  int // bytes of Mem offered to the peer
	noOffer  bool
	peerPriv []byte
	remote   RemoteBuffer
	closed   bool // guarded by the Conn's mu
}

func (o *ConnOptions) defaults() ConnOptions {
	var c ConnOptions
	if o != nil {
		c = *o
	}
	if c.Mem == nil {
		if c.MemSize <= 0 {
			c.MemSize = 64 << 10
		}
		c.Mem = make([]byte, c.MemSize)
	}
	if c.RecvSize <= 0 {
		c.RecvSize = 4096
	}
	return c
}

// build makes a connection's objects and posts its receives.
func build(dev verbs.Device, o ConnOptions) (*owned, error) {
	recv := o.Recvs * o.RecvSize
	if o.Recvs < 0 || recv > len(o.Mem) {
		return nil, fmt.Errorf("rdmacm: %d receives of %d bytes in %d bytes of memory: %w", o.Recvs, o.RecvSize, len(o.Mem), verbs.ErrInvalidAttr)
	}
	if o.QP.Cap == (verbs.QPCap{}) {
		o.QP.Cap = verbs.QPCap{MaxSendWR: 64, MaxRecvWR: uint32(max(64, o.Recvs)), MaxSendSGE: 1, MaxRecvSGE: 1}
	}
	vc, err := dev.Open()
	if err != nil {
		return nil, err
	}
	set, err := verbs.NewQPSet(vc, verbs.QPTRC, o.Mem, &o.QP)
	if err != nil {
		vc.Close()
		return nil, err
	}
	r := &owned{ctx: vc, set: set, offered: len(o.Mem) - recv, noOffer: o.NoOffer}
	if o.Recvs > 0 {
		if err := InitQP(set.QP); err != nil {
			r.close()
			return nil, err
		}
		wrs := make([]verbs.RecvWR, o.Recvs)
		for i := range wrs {
			off := r.offered + i*o.RecvSize
			wrs[i] = verbs.RecvWR{WRID: uint64(off), SGList: set.SGE(off, o.RecvSize)}
		}
		if _, err := set.QP.PostRecv(wrs); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

// privateData is what goes to the peer: the offer, then the application's.
func (r *owned) privateData(app []byte) []byte {
	if r.noOffer {
		return app
	}
	b := RemoteBufferOf(r.set.MR)
	b.Length = uint32(r.offered)
	pd := append(make([]byte, 0, len(OfferMagic)+RemoteBufferSize+len(app)), OfferMagic...)
	return append(b.AppendBinary(pd), app...)
}

// took reads the peer's private data: its offer, if it made one, and the
// application's.
func (r *owned) took(pd []byte) {
	r.peerPriv = pd
	if len(pd) < len(OfferMagic)+RemoteBufferSize || string(pd[:len(OfferMagic)]) != OfferMagic {
		return
	}
	if err := r.remote.UnmarshalBinary(pd[len(OfferMagic):]); err == nil {
		r.peerPriv = pd[len(OfferMagic)+RemoteBufferSize:]
	}
}

func (r *owned) close() error {
	return errors.Join(r.set.Close(), r.ctx.Close())
}

// DialConn connects to an rdma_cm listener at "ip:port" over the device
// as Dial does, with a QP and what it needs built from opts (nil: the
// defaults) and owned by the connection: Close disconnects, then destroys
// them. Unless opts.NoOffer, the REQ's private data starts with this
// side's memory as a RemoteBuffer (Conn.Remote on the other side).
func DialConn(ctx context.Context, dev verbs.Device, address string, opts *ConnOptions) (*Conn, error) {
	o := opts.defaults()
	r, err := build(dev, o)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: dial %s: %w", address, err)
	}
	do := o.Dial
	do.PrivateData = r.privateData(o.PrivateData)
	c, err := Dial(ctx, dev, address, r.set.QP, do)
	if err != nil {
		r.close()
		return nil, err
	}
	c.own = r
	r.took(c.peerPrivate)
	return c, nil
}

// AcceptConn waits for the next request and accepts it with a QP and what
// it needs built from opts (nil: the defaults), as Request.Accept does,
// owned by the connection: Close disconnects, then destroys them. Unless
// opts.NoOffer, the REP's private data starts with this side's memory as
// a RemoteBuffer.
func (l *Listener) AcceptConn(ctx context.Context, opts *ConnOptions) (*Conn, error) {
	o := opts.defaults()
	req, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	r, err := build(l.dev, o)
	if err != nil {
		_ = req.Reject(nil)
		return nil, fmt.Errorf("rdmacm: accept: %w", err)
	}
	ao := o.Accept
	ao.PrivateData = r.privateData(o.PrivateData)
	c, err := req.Accept(ctx, r.set.QP, ao)
	if err != nil {
		r.close()
		return nil, err
	}
	c.own = r
	r.took(c.peerPrivate)
	return c, nil
}

// errNotOwned: the connection's objects are the caller's.
var errNotOwned = errors.New("rdmacm: the connection's QP is the caller's (made by Dial or Request.Accept, not DialConn or AcceptConn)")

// Set returns the verbs objects of a connection made by DialConn or
// AcceptConn (PD, channel, CQ, MR, QP: plain verbs objects, for any verb),
// nil for one whose QP is the caller's. Close destroys them.
func (c *Conn) Set() *verbs.QPSet {
	if c.own == nil {
		return nil
	}
	return c.own.set
}

// Mem returns the memory a DialConn or AcceptConn connection offered its
// peer (ConnOptions.Mem but the receives' part), nil for others.
func (c *Conn) Mem() []byte {
	if c.own == nil {
		return nil
	}
	return c.own.set.MR.Buf()[:c.own.offered]
}

// Remote returns the memory the peer offered in its private data (see
// ConnOptions.NoOffer), the zero RemoteBuffer when it offered none.
func (c *Conn) Remote() RemoteBuffer {
	if c.own == nil {
		return RemoteBuffer{}
	}
	return c.own.remote
}

// Post posts send requests on the connection's QP, waiting for room in
// the send queue until ctx ends (verbs.PostSendContext).
func (c *Conn) Post(ctx context.Context, wrs ...verbs.SendWR) error {
	_, err := verbs.PostSendContext(ctx, c.qp, wrs)
	return err
}

// Wait returns the next completion of a DialConn or AcceptConn
// connection's CQ, waiting on its channel until ctx ends; the error is the
// completion's (WC.Err) when it failed, or the CQ's (CQ.Err) or ctx's.
func (c *Conn) Wait(ctx context.Context) (verbs.WC, error) {
	var wc [1]verbs.WC
	if c.own == nil {
		return wc[0], errNotOwned
	}
	if _, err := c.own.set.Wait(ctx, wc[:]); err != nil {
		return wc[0], err
	}
	return wc[0], wc[0].Err()
}

// Received returns the bytes a completed receive of a DialConn or
// AcceptConn connection (ConnOptions.Recvs) holds, nil for another
// completion.
func (c *Conn) Received(wc verbs.WC) []byte {
	if c.own == nil || wc.Opcode&verbs.WCRecv == 0 || wc.WRID < uint64(c.own.offered) {
		return nil
	}
	buf := c.own.set.MR.Buf()
	if wc.WRID+uint64(wc.ByteLen) > uint64(len(buf)) {
		return nil
	}
	return buf[wc.WRID : wc.WRID+uint64(wc.ByteLen)]
}

// SGE returns the scatter/gather list of n bytes at off in a DialConn or
// AcceptConn connection's memory.
func (c *Conn) SGE(off, n int) []verbs.SGE {
	if c.own == nil {
		return nil
	}
	return c.own.set.SGE(off, n)
}
