package fault

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/pipe"
)

// send pushes n numbered packets through f and returns what the peer got.
func send(t *testing.T, o Options, n int) (*Conn, [][]byte) {
	t.Helper()
	a, b := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{Queue: 4 * n})
	defer a.Close()
	defer b.Close()
	f := New(a, o)
	for i := 0; i < n; i += 16 {
		batch := f.TxBatch(16)
		for j := range batch {
			batch[j].Buf = append(batch[j].Buf[:0], byte(i+j), byte((i+j)>>8), 0xAA, 0xBB)
			batch[j].Addr = b.LocalAddr()
		}
		if _, err := f.Transmit(batch); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Millisecond) // let held packets age out
	f.Receive(time.Now())            // releases them
	var got [][]byte
	for {
		pkts, err := b.Receive(time.Now())
		if err != nil || len(pkts) == 0 {
			break
		}
		for _, p := range pkts {
			got = append(got, append([]byte(nil), p.Buf...))
		}
	}
	return f, got
}

func TestFaults(t *testing.T) {
	const n = 4096
	f, got := send(t, Options{Seed: 1, Drop: 0.05, Duplicate: 0.01, Reorder: 0.02, Corrupt: 0.001}, n)
	s := f.FaultStats()
	if s.Sent != n || len(got) != int(s.Sent-s.Dropped+s.Duplicated) {
		t.Fatalf("stats %+v, %d received", s, len(got))
	}
	// Rates near what was asked (binomial: wide bounds).
	if s.Dropped < n*3/100 || s.Dropped > n*7/100 || s.Reordered < n/100 || s.Reordered > n*3/100 || s.Duplicated == 0 {
		t.Errorf("fault counts off: %+v", s)
	}
	// Reordering shows as sequence numbers going back.
	back := 0
	for i := 1; i < len(got); i++ {
		a, b := int(got[i-1][0])|int(got[i-1][1])<<8, int(got[i][0])|int(got[i][1])<<8
		if b < a {
			back++
		}
	}
	if back == 0 {
		t.Error("no packet came out of order")
	}
	// The same seed gives the same faults. The order of delivery depends on
	// the clock too (a held packet goes when MaxHold ends): with a MaxHold
	// longer than the run it depends on the seed alone.
	o := Options{Seed: 1, Drop: 0.05, Duplicate: 0.01, Reorder: 0.02, Corrupt: 0.001, MaxHold: time.Minute}
	f1, got := send(t, o, n)
	f2, got2 := send(t, o, n)
	if f2.FaultStats() != f1.FaultStats() || len(got2) != len(got) {
		t.Errorf("not reproducible: %+v vs %+v", f2.FaultStats(), f1.FaultStats())
	}
	for i := range got {
		if !bytes.Equal(got[i], got2[i]) {
			t.Fatalf("packet %d differs between runs with the same seed", i)
		}
	}
}

func TestBurstAndCorrupt(t *testing.T) {
	f, got := send(t, Options{Seed: 3, Drop: 0.01, BurstLen: 8, Corrupt: 1}, 1024)
	s := f.FaultStats()
	if s.Dropped%8 != 0 && s.Dropped < 8 {
		t.Errorf("burst drops %d", s.Dropped)
	}
	if s.Corrupted != s.Sent-s.Dropped {
		t.Errorf("corrupted %d of %d", s.Corrupted, s.Sent-s.Dropped)
	}
	flipped := 0
	for _, p := range got {
		if p[2] != 0xAA || p[3] != 0xBB {
			flipped++
		}
	}
	if flipped == 0 {
		t.Error("no corruption seen in the trailing bytes")
	}
	var _ packetio.Conn = f
}
