package wire

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestRealCaptures reads captures of Linux rdma_rxe talking to itself
// (testdata/captures, made with rdma-core's and perftest's tools; see the
// README there). Every RoCEv2 packet must parse and pass its ICRC, and a
// receiver that sees only the UDP payload, as on a UDP socket, must recover
// the Identification and DF flag rxe sent (rxe's Identifications are not 0).
func TestRealCaptures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "captures", "rxe-*.pcap"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures in ../testdata/captures (%v)", err)
	}
	total, nonZeroID := 0, 0
	for _, fn := range files {
		frames := readPcap(t, fn)
		roce := 0
		for i, fr := range frames {
			var f Frame
			if err := ParseFrame(fr, &f); err != nil {
				if errors.Is(err, ErrNotUDP) || errors.Is(err, ErrNotRoCEv2) || errors.Is(err, ErrNotIP) {
					continue // the tools' TCP exchange, ARP
				}
				t.Errorf("%s frame %d: %v", filepath.Base(fn), i+1, err)
				continue
			}
			roce++
			var p Packet
			if err := Parse(f.Transport(), &p); err != nil {
				t.Errorf("%s frame %d: %v", filepath.Base(fn), i+1, err)
				continue
			}
			if err := p.CheckPMTU(1024); err != nil {
				t.Errorf("%s frame %d: %v", filepath.Base(fn), i+1, err)
			}
			if err := CheckICRC(f.IPUDP(), f.Transport()); err != nil {
				t.Errorf("%s frame %d: %v", filepath.Base(fn), i+1, err)
				continue
			}
			ip := f.IPv4()
			if ip.ID() != 0 {
				nonZeroID++
			}
			fl := Flow{Src: f.Src(), Dst: f.Dst(), SrcPort: f.UDP().SrcPort()}
			ph, err := fl.PseudoHeader(nil, len(f.Transport()))
			if err != nil {
				t.Fatal(err)
			}
			id, df, err := CheckICRCUnknownID(ph, f.Transport())
			if err != nil || id != ip.ID() || df != ip.DF() {
				t.Errorf("%s frame %d: recovered id %#x df %v (%v), sent %#x %v", filepath.Base(fn), i+1, id, df, err, ip.ID(), ip.DF())
			}
			// And one flipped bit is caught.
			pkt := append([]byte(nil), f.Transport()...)
			pkt[len(pkt)/2] ^= 0x10
			if _, _, err := CheckICRCUnknownID(ph, pkt); !errors.Is(err, ErrICRC) && len(pkt)/2 != 4 {
				t.Errorf("%s frame %d: corrupted packet: %v", filepath.Base(fn), i+1, err)
			}
		}
		if roce == 0 {
			t.Errorf("%s: no RoCEv2 packets", fn)
		}
		total += roce
	}
	if nonZeroID == 0 {
		t.Error("no packet had a non-zero IPv4 Identification: the recovery was not exercised")
	}
	t.Logf("%d RoCEv2 packets in %d captures, %d with non-zero Identification", total, len(files), nonZeroID)
}

// TestRealCaptureSourcePorts checks wire's source-port functions against what
// rxe put on the wire: an RC connection uses SourcePort(0, lqpn, rqpn) both
// ways (rdma_get_udp_sport without a flow label), a UD QP QPSourcePort of its
// own number. rping's connection comes from rdma_cm, which sets a flow label
// of its own, so its RC packets are left out.
func TestRealCaptureSourcePorts(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "captures", "rxe-*.pcap"))
	checkedRC, checkedUD := 0, 0
	for _, fn := range files {
		type dir struct{ src, dst string }
		dqps := map[dir]map[QPN]uint16{} // direction -> dest QPN -> sport
		for _, fr := range readPcap(t, fn) {
			var f Frame
			var p Packet
			if ParseFrame(fr, &f) != nil || Parse(f.Transport(), &p) != nil {
				continue
			}
			sport := f.UDP().SrcPort()
			switch p.Info.Transport {
			case TransportUD:
				if d := p.DETH(); d.SrcQP() != 1 { // QP 1 (CM MADs) aside
					if want := QPSourcePort(d.SrcQP()); sport != want {
						t.Errorf("%s: UD from QP %#x: sport %#x, want %#x", filepath.Base(fn), d.SrcQP(), sport, want)
					}
					checkedUD++
				}
			case TransportRC:
				k := dir{f.Src().String(), f.Dst().String()}
				if dqps[k] == nil {
					dqps[k] = map[QPN]uint16{}
				}
				dqps[k][p.BTH().DestQP()] = sport
			}
		}
		if strings.Contains(fn, "rping") {
			continue
		}
		for k, m := range dqps {
			back := dqps[dir{k.dst, k.src}]
			for remote, sport := range m {
				ok := false
				for local := range back {
					if SourcePort(0, local, remote) == sport {
						ok = true
					}
				}
				if !ok {
					t.Errorf("%s: RC to QP %#x with sport %#x: no QP pair explains it", filepath.Base(fn), remote, sport)
				}
				checkedRC++
			}
		}
	}
	if checkedRC == 0 || checkedUD == 0 {
		t.Fatalf("checked %d RC connections, %d UD packets", checkedRC, checkedUD)
	}
}
