package soft

import (
	"net/netip"
	"sync/atomic"

	"github.com/goroce/goroce/engine"
)

// GSIHandler receives a MAD that arrived on QP 1 (engine.GSIMADSize bytes,
// valid only during the call) and its sender. It runs on the device's
// driver and must neither block nor call the device: copy the MAD and hand
// it on.
type GSIHandler func(mad []byte, from netip.Addr)

type gsiState struct {
	handler atomic.Pointer[GSIHandler]
}

// SetGSIHandler installs the receiver of QP 1's MADs (the communication
// manager), replacing any other; nil removes it, after which MADs are
// dropped and counted.
func (d *Device) SetGSIHandler(h GSIHandler) {
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

// onGSI is the engine's OnGSI: called on the driver with mu held.
func (d *Device) onGSI(_ int64, mad []byte, from netip.Addr, _ uint16) bool {
	h := d.gsi.handler.Load()
	if h == nil {
		return false
	}
	(*h)(mad, from)
	return true
}
