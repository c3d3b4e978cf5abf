package rdmacm

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/cm/ib"
	"github.com/goroce/goroce/verbs"
)

var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
	addrX = netip.MustParseAddr("10.0.0.66")
)

const testService = 0x01060000 | 7174

// world is two machines and the MADs between them, on a manual clock.
type world struct {
	t      *testing.T
	now    int64
	a, b   *Machine
	evA    []Event // non-send events of each side, in order
	evB    []Event
	wire   []Event // sends not yet delivered, in order
	drop   func(from netip.Addr, attr ib.AttrID) bool
	mangle func(from netip.Addr, mad []byte) // changes a MAD on the wire
	sentBy map[netip.Addr][]ib.AttrID
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, now: 1e9, sentBy: map[netip.Addr][]ib.AttrID{}}
	w.a = NewMachine(MachineConfig{Local: addrA, GUID: 0xA, Seed: [32]byte{1}})
	w.b = NewMachine(MachineConfig{Local: addrB, GUID: 0xB, Seed: [32]byte{2}})
	return w
}

// pump collects each machine's events and delivers the MADs in flight until
// nothing moves.
func (w *world) pump() {
	for {
		moved := false
		for _, side := range []struct {
			m    *Machine
			from netip.Addr
			evs  *[]Event
		}{{w.a, addrA, &w.evA}, {w.b, addrB, &w.evB}} {
			for ev, ok := side.m.Next(); ok; ev, ok = side.m.Next() {
				moved = true
				if ev.Kind != EvSend {
					*side.evs = append(*side.evs, ev)
					continue
				}
				h, _ := ib.ParseMADHeader(ev.MAD[:])
				w.sentBy[side.from] = append(w.sentBy[side.from], h.AttrID)
				if w.drop != nil && w.drop(side.from, h.AttrID) {
					continue
				}
				ev.From = side.from
				if w.mangle != nil {
					w.mangle(side.from, ev.MAD[:])
				}
				w.wire = append(w.wire, ev)
			}
		}
		for len(w.wire) > 0 {
			moved = true
			ev := w.wire[0]
			w.wire = w.wire[1:]
			switch ev.To {
			case addrA:
				w.a.HandleMAD(w.now, ev.MAD[:], ev.From)
			case addrB:
				w.b.HandleMAD(w.now, ev.MAD[:], ev.From)
			}
		}
		if !moved {
			return
		}
	}
}

// advance moves the clock to both machines' next deadline and ticks.
func (w *world) advance() bool {
	d := w.a.NextDeadline()
	if db := w.b.NextDeadline(); db != 0 && (d == 0 || db < d) {
		d = db
	}
	if d == 0 {
		return false
	}
	w.now = max(w.now, d)
	w.a.Tick(w.now)
	w.b.Tick(w.now)
	w.pump()
	return true
}

func (w *world) take(evs *[]Event, kind EventKind) Event {
	w.t.Helper()
	for i, ev := range *evs {
		if ev.Kind == kind {
			*evs = append((*evs)[:i], (*evs)[i+1:]...)
			return ev
		}
	}
	w.t.Fatalf("no %v event (have %v)", kind, *evs)
	return Event{}
}

func (w *world) none(evs []Event) {
	w.t.Helper()
	if len(evs) != 0 {
		w.t.Fatalf("unexpected events %v", evs)
	}
}

func (w *world) listen() uint32 {
	id, err := w.b.Listen(testService, netip.Addr{})
	if err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *world) connect(qpn uint32) uint32 {
	id, err := w.a.Connect(w.now, ConnectParams{Peer: addrB, ServiceID: testService, QPN: qpn, PSN: 0x111111,
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, SrcPort: 40000,
		PrivateData: []byte("hello")})
	if err != nil {
		w.t.Fatal(err)
	}
	w.pump()
	return id
}

// establish runs a whole handshake and returns the IDs of both ends.
func (w *world) establish(qpnA uint32) (idA, idB uint32) {
	w.t.Helper()
	idA = w.connect(qpnA)
	req := w.take(&w.evB, EvRequest)
	if err := w.b.Accept(w.now, req.ID, AcceptParams{QPN: 0x21, PSN: 0x222222, ResponderResources: 1,
		InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		w.t.Fatal(err)
	}
	w.pump()
	w.take(&w.evA, EvReply)
	if err := w.a.Ready(w.now, idA); err != nil {
		w.t.Fatal(err)
	}
	w.pump()
	w.take(&w.evA, EvEstablished)
	w.take(&w.evB, EvEstablished)
	return idA, req.ID
}

func TestHandshake(t *testing.T) {
	w := newWorld(t)
	w.listen()
	idA := w.connect(0x19)
	req := w.take(&w.evB, EvRequest)
	if req.From != addrA || string(req.PrivateData) != "hello" || req.REQ.PrivateLen != 1+ib.CMAHeaderSize+5 ||
		req.Header.Src != addrA || req.Header.Dst != addrB || req.Header.SrcPort != 40000 {
		t.Fatalf("request %+v", req)
	}
	r := &req.REQ
	if r.LocalQPN != 0x19 || r.StartingPSN != 0x111111 || r.ServiceID != testService || r.LocalCAGUID != 0xA ||
		r.PathMTU != 3 || r.RetryCount != 7 || r.RNRRetryCount != 7 || r.MaxCMRetries != 15 ||
		r.RemoteCMResponseTimeout != 20 || r.LocalCMResponseTimeout != 20 || r.LocalACKTimeout != 19 ||
		r.PKey != 0xFFFF || r.PrimaryLocalLID != 0xFFFF || r.HopLimit != 64 || r.FlowLabel != ib.FlowLabel(40000, 7174) {
		t.Fatalf("REQ %+v", r)
	}
	if w.b.State(req.ID) != StateREQReceived || w.a.State(idA) != StateREQSent {
		t.Fatal("states after REQ")
	}
	rr, id := AnswerDepths(r, 4, 4)
	rep := ib.REP{LocalQPN: 0x21, StartingPSN: 0x222222, ResponderResources: rr, InitiatorDepth: id, RNRRetryCount: 7}
	if err := w.b.Accept(w.now, req.ID, AcceptParams{QPN: 0x21, PSN: 0x222222, ResponderResources: rr,
		InitiatorDepth: id, RNRRetryCount: 7, PrivateData: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	w.pump()
	reply := w.take(&w.evA, EvReply)
	if reply.REP.LocalQPN != 0x21 || reply.REP.StartingPSN != 0x222222 || reply.REP.RemoteCommID != idA ||
		reply.REP.LocalCommID != req.ID || string(ib.Private(reply.REP.PrivateData[:], reply.REP.PrivateLen)) != "ok" || reply.REP.TargetACKDelay != 15 {
		t.Fatalf("REP %+v", reply.REP)
	}
	// The QP plans of both ends meet: each sends from the PSN the other receives from.
	pp := PassivePlan(r, &rep, addrA)
	ap := ActivePlan(r, &reply.REP, addrB)
	if pp[2].Attr.SQPSN != ap[1].Attr.RQPSN || ap[2].Attr.SQPSN != pp[1].Attr.RQPSN ||
		pp[1].Attr.DestQPN != 0x19 || ap[1].Attr.DestQPN != 0x21 || ap[1].Attr.PathMTU != verbs.MTU1024 ||
		pp[2].Attr.MaxRdAtomic != ap[1].Attr.MaxDestRdAtomic || ap[2].Attr.MaxRdAtomic != pp[1].Attr.MaxDestRdAtomic ||
		pp[1].Attr.AHAttr.DGID.Addr() != addrA || ap[1].Attr.AHAttr.DGID.Addr() != addrB ||
		pp[0].Attr.AccessFlags&verbs.AccessRemoteRead == 0 || ap[2].Attr.Timeout != 19 || ap[2].Attr.RNRRetry != 7 {
		t.Fatalf("plans\npassive %+v\nactive %+v", pp, ap)
	}
	if err := w.b.Accept(w.now, req.ID, AcceptParams{}); err != ErrState {
		t.Fatalf("second Accept: %v", err)
	}
	if err := w.a.Ready(w.now, idA); err != nil {
		t.Fatal(err)
	}
	w.pump()
	w.take(&w.evA, EvEstablished)
	w.take(&w.evB, EvEstablished)
	w.none(w.evA)
	w.none(w.evB)
	if w.a.State(idA) != StateEstablished || w.b.State(req.ID) != StateEstablished {
		t.Fatal("not established")
	}
	if d := w.a.NextDeadline() + w.b.NextDeadline(); d != 0 {
		t.Fatalf("timers left running: %d", d)
	}
	want := map[netip.Addr][]ib.AttrID{addrA: {ib.AttrREQ, ib.AttrRTU}, addrB: {ib.AttrREP}}
	for k, v := range want {
		if !equalAttrs(w.sentBy[k], v) {
			t.Errorf("%v sent %v, want %v", k, w.sentBy[k], v)
		}
	}
}

func equalAttrs(a, b []ib.AttrID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRejects(t *testing.T) {
	t.Run("no listener", func(t *testing.T) {
		w := newWorld(t)
		id := w.connect(0x19)
		ev := w.take(&w.evA, EvRejected)
		if ev.ID != id || ev.Reason != ib.RejInvalidServiceID || w.a.Conns() != 0 || w.b.Conns() != 0 {
			t.Fatalf("%+v conns %d %d", ev, w.a.Conns(), w.b.Conns())
		}
		if st := w.b.Stats(); st.Rejects != 1 || st.NoListenerRejects != 1 || st.StaleRejects != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("listener on another address", func(t *testing.T) {
		w := newWorld(t)
		if _, err := w.b.Listen(testService, addrX); err != nil {
			t.Fatal(err)
		}
		w.connect(0x19)
		if ev := w.take(&w.evA, EvRejected); ev.Reason != ib.RejInvalidServiceID {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("application", func(t *testing.T) {
		w := newWorld(t)
		w.listen()
		w.connect(0x19)
		req := w.take(&w.evB, EvRequest)
		if err := w.b.Reject(w.now, req.ID, ib.RejConsumer, []byte("go away")); err != nil {
			t.Fatal(err)
		}
		w.pump()
		ev := w.take(&w.evA, EvRejected)
		if ev.Reason != ib.RejConsumer || string(ev.PrivateData[:7]) != "go away" || w.a.Conns()+w.b.Conns() != 0 {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("active rejects the REP", func(t *testing.T) {
		w := newWorld(t)
		w.listen()
		idA := w.connect(0x19)
		req := w.take(&w.evB, EvRequest)
		w.b.Accept(w.now, req.ID, AcceptParams{QPN: 0x21})
		w.pump()
		w.take(&w.evA, EvReply)
		if err := w.a.Reject(w.now, idA, ib.RejNoResources, nil); err != nil {
			t.Fatal(err)
		}
		w.pump()
		if ev := w.take(&w.evB, EvRejected); ev.Reason != ib.RejNoResources || w.a.Conns()+w.b.Conns() != 0 {
			t.Fatalf("%+v", ev)
		}
	})
	t.Run("address in use", func(t *testing.T) {
		w := newWorld(t)
		w.listen()
		if _, err := w.b.Listen(testService, addrB); err != ErrAddrInUse {
			t.Fatal(err)
		}
	})
	t.Run("private data too long", func(t *testing.T) {
		w := newWorld(t)
		if _, err := w.a.Connect(w.now, ConnectParams{Peer: addrB, PrivateData: make([]byte, 57)}); err == nil {
			t.Fatal("57 bytes accepted")
		}
	})
	t.Run("unlisten rejects pending", func(t *testing.T) {
		w := newWorld(t)
		l := w.listen()
		w.connect(0x19)
		w.take(&w.evB, EvRequest)
		w.b.Unlisten(w.now, l)
		w.pump()
		if ev := w.take(&w.evA, EvRejected); ev.Reason != ib.RejConsumer {
			t.Fatalf("%+v", ev)
		}
	})
}

// TestREQRetries: a REQ nobody answers is resent every 2 x ms(18) + ms(20)
// (6.4 s), 15 times, then the connection times out; one that gets through
// late still connects.
func TestREQRetries(t *testing.T) {
	w := newWorld(t)
	w.drop = func(netip.Addr, ib.AttrID) bool { return true }
	start := w.now
	id := w.connect(0x19)
	var times []int64
	for w.advance() {
		times = append(times, w.now-start)
	}
	ev := w.take(&w.evA, EvTimeout)
	if ev.ID != id || w.a.Conns() != 0 {
		t.Fatalf("%+v", ev)
	}
	interval := 2*ib.TimeoutNanos(18) + ib.TimeoutNanos(20)
	if len(w.sentBy[addrA]) != 16 || len(times) != 16 || times[0] != interval || times[15] != 16*interval {
		t.Fatalf("sent %d REQs at %v", len(w.sentBy[addrA]), times)
	}

	// Lose the first two, then connect.
	w = newWorld(t)
	w.listen()
	n := 0
	w.drop = func(from netip.Addr, a ib.AttrID) bool { n++; return a == ib.AttrREQ && n <= 2 }
	w.connect(0x19)
	w.advance()
	w.advance()
	w.take(&w.evB, EvRequest)
	w.none(w.evA)
}

// TestDuplicates: a REQ resent while the application decides gets an MRA,
// which stretches the active side's timer; a lost RTU is recovered by the
// REP's resend and the RTU sent again; an RTU or REP after establishment
// changes nothing.
func TestDuplicates(t *testing.T) {
	w := newWorld(t)
	w.listen()
	idA := w.connect(0x19)
	req := w.take(&w.evB, EvRequest)
	before := w.a.NextDeadline()
	w.now = before
	w.a.Tick(w.now) // the REQ goes again
	w.pump()
	if got := w.sentBy[addrB]; !equalAttrs(got, []ib.AttrID{ib.AttrMRA}) {
		t.Fatalf("B answered the duplicate REQ with %v", got)
	}
	if d := w.a.NextDeadline(); d < w.now+ib.TimeoutNanos(22) {
		t.Fatalf("MRA did not stretch the REQ timer: %d", d-w.now)
	}
	w.none(w.evB) // no second request
	// RTU lost.
	w.drop = func(from netip.Addr, a ib.AttrID) bool { return a == ib.AttrRTU && len(w.sentBy[addrA]) <= 3 }
	w.b.Accept(w.now, req.ID, AcceptParams{QPN: 0x21, PSN: 5})
	w.pump()
	w.take(&w.evA, EvReply)
	w.a.Ready(w.now, idA)
	w.pump()
	w.take(&w.evA, EvEstablished)
	w.none(w.evB)
	w.advance() // REP again; A answers with the RTU
	w.take(&w.evB, EvEstablished)
	if got := w.sentBy[addrA]; !equalAttrs(got, []ib.AttrID{ib.AttrREQ, ib.AttrREQ, ib.AttrRTU, ib.AttrRTU}) {
		t.Fatalf("A sent %v", got)
	}
	if w.a.Stats().Duplicates != 1 || w.b.Stats().Duplicates != 1 {
		t.Fatalf("duplicates %d %d", w.a.Stats().Duplicates, w.b.Stats().Duplicates)
	}
	if w.a.NextDeadline() != 0 || w.b.NextDeadline() != 0 {
		t.Fatal("timers left")
	}
}

// TestDisconnect: DREQ/DREP, a lost DREP, a DREQ for nothing, both at
// once, and time-wait.
func TestDisconnect(t *testing.T) {
	t.Run("clean", func(t *testing.T) {
		w := newWorld(t)
		w.listen()
		idA, idB := w.establish(0x19)
		if err := w.a.Disconnect(w.now, idA); err != nil {
			t.Fatal(err)
		}
		w.pump()
		w.take(&w.evB, EvDisconnected)
		w.take(&w.evA, EvClosed)
		if w.a.State(idA) != StateTimeWait || w.b.State(idB) != StateTimeWait {
			t.Fatal("not in time-wait")
		}
		// A new REQ from the same QPN during time-wait: REJ 10.
		w.connect(0x19)
		if ev := w.take(&w.evA, EvRejected); ev.Reason != ib.RejStaleConn {
			t.Fatalf("%+v", ev)
		}
		if st := w.b.Stats(); st.Rejects != 1 || st.StaleRejects != 1 {
			t.Fatalf("after a stale REQ: %+v", st)
		}
		// Another QPN is fine.
		w.connect(0x1A)
		w.take(&w.evB, EvRequest)
		w.b.Reject(w.now, w.b.conns[firstID(w.b, StateREQReceived)].id, ib.RejConsumer, nil)
		w.pump()
		w.take(&w.evA, EvRejected)
		if st := w.b.Stats(); st.Rejects != 2 || st.StaleRejects != 1 || st.NoListenerRejects != 0 {
			t.Fatalf("a consumer's REJ counted as stale: %+v", st)
		}
		for w.advance() {
		}
		if w.a.Conns() != 0 || w.b.Conns() != 0 || len(w.b.timewait) != 0 {
			t.Fatalf("left: %d %d %d", w.a.Conns(), w.b.Conns(), len(w.b.timewait))
		}
		w.connect(0x19) // time-wait over
		w.take(&w.evB, EvRequest)
	})
	t.Run("DREP lost", func(t *testing.T) {
		w := newWorld(t)
		w.listen()
		idA, _ := w.establish(0x19)
		w.drop = func(from netip.Addr, a ib.AttrID) bool { return a == ib.AttrDREP && len(w.sentBy[addrB]) == 2 }
		w.a.Disconnect(w.now, idA)
		w.pump()
		w.take(&w.evB, EvDisconnected)
		w.none(w.evA)
		for w.a.State(idA) == StateDREQSent && w.advance() { // DREQ again: B answers
		}
		w.take(&w.evA, EvClosed)
		if n := countAttr(w.sentBy[addrB], ib.AttrDREP); n != 2 {
			t.Fatalf("%d DREPs", n)
		}
		w.none(w.evB)
	})
	t.Run("peer gone", func(t *testing.T) {
		w := newWorld(t)
		w.listen()
		idA, _ := w.establish(0x19)
		w.drop = func(from netip.Addr, a ib.AttrID) bool { return from == addrA }
		w.a.Disconnect(w.now, idA)
		for w.a.State(idA) == StateDREQSent && w.advance() {
		}
		w.take(&w.evA, EvClosed)
		if n := len(w.sentBy[addrA]); n != 2+16 {
			t.Fatalf("A sent %d MADs", n)
		}
	})
	t.Run("both at once", func(t *testing.T) {
		w := newWorld(t)
		w.listen()
		idA, idB := w.establish(0x19)
		w.a.Disconnect(w.now, idA)
		w.b.Disconnect(w.now, idB)
		w.pump()
		w.take(&w.evA, EvClosed)
		w.take(&w.evB, EvClosed)
		w.none(w.evA)
		w.none(w.evB)
	})
	t.Run("unknown DREQ", func(t *testing.T) {
		w := newWorld(t)
		var mad [ib.MADSize]byte
		ib.AppendMAD(mad[:0], 77, &ib.DREQ{LocalCommID: 5, RemoteCommID: 6, RemoteQPN: 7})
		w.b.HandleMAD(w.now, mad[:], addrA)
		ev, ok := w.b.Next()
		if !ok || ev.Kind != EvSend || ev.To != addrA {
			t.Fatalf("%+v", ev)
		}
		h, body, _ := ib.CheckCM(ev.MAD[:])
		m, _ := ib.Parse(h.AttrID, body)
		drep, ok := m.(*ib.DREP)
		if !ok || h.TID != 77 || drep.LocalCommID != 6 || drep.RemoteCommID != 5 {
			t.Fatalf("%v %+v", h, m)
		}
	})
}

func firstID(m *Machine, s ConnState) uint32 {
	for id, c := range m.conns {
		if c.state == s {
			return id
		}
	}
	return 0
}

// TestREPTimeout: a passive side whose REP is never answered gives up
// after the REQ's MaxCMRetries, with a REJ; a request the application
// never answers is rejected when the MRA timeout ends.
func TestREPTimeout(t *testing.T) {
	w := newWorld(t)
	w.listen()
	w.connect(0x19)
	req := w.take(&w.evB, EvRequest)
	w.drop = func(from netip.Addr, a ib.AttrID) bool { return from == addrB && a == ib.AttrREP }
	w.b.Accept(w.now, req.ID, AcceptParams{QPN: 0x21})
	w.pump()
	for w.b.Conns() != 0 && w.advance() {
	}
	w.take(&w.evB, EvTimeout)
	// A's REQ gives up at the same time (its resends meet a REP_SENT
	// connection, which ignores them).
	w.take(&w.evA, EvTimeout)
	if n := countAttr(w.sentBy[addrB], ib.AttrREP); n != 16 {
		t.Fatalf("%d REPs", n)
	}

	w = newWorld(t)
	w.listen()
	w.connect(0x19)
	w.take(&w.evB, EvRequest)
	w.drop = func(from netip.Addr, a ib.AttrID) bool { return a == ib.AttrREQ } // resent REQs lost
	for w.b.Conns() != 0 && w.advance() {
	}
	w.take(&w.evB, EvTimeout)
	if ev := w.take(&w.evA, EvRejected); ev.Reason != ib.RejTimeout {
		t.Fatalf("%+v", ev)
	}
}

func countAttr(s []ib.AttrID, a ib.AttrID) int {
	n := 0
	for _, x := range s {
		if x == a {
			n++
		}
	}
	return n
}

// TestForged: messages whose comm IDs or sender do not match a
// connection change nothing.
func TestForged(t *testing.T) {
	w := newWorld(t)
	w.listen()
	idA, idB := w.establish(0x19)
	cA, cB := w.a.conns[idA], w.b.conns[idB]
	forged := []struct {
		to   *Machine
		from netip.Addr
		msg  ib.Message
	}{
		{w.b, addrA, &ib.DREQ{LocalCommID: idA + 1, RemoteCommID: idB, RemoteQPN: 0x21}},
		{w.b, addrA, &ib.DREQ{LocalCommID: idA, RemoteCommID: idB, RemoteQPN: 0x22}},
		{w.b, addrX, &ib.DREQ{LocalCommID: idA, RemoteCommID: idB, RemoteQPN: 0x21}},
		{w.a, addrB, &ib.DREQ{LocalCommID: idB, RemoteCommID: idA ^ 1, RemoteQPN: 0x19}},
		{w.a, addrB, &ib.REJ{LocalCommID: idB, RemoteCommID: idA, Reason: 28}},
		{w.a, addrX, &ib.REP{LocalCommID: 9, RemoteCommID: idA}},
		{w.a, addrB, &ib.REP{LocalCommID: 9, RemoteCommID: idA}},
		{w.b, addrA, &ib.RTU{LocalCommID: 9, RemoteCommID: idB}},
		{w.a, addrB, &ib.DREP{LocalCommID: idB, RemoteCommID: idA}},
		{w.a, addrB, &ib.MRA{LocalCommID: idB, RemoteCommID: idA}},
		{w.b, addrA, &ib.SIDRREQ{RequestID: 1}},
	}
	for _, f := range forged {
		var mad [ib.MADSize]byte
		ib.AppendMAD(mad[:0], 1, f.msg)
		f.to.HandleMAD(w.now, mad[:], f.from)
		w.pump()
	}
	w.none(w.evA)
	w.none(w.evB)
	if cA.state != StateEstablished || cB.state != StateEstablished || w.a.NextDeadline() != 0 || w.b.NextDeadline() != 0 {
		t.Fatalf("states %v %v", cA.state, cB.state)
	}
	if w.a.Stats().Unmatched+w.b.Stats().Unmatched < 9 {
		t.Fatalf("unmatched %d %d", w.a.Stats().Unmatched, w.b.Stats().Unmatched)
	}
	// Not CM at all.
	w.b.HandleMAD(w.now, make([]byte, 10), addrA)
	w.b.HandleMAD(w.now, make([]byte, 256), addrA)
	if w.b.Stats().Malformed != 2 {
		t.Fatal("malformed not counted")
	}
}

// TestQuickREQRetries: with QuickRetry a REQ is resent at 50, 150, 250 ms
// ... (every 100 ms) for the usual interval, then MaxRetries times as Linux
// resends;
// a listener that comes up 300 ms after the dial gets the REQ resent at
// 350 ms; an MRA ends the quick resends.
func TestQuickREQRetries(t *testing.T) {
	const q = int64(50e6)
	w := newWorld(t)
	w.a = NewMachine(MachineConfig{Local: addrA, GUID: 0xA, Seed: [32]byte{1}, QuickRetry: q})
	w.drop = func(netip.Addr, ib.AttrID) bool { return true }
	start := w.now
	w.connect(0x19)
	var times []int64
	for w.advance() {
		times = append(times, w.now-start)
	}
	w.take(&w.evA, EvTimeout)
	interval := 2*ib.TimeoutNanos(18) + ib.TimeoutNanos(20)
	var want []int64
	at := int64(0)
	for d := q; at+d < interval; d = min(2*d, 2*q) {
		at += d
		want = append(want, at)
	}
	quick := len(want)
	at = 0
	for i := 0; i < 16; i++ {
		at += interval
		want = append(want, at)
	}
	if len(times) != len(want) || times[0] != q || times[quick] != want[quick] || times[len(times)-1] != want[len(want)-1] {
		t.Fatalf("REQs resent at %v, want %v", times, want)
	}
	if s := w.a.Stats(); s.QuickResent != uint64(quick) || s.Resent != uint64(quick+15) {
		t.Fatalf("stats %+v, want %d quick resends of %d", s, quick, quick+15)
	}

	// The listener comes 300 ms after the dial: the 350 ms resend finds it.
	w = newWorld(t)
	w.a = NewMachine(MachineConfig{Local: addrA, GUID: 0xA, Seed: [32]byte{1}, QuickRetry: q})
	start = w.now
	w.connect(0x19)
	w.take(&w.evA, EvRejected) // no listener yet: REJ 8 at once
	w.none(w.evA)
	w.drop = func(from netip.Addr, a ib.AttrID) bool { return w.now-start < 300e6 } // B's device is not up
	w.connect(0x1a)
	for w.a.NextDeadline()-start < 300e6 && w.advance() {
	}
	w.listen()
	w.advance()
	w.take(&w.evB, EvRequest)
	if d := w.now - start; d != 350e6 {
		t.Fatalf("the REQ reached the listener %v after the dial, want 350ms", d)
	}
	w.none(w.evA)
}

// TestPrivateDataLength: goroce says how many bytes of private data it
// sent (ib.REQ.PrivateLen, REP.PrivateLen), so the peer gets exactly them,
// none included; a REQ that does not say (Linux's) gives all 56 bytes, and
// one that says too few for rdma_cm's header is read whole.
func TestPrivateDataLength(t *testing.T) {
	for _, n := range []int{0, 1, 16, MaxREQPrivate} {
		w := newWorld(t)
		w.listen()
		pd := make([]byte, n)
		for i := range pd {
			pd[i] = byte(i + 1)
		}
		if _, err := w.a.Connect(w.now, ConnectParams{Peer: addrB, ServiceID: testService, QPN: 0x19, PrivateData: pd}); err != nil {
			t.Fatal(err)
		}
		w.pump()
		req := w.take(&w.evB, EvRequest)
		if string(req.PrivateData) != string(pd) {
			t.Errorf("%d bytes sent, %d received", n, len(req.PrivateData))
		}
		rep := make([]byte, 3*n)
		if err := w.b.Accept(w.now, req.ID, AcceptParams{QPN: 0x21, PrivateData: rep}); err != nil {
			t.Fatal(err)
		}
		w.pump()
		reply := w.take(&w.evA, EvReply)
		if got := ib.Private(reply.REP.PrivateData[:], reply.REP.PrivateLen); len(got) != len(rep) {
			t.Errorf("REP: %d bytes sent, %d received", len(rep), len(got))
		}
	}
	// A REQ that does not say (Linux's) gets a REP whose reserved byte 15
	// is 0, as IBA has it: Linux's rdma_cm refuses a REP with it set.
	w := newWorld(t)
	w.listen()
	var rep15 []byte
	w.mangle = func(from netip.Addr, mad []byte) {
		switch h, _ := ib.ParseMADHeader(mad); h.AttrID {
		case ib.AttrREQ:
			mad[ib.HeaderSize+4] = 0
		case ib.AttrREP:
			rep15 = append(rep15, mad[ib.HeaderSize+15])
		}
	}
	if _, err := w.a.Connect(w.now, ConnectParams{Peer: addrB, ServiceID: testService, QPN: 0x19, PrivateData: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	w.pump()
	req := w.take(&w.evB, EvRequest)
	if err := w.b.Accept(w.now, req.ID, AcceptParams{QPN: 0x21, PrivateData: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	w.pump()
	if len(rep15) != 1 || rep15[0] != 0 {
		t.Errorf("REP byte 15 to a peer that did not say its length: %v, want [0]", rep15)
	}
	for _, plen := range []uint8{0, 1, ib.CMAHeaderSize} { // not said; too few for the header
		r := ib.REQ{PrivateLen: plen}
		if got := reqPrivate(&r); len(got) != MaxREQPrivate {
			t.Errorf("PrivateLen %d: %d bytes, want %d", plen, len(got), MaxREQPrivate)
		}
	}
}

// TestRefusedUntil: a connection with RefusedUntil takes a REJ 8 before
// then as "not yet" and sends the same REQ (same comm ID) RefusedResend
// later, so that the listener that comes meanwhile answers it; after
// RefusedUntil a REJ 8 ends it.
func TestRefusedUntil(t *testing.T) {
	w := newWorld(t)
	start := w.now
	id, err := w.a.Connect(w.now, ConnectParams{Peer: addrB, ServiceID: testService, QPN: 0x19, RefusedUntil: w.now + 100e6})
	if err != nil {
		t.Fatal(err)
	}
	w.pump() // REJ 8 from B: no listener
	w.none(w.evA)
	if s := w.a.Stats(); s.RefusedResends != 1 || w.a.State(id) != StateREQSent {
		t.Fatalf("after the first REJ 8: %+v, %v", s, w.a.State(id))
	}
	w.advance() // the REQ again, 10 ms later: refused again
	if d := w.now - start; d != RefusedResend {
		t.Fatalf("the REQ was sent again %v after the REJ, want %v", d, RefusedResend)
	}
	w.listen()
	w.advance()
	req := w.take(&w.evB, EvRequest)
	if req.REQ.LocalCommID != id {
		t.Fatalf("the listener got comm ID %#x, want the connection's %#x", req.REQ.LocalCommID, id)
	}
	// After RefusedUntil, a refusal ends the connection.
	w = newWorld(t)
	id, _ = w.a.Connect(w.now, ConnectParams{Peer: addrB, ServiceID: testService, QPN: 0x19, RefusedUntil: w.now})
	w.pump()
	if ev := w.take(&w.evA, EvRejected); ev.ID != id || ev.Reason != ib.RejInvalidServiceID {
		t.Fatalf("%+v", ev)
	}
}
