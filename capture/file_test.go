package capture

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goldenPcap is a capture of well-formed RoCEv2 packets.
const goldenPcap = "../wire/testdata/golden.pcap"

func TestDumpFile(t *testing.T) {
	golden, err := os.ReadFile(goldenPcap)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	r, err := NewReader(bytes.NewReader(golden))
	if err != nil {
		t.Fatal(err)
	}
	wantTot, err := Dump(&want, r, Options{})
	if err != nil || wantTot.RoCE == 0 {
		t.Fatalf("Dump: %+v, %v", wantTot, err)
	}
	for _, name := range []string{goldenPcap, "-"} {
		var out bytes.Buffer
		tot, err := DumpFile(&out, name, bytes.NewReader(golden), Options{})
		if err != nil || tot != wantTot || out.String() != want.String() {
			t.Errorf("DumpFile(%q) = %+v, %v; output equal %v", name, tot, err, out.String() == want.String())
		}
	}

	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pcap")
	if _, err := DumpFile(&bytes.Buffer{}, missing, nil, Options{}); !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "open "+missing) {
		t.Errorf("missing file: %v", err)
	}
	junk := filepath.Join(dir, "junk.pcap")
	if err := os.WriteFile(junk, []byte("not a capture at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DumpFile(&bytes.Buffer{}, junk, nil, Options{}); err == nil || !strings.HasPrefix(err.Error(), junk+": ") {
		t.Errorf("junk file: %v", err)
	}
	if _, err := DumpFile(&bytes.Buffer{}, "-", strings.NewReader(""), Options{}); err == nil || !strings.HasPrefix(err.Error(), "standard input: ") {
		t.Errorf("empty standard input: %v", err)
	}
	cut := filepath.Join(dir, "cut.pcap")
	if err := os.WriteFile(cut, golden[:len(golden)-10], 0o644); err != nil {
		t.Fatal(err)
	}
	tot, err := DumpFile(&bytes.Buffer{}, cut, nil, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), cut+": ") || tot.RoCE == 0 || tot.RoCE >= wantTot.RoCE {
		t.Errorf("truncated file: %+v, %v", tot, err)
	}
}
