package engine

import (
	"errors"
	"net/netip"

	"github.com/goroce/goroce/wire"
)

// The general services interface: QP 1, over which the communication
// manager's MADs travel as UD SEND ONLY with Q_Key GSIQKey.
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
	// GSIMADSize is the size of a MAD, the payload of every QP 1 packet.
	GSIMADSize = 256
	// GSISourcePort is the UDP source port of QP 1's packets when
	// Config.SourcePort is zero or Config.PerPacketSourcePort is set:
	// rdma_rxe's, 0xC000 + hash_32(1, 14).
	GSISourcePort = 55410
	// gsiQueueMax bounds the MADs waiting to be sent.
	gsiQueueMax = 256
)

// ErrGSIQueueFull is returned by SendGSI when too many MADs wait to be sent.
var ErrGSIQueueFull = errors.New("engine: GSI send queue full")

// GSIStats counts QP 1's traffic.
type GSIStats struct {
	RxMADs   uint64 // MADs Config.OnGSI took
	TxMADs   uint64 // MADs sent
	Drops    uint64 // QP 1 packets dropped: not a UD SEND ONLY of one MAD, no handler
	QKeyDrop uint64 // QP 1 packets with a Q_Key other than GSIQKey
}

type gsiOut struct {
	to  netip.Addr
	mad [GSIMADSize]byte
}

type gsi struct {
	psn   wire.PSN
	queue []gsiOut
	stats GSIStats
}

// GSIStats returns QP 1's counters.
func (e *Engine) GSIStats() GSIStats { return e.gsi.stats }

// SendGSI queues a MAD (exactly GSIMADSize bytes) to be sent from QP 1 to
// QP 1 at the address given; Output sends it before other traffic.
func (e *Engine) SendGSI(to netip.Addr, mad []byte) error {
	if len(mad) != GSIMADSize {
		return errors.New("engine: a MAD is 256 bytes")
	}
	to = to.Unmap()
	if !e.sameFamily(to) {
		return errors.New("engine: GSI destination must be of the engine's address family")
	}
	if len(e.gsi.queue) >= gsiQueueMax {
		return ErrGSIQueueFull
	}
	e.gsi.queue = append(e.gsi.queue, gsiOut{to: to})
	copy(e.gsi.queue[len(e.gsi.queue)-1].mad[:], mad)
	return nil
}

// gsiInput takes a packet to QP 1 whose ICRC and P_Key were checked.
func (e *Engine) gsiInput(now int64, p *wire.Packet, perr error, from netip.Addr, fromPort uint16) {
	s := &e.gsi.stats
	if perr != nil || p.Opcode() != wire.UDSendOnly || p.PayloadLen != GSIMADSize || e.cfg.OnGSI == nil {
		s.Drops++
		return
	}
	if p.DETH().QKey() != GSIQKey {
		s.QKeyDrop++
		e.stats.QKeyDrops++
		return
	}
	if !e.cfg.OnGSI(now, p.Payload(), from.Unmap(), fromPort) {
		s.Drops++
		return
	}
	s.RxMADs++
}

// gsiOutput builds the next queued MAD's packet into buf.
func (e *Engine) gsiOutput(buf []byte) (int, netip.Addr, bool) {
	for len(e.gsi.queue) > 0 {
		o := &e.gsi.queue[0]
		h := &e.hdr
		*h = wire.Header{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: GSIQPN, PSN: e.gsi.psn, AckReq: true,
			DETH: wire.DETHFields{QKey: GSIQKey, SrcQP: GSIQPN}}
		hl := h.Opcode.Info().HeaderLen
		copy(buf[hl:], o.mad[:])
		sport := e.cfg.SourcePort
		if sport == 0 || e.cfg.PerPacketSourcePort {
			sport = GSISourcePort // rdma_rxe's, where the path can send from it
		}
		to := o.to
		n := e.finish(buf, GSIMADSize, to, sport)
		e.gsi.queue[0] = gsiOut{}
		e.gsi.queue = e.gsi.queue[1:]
		if len(e.gsi.queue) == 0 {
			e.gsi.queue = e.gsi.queue[:0:0]
		}
		if n > 0 {
			e.gsi.psn = e.gsi.psn.Add(1)
			e.gsi.stats.TxMADs++
			return n, to, true
		}
	}
	return 0, netip.Addr{}, false
}
