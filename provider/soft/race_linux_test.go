//go:build linux

package soft

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/packetio/uring"
	"github.com/goroce/goroce/verbs"
)

// TestReadAfterCompletion does what a Go test of an RDMA program does:
// an RDMA WRITE and a FETCH_ADD from one soft device to another in the
// same process, over UDP and over io_uring on loopback, and after each
// completes, a read of the responder's memory by the goroutine that
// polled the completion. The data must be there; and under -race (go test
// -race -run TestReadAfterCompletion ./provider/soft, which .ci/run runs)
// the race detector must find no race: it cannot see the order a datagram
// through the kernel gives, and reported one until the devices told it
// (internal/racesync).
func TestReadAfterCompletion(t *testing.T) {
	for _, path := range []struct {
		name   string
		listen func(netip.Addr) (packetio.Conn, error)
	}{
		{"udp", func(a netip.Addr) (packetio.Conn, error) { return udp.Listen(a, udp.Options{}) }},
		{"uring", func(a netip.Addr) (packetio.Conn, error) { return uring.Listen(a, uring.Options{}) }},
	} {
		t.Run(path.name, func(t *testing.T) {
			var devs [2]*Device
			for i, a := range []string{"127.0.10.1", "127.0.10.2"} {
				c, err := path.listen(netip.MustParseAddr(a))
				if errors.Is(err, packetio.ErrNotSupported) {
					testenv.Skipf(t, testenv.Uring, "%s refused: %v", path.name, err)
				}
				e2eMust(t, err)
				d, err := New(Options{Name: path.name + a, Conn: c})
				if err != nil {
					c.Close()
					t.Fatal(err)
				}
				t.Cleanup(func() { d.Close() })
				devs[i] = d
			}
			readAfterCompletion(t, devs[0], devs[1])
		})
	}
}

// readAfterCompletion runs TestReadAfterCompletion's WRITEs and FETCH_ADDs
// from da to db.
func readAfterCompletion(t *testing.T, da, db *Device) {
	a, b := e2eNewRes(t, da, 1<<16), e2eNewRes(t, db, 1<<16)
	acq, bcq := a.cq(t, 16), b.cq(t, 16)
	qa := a.qp(t, verbs.QPTRC, acq, acq, nil, 16)
	qb := b.qp(t, verbs.QPTRC, bcq, bcq, nil, 16)
	e2eConnect(t, verbs.MTU1024, qa, da, 1, qb, db, 2)
	const word = 8192
	for round := range 20 {
		e2eFill(a.buf[:4096], uint64(round+1))
		_, err := qa.PostSend([]verbs.SendWR{
			{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: a.sge(0, 4096), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
			{WRID: 2, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: a.sge(word, 8), RemoteAddr: b.mr.Addr() + word, RKey: b.mr.RKey(), CompareAdd: 3},
		})
		e2eMust(t, err)
		if wc := e2ePoll(t, "requester", acq, 1); wc[0].Status != verbs.WCSuccess {
			t.Fatalf("round %d: %+v", round, wc[0])
		}
		e2eSame(t, "the responder's memory after the WRITE", b.buf[:4096], a.buf[:4096])
		if got, want := binary.LittleEndian.Uint64(b.buf[word:]), uint64(3*(round+1)); got != want {
			t.Fatalf("round %d: the responder's word is %d after the FETCH_ADD, want %d", round, got, want)
		}
	}
}
