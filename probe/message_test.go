package probe_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/probe"
)

// golden is rpingmesh's own codec test vector: {v1, ACK, first, flags 0x42,
// seq 1, t1 1000, t3 2000, t4 3000}.
const golden = "01010142" + "0000000000000001" + "00000000000003E8" + "00000000000007D0" + "0000000000000BB8" + "00000000"

func TestMessageGolden(t *testing.T) {
	want, _ := hex.DecodeString(golden)
	m := probe.Message{Version: 1, Type: probe.TypeAck, AckType: probe.AckFirst, Flags: 0x42, Seq: 1, T1: 1000, T3: 2000, T4: 3000}
	b := make([]byte, probe.PayloadLen)
	if err := m.Put(b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("Put:\n got %x\nwant %x", b, want)
	}
	if got := m.Append([]byte{0xAA}); !bytes.Equal(got[1:], want) || got[0] != 0xAA {
		t.Fatalf("Append: %x", got)
	}
	got, err := probe.ParseMessage(want)
	if err != nil || got != m {
		t.Fatalf("ParseMessage = %+v, %v; want %+v", got, err, m)
	}
	// The reserved bytes and what follows the 40 bytes are ignored.
	x := append(append([]byte(nil), want...), 0xFF, 0xFF)
	x[36], x[39] = 0xFF, 0x01
	if got, err := probe.ParseMessage(x); err != nil || got != m {
		t.Fatalf("with reserved bytes set: %+v, %v", got, err)
	}
}

func TestMessageErrors(t *testing.T) {
	good, _ := hex.DecodeString(golden)
	for n := 0; n < probe.PayloadLen; n++ {
		if _, err := probe.ParseMessage(good[:n]); !errors.Is(err, probe.ErrTruncated) {
			t.Errorf("%d bytes: err %v, want ErrTruncated", n, err)
		}
	}
	if err := (&probe.Message{}).Put(make([]byte, 39)); !errors.Is(err, probe.ErrTruncated) {
		t.Errorf("Put into 39 bytes: %v", err)
	}
	for _, tc := range []struct {
		name        string
		v, typ, ack byte
		want        error
	}{
		{"version 0", 0, 1, 1, probe.ErrVersion},
		{"version 2", 2, 1, 1, probe.ErrVersion},
		{"version 255", 255, 0, 0, probe.ErrVersion},
		{"type 2", 1, 2, 0, probe.ErrMalformed},
		{"probe with ack type", 1, 0, 1, probe.ErrMalformed},
		{"ack without ack type", 1, 1, 0, probe.ErrMalformed},
		{"ack type 3", 1, 1, 3, probe.ErrMalformed},
		{"probe", 1, 0, 0, nil},
		{"second ack", 1, 1, 2, nil},
	} {
		b := append([]byte(nil), good...)
		b[0], b[1], b[2] = tc.v, tc.typ, tc.ack
		_, err := probe.ParseMessage(b)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "probe: ") {
			t.Errorf("%s: error %q lacks the package prefix", tc.name, err)
		}
	}
}

func TestMessageAllocs(t *testing.T) {
	b, _ := hex.DecodeString(golden)
	m := probe.Message{Version: 1}
	if n := testing.AllocsPerRun(100, func() {
		m, _ = probe.ParseMessage(b)
		m.Put(b)
	}); n != 0 {
		t.Fatalf("%v allocations per parse and put", n)
	}
}

// FuzzParseMessage: no input panics, and what parses writes back as the
// same 40 bytes but for the reserved ones.
func FuzzParseMessage(f *testing.F) {
	g, _ := hex.DecodeString(golden)
	f.Add(g)
	f.Add(g[:39])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := probe.ParseMessage(b)
		if err != nil {
			if m != (probe.Message{}) {
				t.Fatalf("error %v with a message %+v", err, m)
			}
			return
		}
		out := make([]byte, probe.PayloadLen)
		if err := m.Put(out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out[:36], b[:36]) || !bytes.Equal(out[36:], make([]byte, 4)) {
			t.Fatalf("round trip:\n in %x\nout %x", b[:probe.PayloadLen], out)
		}
		m2, err := probe.ParseMessage(out)
		if err != nil || m2 != m {
			t.Fatalf("reparse: %+v, %v", m2, err)
		}
	})
}
