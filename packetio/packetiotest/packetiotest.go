package packetiotest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio"
)

// NewPair returns two connected Conns: packets transmitted on a to
// b.LocalAddr() arrive at b, and back. Run closes them at the end of each
// test (closing twice is allowed to fail).
type NewPair func(t *testing.T) (a, b packetio.Conn)

// Run runs the contract tests as subtests of t.
func Run(t *testing.T, newPair NewPair) {
	tests := []struct {
		name string
		f    func(*testing.T, packetio.Conn, packetio.Conn)
	}{
		{"RoundTrip", testRoundTrip},
		{"BatchOrder", testBatchOrder},
		{"BuffersStayValid", testBuffersStayValid},
		{"Deadline", testDeadline},
		{"PastDeadlinePolls", testPastDeadlinePolls},
		{"WakeBlocked", testWakeBlocked},
		{"WakePending", testWakePending},
		{"CloseUnblocks", testCloseUnblocks},
		{"TxBatchLending", testTxBatchLending},
		{"TransmitErrors", testTransmitErrors},
		{"NoAllocs", testNoAllocs},
		{"Gather", testGather},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := newPair(t)
			t.Cleanup(func() { a.Close(); b.Close() })
			tt.f(t, a, b)
		})
	}
}

// payload returns a deterministic packet body for sequence number seq.
func payload(dst []byte, seq, n int) []byte {
	dst = dst[:0]
	for i := range n {
		dst = append(dst, byte(seq*7+i))
	}
	if n >= 4 {
		binary.BigEndian.PutUint32(dst, uint32(seq))
	}
	return dst
}

// Send fills and transmits one batch: packet i of the batch carries
// payload(seq0+i) of length size. It fails the test unless all are sent.
func Send(t testing.TB, c, to packetio.Conn, seq0, n, size int) {
	t.Helper()
	batch := c.TxBatch(n)
	if len(batch) != n {
		t.Fatalf("TxBatch(%d) lent %d packets", n, len(batch))
	}
	for i := range batch {
		if len(batch[i].Buf) != 0 || cap(batch[i].Buf) < c.MaxPacket() {
			t.Fatalf("TxBatch: packet %d has len %d cap %d, want 0 and >= %d", i, len(batch[i].Buf), cap(batch[i].Buf), c.MaxPacket())
		}
		batch[i].Buf = payload(batch[i].Buf, seq0+i, size)
		batch[i].Addr = to.LocalAddr()
	}
	sent, err := c.Transmit(batch)
	if err != nil || sent != n {
		t.Fatalf("Transmit(%d packets) = %d, %v", n, sent, err)
	}
}

// Received is a copy of a received packet.
type Received struct {
	packetio.Packet
}

// Recv receives until n packets arrived or timeout passed, copying them.
func Recv(t testing.TB, c packetio.Conn, n int, timeout time.Duration) []Received {
	t.Helper()
	var got []Received
	end := time.Now().Add(timeout)
	for len(got) < n && time.Now().Before(end) {
		pkts, err := c.Receive(end)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		for _, p := range pkts {
			p.Buf = bytes.Clone(p.Buf)
			got = append(got, Received{p})
		}
	}
	if len(got) != n {
		t.Fatalf("received %d packets, want %d", len(got), n)
	}
	return got
}

// Check verifies that got holds payload(seq0..seq0+len-1) of length size,
// sent by from.
func Check(t testing.TB, got []Received, from, to packetio.Conn, seq0, size int) {
	t.Helper()
	want := make([]byte, 0, size)
	for i, p := range got {
		want = payload(want, seq0+i, size)
		if !bytes.Equal(p.Buf, want) {
			t.Fatalf("packet %d: payload % x..., want % x...", i, head(p.Buf), head(want))
		}
		if p.Addr != from.LocalAddr() || p.Local != to.LocalAddr() {
			t.Fatalf("packet %d: Addr %v Local %v, want %v and %v", i, p.Addr, p.Local, from.LocalAddr(), to.LocalAddr())
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 8)] }

func testRoundTrip(t *testing.T, a, b packetio.Conn) {
	for _, size := range []int{12 + 4, 64, 1024, a.MaxPacket()} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			Send(t, a, b, 100, 3, size)
			Check(t, Recv(t, b, 3, 5*time.Second), a, b, 100, size)
			Send(t, b, a, 200, 2, size)
			Check(t, Recv(t, a, 2, 5*time.Second), b, a, 200, size)
		})
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.PacketsOut != 4*3 || sb.PacketsIn != 4*3 || sb.PacketsOut != 4*2 || sa.PacketsIn != 4*2 {
		t.Errorf("stats a %+v b %+v", sa, sb)
	}
	if sa.BytesOut != sb.BytesIn || sb.BytesOut != sa.BytesIn || sa.BytesOut == 0 {
		t.Errorf("byte counters disagree: a %+v b %+v", sa, sb)
	}
	if sa.TxBatches == 0 || sb.RxBatches == 0 {
		t.Errorf("batch counters zero: a %+v b %+v", sa, sb)
	}
}

func testBatchOrder(t *testing.T, a, b packetio.Conn) {
	const batches, per = 5, 20
	for i := range batches {
		Send(t, a, b, i*per, per, 100)
	}
	Check(t, Recv(t, b, batches*per, 5*time.Second), a, b, 0, 100)
}

// testBuffersStayValid: packets returned by Receive are not overwritten by
// later arrivals before the next Receive.
func testBuffersStayValid(t *testing.T, a, b packetio.Conn) {
	Send(t, a, b, 1, 4, 200)
	var pkts []packetio.Packet
	for len(pkts) == 0 {
		var err error
		if pkts, err = b.Receive(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	copies := make([][]byte, len(pkts))
	for i := range pkts {
		copies[i] = bytes.Clone(pkts[i].Buf)
	}
	Send(t, a, b, 1000, 8, 300)
	time.Sleep(10 * time.Millisecond) // let them land
	for i := range pkts {
		if !bytes.Equal(pkts[i].Buf, copies[i]) {
			t.Fatalf("packet %d changed before the next Receive", i)
		}
	}
	Recv(t, b, 4+8-len(pkts), 5*time.Second)
}

func testDeadline(t *testing.T, a, b packetio.Conn) {
	const wait = 50 * time.Millisecond
	start := time.Now()
	deadline := start.Add(wait)
	pkts, err := b.Receive(deadline)
	if err != nil || len(pkts) != 0 {
		t.Fatalf("Receive on an idle conn = %d packets, %v", len(pkts), err)
	}
	if now := time.Now(); now.Before(deadline) {
		t.Fatalf("Receive returned %v before its deadline", deadline.Sub(now))
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Receive returned %v after a %v deadline", el, wait)
	}
	// A deadline still works after one has passed, and packets still arrive.
	Send(t, a, b, 7, 1, 64)
	Check(t, Recv(t, b, 1, 5*time.Second), a, b, 7, 64)
}

func testPastDeadlinePolls(t *testing.T, a, b packetio.Conn) {
	for _, past := range []time.Time{time.Now().Add(-time.Second), packetio.PollDeadline()} {
		pkts, err := b.Receive(past)
		if err != nil || len(pkts) != 0 {
			t.Fatalf("poll (deadline %v) on an idle conn = %d packets, %v", past, len(pkts), err)
		}
	}
	Send(t, a, b, 3, 2, 64)
	var got []packetio.Packet
	for end := time.Now().Add(5 * time.Second); len(got) < 2 && time.Now().Before(end); {
		pkts, err := b.Receive(packetio.PollDeadline())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, pkts...) // only their count is used
		if len(got) < 2 {
			time.Sleep(time.Millisecond)
		}
	}
	if len(got) != 2 {
		t.Fatalf("polling with a past deadline got %d packets, want 2", len(got))
	}
}

func testWakeBlocked(t *testing.T, a, b packetio.Conn) {
	for round := range 3 {
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() {
			pkts, err := b.Receive(time.Time{})
			done <- result{len(pkts), err}
		}()
		time.Sleep(20 * time.Millisecond) // let it block (not required for correctness)
		b.Wake()
		select {
		case r := <-done:
			if r.err != nil || r.n != 0 {
				t.Fatalf("round %d: woken Receive = %d packets, %v", round, r.n, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: Wake did not unblock Receive", round)
		}
	}
	if w := b.Stats().Wakes; w != 3 {
		t.Errorf("Stats().Wakes = %d, want 3", w)
	}
	// Still usable afterwards, with and without deadlines.
	Send(t, a, b, 9, 1, 64)
	Check(t, Recv(t, b, 1, 5*time.Second), a, b, 9, 64)
	if pkts, err := b.Receive(time.Now().Add(20 * time.Millisecond)); err != nil || len(pkts) != 0 {
		t.Fatalf("Receive after wakes = %d, %v", len(pkts), err)
	}
}

func testWakePending(t *testing.T, a, b packetio.Conn) {
	b.Wake()
	b.Wake() // coalesced with the first
	done := make(chan error, 1)
	go func() {
		_, err := b.Receive(time.Time{})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		b.Close()
		t.Fatal("a Wake before Receive did not make it return")
	}
	// The wake is consumed: the next Receive waits for its deadline.
	deadline := time.Now().Add(30 * time.Millisecond)
	if pkts, err := b.Receive(deadline); err != nil || len(pkts) != 0 || time.Now().Before(deadline) {
		t.Fatalf("Receive after a consumed wake = %d, %v (returned early: %v)", len(pkts), err, time.Now().Before(deadline))
	}
}

func testCloseUnblocks(t *testing.T, a, b packetio.Conn) {
	done := make(chan error, 1)
	go func() {
		_, err := b.Receive(time.Time{})
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, packetio.ErrClosed) {
			t.Fatalf("Receive after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Receive")
	}
	if err := b.Close(); !errors.Is(err, packetio.ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
	if _, err := b.Receive(time.Now().Add(time.Millisecond)); !errors.Is(err, packetio.ErrClosed) {
		t.Errorf("Receive on a closed conn = %v, want ErrClosed", err)
	}
	if n := len(b.TxBatch(4)); n != 0 {
		t.Errorf("TxBatch on a closed conn lent %d packets", n)
	}
	if _, err := b.Transmit(nil); err != nil && !errors.Is(err, packetio.ErrClosed) {
		t.Errorf("Transmit(nil) on a closed conn = %v", err)
	}
	// The other end keeps working.
	batch := a.TxBatch(1)
	batch[0].Buf = append(batch[0].Buf[:0], make([]byte, 64)...)
	batch[0].Addr = b.LocalAddr()
	if _, err := a.Transmit(batch); err != nil {
		t.Errorf("Transmit towards a closed peer: %v", err)
	}
}

func testTxBatchLending(t *testing.T, a, b packetio.Conn) {
	if got := a.TxBatch(0); len(got) != 0 {
		t.Errorf("TxBatch(0) lent %d", len(got))
	}
	big := a.TxBatch(1 << 20)
	if len(big) == 0 {
		t.Fatal("TxBatch(1<<20) lent nothing")
	}
	// Buffers do not overlap: fill each completely.
	for i := range big {
		big[i].Buf = big[i].Buf[:cap(big[i].Buf)]
		for j := range big[i].Buf {
			big[i].Buf[j] = byte(i)
		}
	}
	for i := range big {
		for j, c := range big[i].Buf[:a.MaxPacket()] {
			if c != byte(i) {
				t.Fatalf("lent buffers overlap: packet %d byte %d = %d", i, j, c)
			}
		}
	}
	// More packets than lent: refused, nothing sent.
	a.TxBatch(2)
	if n, err := a.Transmit(big[:3]); n != 0 || !errors.Is(err, packetio.ErrNotLent) {
		t.Errorf("Transmit of 3 after TxBatch(2) = %d, %v; want ErrNotLent", n, err)
	}
	// Transmit returns the buffers: a second Transmit without TxBatch fails.
	Send(t, a, b, 0, 2, 64)
	if n, err := a.Transmit(big[:1]); n != 0 || !errors.Is(err, packetio.ErrNotLent) {
		t.Errorf("Transmit without TxBatch = %d, %v; want ErrNotLent", n, err)
	}
	// An empty Transmit is fine.
	a.TxBatch(4)
	if n, err := a.Transmit(nil); n != 0 || err != nil {
		t.Errorf("Transmit(nil) = %d, %v", n, err)
	}
	Recv(t, b, 2, 5*time.Second)
}

func testTransmitErrors(t *testing.T, a, b packetio.Conn) {
	before := a.Stats()
	batch := a.TxBatch(4)
	for i := range batch {
		batch[i].Buf = payload(batch[i].Buf, i, 64)
		batch[i].Addr = b.LocalAddr()
	}
	batch[1].Buf = append(batch[1].Buf[:0], make([]byte, a.MaxPacket()+1)...) // reallocates: too large
	n, err := a.Transmit(batch)
	var te *packetio.TransmitError
	if n != 3 || !errors.As(err, &te) || te.Index != 1 || te.Failed != 1 || !errors.Is(err, packetio.ErrTooLarge) {
		t.Fatalf("Transmit with one oversized packet = %d, %v; want 3 and a TransmitError for packet 1 matching ErrTooLarge", n, err)
	}
	got := Recv(t, b, 3, 5*time.Second)
	for i, seq := range []int{0, 2, 3} {
		Check(t, got[i:i+1], a, b, seq, 64)
	}
	after := a.Stats()
	if after.TxErrors-before.TxErrors != 1 || after.PacketsOut-before.PacketsOut != 3 {
		t.Errorf("stats after a failed packet: before %+v after %+v", before, after)
	}
}

// testGather: a Conn that reports Gathers sends each packet with its Ext
// inserted at ExtAt, datagrams of every size up to MaxPacket, beside
// packets without Ext, and refuses an ExtAt outside Buf's last ICRC
// (ErrExtAt) and a datagram larger than MaxPacket; any other Conn refuses
// every packet with Ext (ErrNoGather) and sends the rest.
func testGather(t *testing.T, a, b packetio.Conn) {
	g, ok := a.(packetio.Gatherer)
	gathers := ok && g.Gathers()
	sizes := []int{12 + 4, 64, 1000, a.MaxPacket()}
	batch := a.TxBatch(2 * len(sizes))
	if len(batch) != 2*len(sizes) {
		t.Skipf("TxBatch lends %d packets at a time", len(batch))
	}
	want := make([][]byte, len(batch))
	for i := range batch {
		size := sizes[i/2]
		want[i] = payload(nil, i, size)
		p := &batch[i]
		p.Addr = b.LocalAddr()
		if i%2 == 0 {
			p.Buf = append(p.Buf[:0], want[i]...)
			continue
		}
		// Headers up to at, then Ext, then the rest (at least 4 bytes).
		at := min(size-4, 12+i)
		ext := max(0, size-at-4-(i%3))
		p.Buf = append(append(p.Buf[:0], want[i][:at]...), want[i][at+ext:]...)
		p.Ext, p.ExtAt = want[i][at:at+ext], at
	}
	n, err := a.Transmit(batch)
	if !gathers {
		if n != len(sizes) || !errors.Is(err, packetio.ErrNoGather) {
			t.Fatalf("Transmit of %d packets, %d with Ext, on a Conn that does not gather = %d, %v; want %d and ErrNoGather", len(batch), len(sizes), n, err, len(sizes))
		}
		got := Recv(t, b, len(sizes), 5*time.Second)
		for i, p := range got {
			if !bytes.Equal(p.Buf, want[2*i]) {
				t.Fatalf("packet %d: % x..., want % x...", 2*i, head(p.Buf), head(want[2*i]))
			}
		}
		return
	}
	if n != len(batch) || err != nil {
		t.Fatalf("Transmit of %d packets, half with Ext = %d, %v", len(batch), n, err)
	}
	got := Recv(t, b, len(batch), 5*time.Second)
	for i, p := range got {
		if !bytes.Equal(p.Buf, want[i]) {
			t.Fatalf("packet %d (%d bytes, Ext %v): % x..., want % x... (%d bytes)", i, len(p.Buf), i%2 == 1, head(p.Buf), head(want[i]), len(want[i]))
		}
	}
	bad := a.TxBatch(3)
	for i := range bad {
		bad[i].Buf = append(bad[i].Buf[:0], make([]byte, 64)...)
		bad[i].Addr = b.LocalAddr()
		bad[i].Ext = make([]byte, 100)
	}
	bad[0].ExtAt = 61                             // 3 bytes after it
	bad[1].ExtAt = -1                             //
	bad[2].Ext = make([]byte, a.MaxPacket()-64+1) // one byte too many
	n, err = a.Transmit(bad)
	var te *packetio.TransmitError
	if n != 0 || !errors.As(err, &te) || te.Failed != 3 || !errors.Is(err, packetio.ErrExtAt) {
		t.Fatalf("Transmit of bad Ext packets = %d, %v; want 0 and ErrExtAt for the first", n, err)
	}
}

// testNoAllocs asserts the steady-state hot paths do not allocate: TxBatch,
// RoundTrip sends n copies of payload from a with one TxBatch and Transmit
// and receives them at b, each with payload's length, within 5 seconds. It
// panics on a failure, rather than failing a test, so that it can run inside
// testing.AllocsPerRun; it allocates nothing itself.
func RoundTrip(a, b packetio.Conn, payload []byte, n int) {
	to := b.LocalAddr()
	batch := a.TxBatch(n)
	for i := range batch {
		batch[i].Buf = append(batch[i].Buf[:0], payload...)
		batch[i].Addr = to
	}
	if sent, err := a.Transmit(batch); sent != n || err != nil {
		panic(fmt.Sprint("Transmit: ", sent, err))
	}
	for got := 0; got < n; {
		pkts, err := b.Receive(time.Now().Add(5 * time.Second))
		if err != nil {
			panic(err)
		}
		if len(pkts) == 0 {
			panic("Receive timed out")
		}
		for _, p := range pkts {
			if len(p.Buf) != len(payload) {
				panic(fmt.Sprint("received ", len(p.Buf), " bytes, sent ", len(payload)))
			}
		}
		got += len(pkts)
	}
}

// Transmit and Receive of full batches, a Receive ended by its deadline, and
// Wake followed by Receive.
func testNoAllocs(t *testing.T, a, b packetio.Conn) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	const n = 16
	var fill [128]byte
	roundTrip := func() { RoundTrip(a, b, fill[:], n) }
	roundTrip() // warm up
	if allocs := testing.AllocsPerRun(100, roundTrip); allocs != 0 {
		t.Errorf("TxBatch+Transmit+Receive of %d packets: %v allocations, want 0", n, allocs)
	}
	timeout := func() {
		if pkts, err := b.Receive(time.Now().Add(100 * time.Microsecond)); err != nil || len(pkts) != 0 {
			panic(fmt.Sprint("Receive: ", len(pkts), err))
		}
	}
	timeout()
	if allocs := testing.AllocsPerRun(20, timeout); allocs != 0 {
		t.Errorf("Receive ended by its deadline: %v allocations, want 0", allocs)
	}
	wake := func() {
		b.Wake()
		if pkts, err := b.Receive(time.Time{}); err != nil || len(pkts) != 0 {
			panic(fmt.Sprint("Receive: ", len(pkts), err))
		}
	}
	wake()
	if allocs := testing.AllocsPerRun(100, wake); allocs != 0 {
		t.Errorf("Wake then Receive: %v allocations, want 0", allocs)
	}

	// Wake from another goroutine while Receive waits (usually: the sleep
	// lets it block, but either order must not allocate).
	woken := make(chan struct{})
	go func() {
		for {
			if _, err := b.Receive(time.Time{}); err != nil {
				close(woken)
				return
			}
			woken <- struct{}{}
		}
	}()
	defer func() {
		b.Close()
		for range woken {
		}
	}()
	blocked := func() {
		time.Sleep(200 * time.Microsecond)
		b.Wake()
		<-woken
	}
	blocked()
	if allocs := testing.AllocsPerRun(50, blocked); allocs != 0 {
		t.Errorf("Wake of a blocked Receive: %v allocations, want 0", allocs)
	}
}
