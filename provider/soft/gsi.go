package soft

import (
	"io"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/cm/ib"
	"github.com/goroce/goroce/engine"
)

type gsiState struct {
	handler atomic.Pointer[func(mad []byte, from netip.Addr)]

	attachMu sync.Mutex
	attached map[any]any
	order    []any

	// rej is the driver's scratch for the REJ of a REQ no handler takes.
	rej [ib.MADSize]byte
}

// SetGSIHandler installs the receiver of QP 1's MADs (the communication
// manager), replacing any other; nil removes it, after which connection
// requests are rejected (REJ reason 8: no listener) and other MADs are
// dropped and counted. The handler gets each MAD (engine.GSIMADSize bytes,
// valid only during the call) and its sender on the device's driver, and
// must neither block nor call the device: it copies the MAD and hands it
// on.
func (d *Device) SetGSIHandler(h func(mad []byte, from netip.Addr)) {
	if h == nil {
		d.gsi.handler.Store(nil)
		return
	}
	d.gsi.handler.Store(&h)
}

// SendMAD sends a MAD (engine.GSIMADSize bytes) from QP 1 to QP 1 at the
// address given, as a UD SEND ONLY with Q_Key engine.GSIQKey.
func (d *Device) SendMAD(to netip.Addr, mad []byte) error {
	if d.closed.Load() {
		return errClosed
	}
	d.mu.Lock()
	err := d.eng.SendGSI(to, mad)
	d.mu.Unlock()
	if err == nil {
		d.kick()
	}
	return err
}

// GSIStats returns QP 1's counters (MADs dropped for want of a handler
// count as drops).
func (d *Device) GSIStats() engine.GSIStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.GSIStats()
}

// onGSI is the engine's OnGSI: called on the driver with mu held. With no
// handler (no connection manager runs on the device), a connection request
// is answered as Linux's ib_cm answers one for a service nobody listens
// on: REJ reason 8, at once, so that the dialer need not wait out its
// retries; other MADs are dropped and counted.
func (d *Device) onGSI(_ int64, mad []byte, from netip.Addr, _ uint16) bool {
	h := d.gsi.handler.Load()
	if h == nil {
		if !ib.RejectNoListener(&d.gsi.rej, mad) {
			return false
		}
		_ = d.eng.SendGSI(from, d.gsi.rej[:]) // lost: the dialer resends its REQ
		return true
	}
	(*h)(mad, from)
	return true
}

// Attach returns the service attached to the device under key (such as
// the connection manager of package cm), creating it with mk on first
// use. An attached service lives as long as the device: Close closes it
// (when it is an io.Closer), before the driver stops, in the reverse
// order of attachment.
func (d *Device) Attach(key any, mk func() any) any {
	g := &d.gsi
	g.attachMu.Lock()
	defer g.attachMu.Unlock()
	if v, ok := g.attached[key]; ok {
		return v
	}
	if g.attached == nil {
		g.attached = map[any]any{}
	}
	v := mk()
	g.attached[key] = v
	g.order = append(g.order, key)
	return v
}

// closeAttached closes the attached services, newest first.
func (d *Device) closeAttached() {
	g := &d.gsi
	g.attachMu.Lock()
	order, attached := g.order, g.attached
	g.order, g.attached = nil, map[any]any{}
	g.attachMu.Unlock()
	for i := len(order) - 1; i >= 0; i-- {
		if c, ok := attached[order[i]].(io.Closer); ok {
			_ = c.Close()
		}
	}
}
