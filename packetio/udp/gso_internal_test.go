//go:build linux

package udp

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/wire"
)

// A GSO message the kernel refuses (here EINVAL: SO_NO_CHECK, set behind
// the Conn's back, does not mix with UDP_SEGMENT) is sent again one
// datagram per packet, with every ICRC back to Identification 0, and
// counted in GSOFallbacks; GSO stays on (only EIO turns it off). Half the
// packets are given in pieces (Packet.Ext).
func TestGSOFallback(t *testing.T) {
	lo1, lo2 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	a, err := Listen(lo1, Options{Port: AnyPort, GSO: OffloadRequire})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	port := a.LocalAddrPort().Port()
	b, err := Listen(lo2, Options{Port: int(port), GRO: OffloadOff})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var serr error
	if err := a.raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	fl := wire.Flow{Src: lo1, Dst: lo2, SrcPort: port, DstPort: port}
	const n = 10
	batch := a.TxBatch(n)
	for i := range batch {
		h := wire.Header{Opcode: wire.RCWriteMiddle, PKey: wire.DefaultPKey, DestQP: 9, PSN: wire.PSN(i)}
		if batch[i].Buf, err = wire.AppendDatagram(batch[i].Buf[:0], &fl, &h, make([]byte, 1024)); err != nil {
			t.Fatal(err)
		}
		batch[i].Addr = lo2
		if i%2 == 1 { // in pieces: the payload elsewhere (Packet.Ext)
			b := batch[i].Buf
			batch[i].Ext = append([]byte(nil), b[wire.BTHLen:len(b)-wire.ICRCLen]...)
			batch[i].Buf, batch[i].ExtAt = append(b[:wire.BTHLen], b[len(b)-wire.ICRCLen:]...), wire.BTHLen
		}
	}
	if sent, err := a.Transmit(batch); sent != n || err != nil {
		t.Fatalf("Transmit = %d, %v", sent, err)
	}
	got := 0
	for end := time.Now().Add(5 * time.Second); got < n && time.Now().Before(end); {
		pkts, err := b.Receive(end)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts {
			if id, df, err := fl.CheckDatagramICRC(p.Buf); err != nil || id != 0 || !df {
				t.Errorf("packet %d: ICRC for Identification %d DF %v (%v), want 0 with DF", got, id, df, err)
			}
			got++
		}
	}
	if got != n {
		t.Fatalf("received %d of %d", got, n)
	}
	s := a.Stats()
	if s.GSOFallbacks != 1 || s.GSOMessages != 0 || s.PacketsOut != n || s.TxErrors != 0 {
		t.Errorf("stats %+v, want 1 fallback and %d packets out", s, n)
	}
	if o := a.Offloads(); !o.GSO {
		t.Errorf("GSO turned off by EINVAL: %v", o)
	}
}
