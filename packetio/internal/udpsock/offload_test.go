package udpsock

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/packetio"
)

// SplitGRO cuts a train into its segments, slices of the buffer with the
// first packet's metadata, and drops (never returns in part) the segments
// that are too long, cut off by the kernel, or beyond the room for packets.
func TestSplitGRO(t *testing.T) {
	buf := make([]byte, 100)
	for i := range buf {
		buf[i] = byte(i)
	}
	tests := []struct {
		name                string
		buf, seg, n, maxPkt int
		room                int
		ids                 bool
		lens                []int
		drops               uint64
		trains              uint64
	}{
		{"whole train", 100, 30, 100, 64, 8, true, []int{30, 30, 30, 10}, 0, 1},
		{"no IDs", 100, 30, 100, 64, 8, false, []int{30, 30, 30, 10}, 0, 1},
		{"cut: the rest lost", 70, 30, 100, 64, 8, true, []int{30, 30}, 2, 1},
		{"cut within the last", 95, 30, 100, 64, 8, true, []int{30, 30, 30}, 1, 1},
		{"longer than MaxPacket", 100, 30, 100, 29, 8, true, []int{10}, 3, 1},
		{"more than the room", 100, 30, 100, 64, 2, true, []int{30, 30}, 2, 1},
		{"one datagram", 40, 40, 40, 64, 8, true, []int{40}, 0, 0},
		{"empty datagram", 0, 1, 0, 64, 8, true, []int{0}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rx := make([]packetio.Packet, tt.room)
			first := packetio.Packet{Addr: netip.MustParseAddr("10.0.0.1"), Port: 4791, TOS: 2, RxTime: 7}
			rx[0] = first
			var ctr packetio.Counters
			made, drops := SplitGRO(rx, buf[:tt.buf], tt.seg, tt.n, tt.maxPkt, tt.ids, &ctr)
			if made != len(tt.lens) || drops != tt.drops {
				t.Fatalf("made %d dropped %d, want %d and %d", made, drops, len(tt.lens), tt.drops)
			}
			for i, p := range rx[:made] {
				pos := 0 // the segment's position in the train
				if len(p.Buf) != tt.lens[i] || p.Addr != first.Addr || p.Port != first.Port || p.TOS != first.TOS || p.RxTime != first.RxTime {
					t.Errorf("packet %d: %d bytes, %+v", i, len(p.Buf), p)
				}
				if len(p.Buf) > 0 {
					// A segment at its place in the train: byte j of the
					// train is j.
					j := int(p.Buf[0])
					if j%tt.seg != 0 || p.Buf[len(p.Buf)-1] != byte(j+len(p.Buf)-1) || cap(p.Buf) != len(p.Buf) {
						t.Errorf("packet %d: not a segment of the train: starts at %d, cap %d", i, j, cap(p.Buf))
					}
					pos = j / tt.seg
				}
				want := uint16(0)
				if tt.ids {
					want = uint16(pos)
				}
				if p.GROSeg != want {
					t.Errorf("packet %d: GROSeg %d, want %d", i, p.GROSeg, want)
				}
			}
			if s := ctr.Stats(); s.GROBuffers != tt.trains || (tt.trains > 0 && s.GROSegments != uint64((tt.n+tt.seg-1)/tt.seg)) {
				t.Errorf("GRO buffers %d segments %d", s.GROBuffers, s.GROSegments)
			}
		})
	}
	rx := make([]packetio.Packet, 8)
	var ctr packetio.Counters
	if allocs := testing.AllocsPerRun(100, func() { SplitGRO(rx, buf, 30, 100, 64, true, &ctr) }); allocs != 0 {
		t.Errorf("%v allocations per SplitGRO", allocs)
	}
}

func TestOffloadStrings(t *testing.T) {
	for o, want := range map[Offload]string{OffloadAuto: "auto", OffloadOff: "off", OffloadRequire: "require", 7: "Offload(7)"} {
		if got := o.String(); got != want {
			t.Errorf("%d: %q, want %q", o, got, want)
		}
	}
	s := OffloadStatus{GSO: true, GROReason: "turned off by Options.GRO"}
	if got, want := s.String(), "GSO on, GRO off: turned off by Options.GRO"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
