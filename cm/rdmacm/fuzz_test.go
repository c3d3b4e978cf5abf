package rdmacm

import (
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/cm/ib"
)

// FuzzMachine feeds arbitrary MADs, from the peer or a stranger, to the
// passive side of an established connection that also listens. It must not
// panic; a message whose comm IDs are not the connection's must leave it
// established, its QP untouched (no event for it); and once every timer
// has run, nothing but the connection is left.
func FuzzMachine(f *testing.F) {
	seed := func(m ib.Message) []byte { return ib.AppendMAD(nil, 1, m) }
	req := &ib.REQ{LocalCommID: 5, ServiceID: testService, LocalQPN: 0x30}
	(&ib.CMAHeader{SrcPort: 1, Src: addrA, Dst: addrB}).Marshal(req.PrivateData[:])
	for _, m := range []ib.Message{req, &ib.REP{}, &ib.RTU{}, &ib.REJ{}, &ib.MRA{}, &ib.DREQ{}, &ib.DREP{}, &ib.SIDRREQ{}} {
		f.Add(seed(m), false, 2)
	}
	f.Fuzz(func(t *testing.T, mad []byte, stranger bool, n int) {
		w := newWorld(t)
		w.listen()
		idA, idB := w.establish(0x19)
		from := addrA
		if stranger {
			from = addrX
		}
		n = 1 + n&3
		for range n {
			w.b.HandleMAD(w.now, mad, from)
		}
		var evs []Event
		for ev, ok := w.b.Next(); ok; ev, ok = w.b.Next() {
			evs = append(evs, ev)
		}
		ours := len(mad) >= 32 && !stranger && (binary.BigEndian.Uint32(mad[28:]) == idB || binary.BigEndian.Uint32(mad[24:]) == idB)
		if !ours {
			if w.b.State(idB) != StateEstablished {
				t.Fatalf("state %v after a message not for the connection", w.b.State(idB))
			}
			for _, ev := range evs {
				if ev.ID == idB && ev.Kind != EvSend {
					t.Fatalf("event %v for the connection", ev)
				}
			}
		}
		// Run every timer: only the connection (if still up) may remain.
		for i := 0; i < 1000 && w.b.NextDeadline() != 0; i++ {
			w.now = max(w.now, w.b.NextDeadline())
			w.b.Tick(w.now)
			for _, ok := w.b.Next(); ok; _, ok = w.b.Next() {
			}
		}
		want := 0
		if w.b.State(idB) == StateEstablished {
			want = 1
		}
		if w.b.Conns() != want || len(w.b.byRemote) > want || len(w.b.timewait) != 0 || w.b.NextDeadline() != 0 {
			t.Fatalf("left behind: %d conns, %d remote IDs, %d time-wait", w.b.Conns(), len(w.b.byRemote), len(w.b.timewait))
		}
		_ = idA
	})
}
