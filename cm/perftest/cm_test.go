package perftest

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestCMKeyMsg checks the -R key message against struct pingpong_dest's
// layout as rdma_write_keys fills it on x86-64: big-endian integers at
// their C offsets, the GID raw, zero padding; 56 bytes, and 64 read too.
func TestCMKeyMsg(t *testing.T) {
	d := Dest{LID: 0, OutReads: 16, QPN: 0x000011, PSN: 0x491738, RKey: 0x275, VAddr: 0x55bc2e6ea000,
		GID: verbs.GID{10: 0xff, 11: 0xff, 12: 10, 13: 99, 14: 0, 15: 3}, SRQN: 7}
	b := d.AppendCMKeyMsg(nil)
	want, _ := hex.DecodeString("00000000" + "00000010" + "00000011" + "00491738" + "00000275" + "00000000" +
		"000055bc2e6ea000" + "00000000000000000000ffff0a630003" + "00000007" + "00000000")
	if !bytes.Equal(b, want) {
		t.Fatalf("key message\n%x, want\n%x", b, want)
	}
	got, err := ParseCMKeyMsg(b)
	if err != nil || got != d {
		t.Fatalf("parsed %+v, %v; want %+v", got, err, d)
	}
	long := append(append([]byte(nil), b...), make([]byte, 8)...) // with gid_index and padding
	if got, err := ParseCMKeyMsg(long); err != nil || got != d {
		t.Fatalf("parsed the 64-byte form as %+v, %v; want %+v", got, err, d)
	}
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"short", b[:55]},
		{"between", long[:60]},
		{"long", append(append([]byte(nil), b...), 0)},
		{"wide QPN", func() []byte { x := append([]byte(nil), b...); x[8] = 1; return x }()},
		{"wide PSN", func() []byte { x := append([]byte(nil), b...); x[12] = 1; return x }()},
		{"wide out_reads", func() []byte { x := append([]byte(nil), b...); x[5] = 1; return x }()},
	} {
		if _, err := ParseCMKeyMsg(c.b); !errors.Is(err, ErrMessage) {
			t.Errorf("%s: %v, want ErrMessage", c.name, err)
		}
	}
}
