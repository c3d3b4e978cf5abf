package cm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/goroce/goroce/verbs"
)

// EndpointMessageLen is the length of the message ExchangeEndpoints sends
// each way.
const EndpointMessageLen = 56

// endpointMagic opens an endpoint message; the byte after it is the
// version (1).
const endpointMagic = "GREP"

// AppendEndpoint appends e as the message ExchangeEndpoints sends: "GREP",
// version 1, MTU code, RdAtomic, a zero byte, then big-endian QPN, PSN,
// RKey, 4 zero bytes, Addr, Len, and the 16 bytes of the GID (56 bytes).
func AppendEndpoint(b []byte, e verbs.Endpoint) []byte {
	b = append(b, endpointMagic...)
	b = append(b, 1, byte(e.MTU), e.RdAtomic, 0)
	b = binary.BigEndian.AppendUint32(b, e.QPN)
	b = binary.BigEndian.AppendUint32(b, e.PSN)
	b = binary.BigEndian.AppendUint32(b, e.RKey)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint64(b, e.Addr)
	b = binary.BigEndian.AppendUint64(b, e.Len)
	return append(b, e.GID[:]...)
}

// ParseEndpoint parses a message of AppendEndpoint. Errors match
// ErrProtocol.
func ParseEndpoint(b []byte) (verbs.Endpoint, error) {
	if len(b) != EndpointMessageLen || string(b[:4]) != endpointMagic {
		return verbs.Endpoint{}, fmt.Errorf("%w: not an endpoint message (%d bytes, %q)", ErrProtocol, len(b), b[:min(len(b), 4)])
	}
	if b[4] != 1 {
		return verbs.Endpoint{}, fmt.Errorf("%w: endpoint message version %d, want 1", ErrProtocol, b[4])
	}
	e := verbs.Endpoint{MTU: verbs.MTU(b[5]), RdAtomic: b[6], QPN: binary.BigEndian.Uint32(b[8:]),
		PSN: binary.BigEndian.Uint32(b[12:]), RKey: binary.BigEndian.Uint32(b[16:]),
		Addr: binary.BigEndian.Uint64(b[24:]), Len: binary.BigEndian.Uint64(b[32:]), GID: verbs.GID(b[40:56])}
	if e.MTU != 0 && e.MTU.Bytes() == 0 {
		return verbs.Endpoint{}, fmt.Errorf("%w: endpoint MTU code %d", ErrProtocol, b[5])
	}
	if e.QPN > 0xffffff || e.PSN > 0xffffff {
		return verbs.Endpoint{}, fmt.Errorf("%w: endpoint QPN %#x or PSN %#x beyond 24 bits", ErrProtocol, e.QPN, e.PSN)
	}
	return e, nil
}

// ExchangeEndpoints sends local on conn and returns the Endpoint the other
// side sent, both sides calling it at the same time (the messages cross).
// It gives up when ctx ends (the error then matches ctx's).
func ExchangeEndpoints(ctx context.Context, conn net.Conn, local verbs.Endpoint) (verbs.Endpoint, error) {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Write(AppendEndpoint(make([]byte, 0, EndpointMessageLen), local))
		errc <- err
	}()
	var b [EndpointMessageLen]byte
	_, rerr := io.ReadFull(conn, b[:])
	werr := <-errc
	if err := errors.Join(rerr, werr); err != nil {
		if ctx.Err() != nil {
			return verbs.Endpoint{}, fmt.Errorf("cm: endpoint exchange: %w", ctx.Err())
		}
		return verbs.Endpoint{}, fmt.Errorf("cm: endpoint exchange with %v: %w", conn.RemoteAddr(), err)
	}
	return ParseEndpoint(b[:])
}

// DialEndpoint connects to addr ("host:port") over TCP, swaps Endpoints
// with the AcceptEndpoint there and closes the connection.
func DialEndpoint(ctx context.Context, addr string, local verbs.Endpoint) (verbs.Endpoint, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return verbs.Endpoint{}, fmt.Errorf("cm: connect to %s: %w", addr, err)
	}
	defer c.Close()
	return ExchangeEndpoints(ctx, c, local)
}

// AcceptEndpoint waits on ln for one DialEndpoint (until ctx ends), swaps
// Endpoints with it and closes the connection. It does not close ln.
func AcceptEndpoint(ctx context.Context, ln net.Listener, local verbs.Endpoint) (verbs.Endpoint, error) {
	c, err := acceptContext(ctx, ln, "the other side")
	if err != nil {
		return verbs.Endpoint{}, err
	}
	defer c.Close()
	return ExchangeEndpoints(ctx, c, local)
}
