package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testdata = "../../wire/testdata"

func runCmd(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

type vector struct {
	Name       string         `json:"name"`
	BTH        map[string]any `json:"bth"`
	Ext        map[string]any `json:"ext"`
	PayloadLen json.Number    `json:"payload_len"`
	ICRCHex    string         `json:"icrc_hex"`
	ExpectFlag string         `json:"expect_flag"`
}

func loadVectors(t *testing.T, name string) []vector {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, name))
	if err != nil {
		t.Fatal(err)
	}
	var vf struct{ Vectors []vector }
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&vf); err != nil {
		t.Fatal(err)
	}
	return vf.Vectors
}

func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		d := json.NewDecoder(strings.NewReader(l))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatalf("not JSON: %v: %s", err, l)
		}
		objs = append(objs, m)
	}
	return objs
}

func TestDecodeGoldenJSON(t *testing.T) {
	for _, name := range []string{"golden", "golden-ipv6"} {
		vs := loadVectors(t, name+".json")
		// Flags after the file name work too.
		code, out, errOut := runCmd("decode", filepath.Join(testdata, name+".pcap"), "--json")
		if code != 0 || errOut != "" {
			t.Fatalf("%s: exit %d, stderr %q", name, code, errOut)
		}
		objs := jsonLines(t, out)
		if len(objs) != len(vs) {
			t.Fatalf("%s: %d objects, want %d", name, len(objs), len(vs))
		}
		for i, v := range vs {
			o := objs[i]
			if o["icrc_ok"] != true || o["error"] != nil {
				t.Errorf("%s: icrc_ok=%v error=%v", v.Name, o["icrc_ok"], o["error"])
			}
			for k, want := range map[string]any{"bth": v.BTH, "ext": v.Ext, "payload_len": v.PayloadLen, "icrc_hex": v.ICRCHex} {
				if g, w := mustJSON(t, o[k]), mustJSON(t, want); g != w {
					t.Errorf("%s: %s = %s, want %s", v.Name, k, g, w)
				}
			}
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDecodeBroken(t *testing.T) {
	vs := loadVectors(t, "broken.json")
	code, out, errOut := runCmd("decode", "--pmtu", "1024", filepath.Join(testdata, "broken.pcap"))
	if code != 1 || errOut != "" {
		t.Fatalf("exit %d, stderr %q; want 1", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(vs) {
		t.Fatalf("%d lines, want %d", len(lines), len(vs))
	}
	for i, v := range vs {
		l := lines[i]
		if !strings.Contains(l, "MALFORMED: ") && !strings.Contains(l, "ICRC=BAD(") {
			t.Errorf("%s not reported: %s", v.Name, l)
			continue
		}
		if !strings.Contains(strings.ToLower(l), strings.ToLower(v.ExpectFlag)) {
			t.Errorf("%s: %q not named in %s", v.Name, v.ExpectFlag, l)
		}
	}
	code, out, _ = runCmd("decode", "--json", "--pmtu=1024", filepath.Join(testdata, "broken.pcap"))
	for i, o := range jsonLines(t, out) {
		e, _ := o["error"].(string)
		if code != 1 || !strings.Contains(strings.ToLower(e), strings.ToLower(vs[i].ExpectFlag)) {
			t.Errorf("%s: exit %d, JSON error %q", vs[i].Name, code, e)
		}
	}
}

func TestDecodeModes(t *testing.T) {
	golden := filepath.Join(testdata, "golden.pcap")
	tests := []struct {
		args     []string
		code     int
		contains []string
	}{
		{[]string{"decode", golden}, 0, []string{
			"10.0.0.1:49152 > 10.0.0.2:4791 RC_RDMA_WRITE_ONLY(0x0a) dqp=0x000011 psn=512 A=1 SE=0 M=0 pad=2 pkey=0xffff RETH[va=0x7f1234560000 rkey=0x00c0ffee dlen=10] payload=10 ICRC=OK",
			"AETH[RNR_NAK timer=14 (1.28ms) msn=2]",
			"AtomicAckETH[orig=0x3333333344444444]",
			"DETH[qkey=0x11111111 srcqp=0x000014] ImmDt[0x0badf00d]",
			"IETH[rkey=0x00abcdef]",
			"pkey=0xffff FECN=1 BECN=1 payload=13",
		}},
		{[]string{"decode", "-v", golden}, 0, []string{
			"        ID: 0x0009\n", "        DF: 1\n", "        TOS: 0x03 (DSCP 0, ECN 3)\n", "        TTL: 1\n",
			"        reserved (7 bits): 0x00\n", "        PSN: 512 (0x000200)\n", "        DMA length: 2148\n",
			"    payload: 10 bytes + 2 pad\n", "    ICRC: 6265ba75 (correct)\n", "        original remote data: 0x3333333344444444\n",
		}},
		{[]string{"decode", "--flows", golden}, 0, []string{
			"RC 10.0.0.1 > 10.0.0.2 dqp=0x000011 pmtu=1024: 13 messages",
			"  psn 768-770: RDMA READ 2148 B <- va=0x7f1234563000 rkey=0x00c0ffee: unanswered",
			"UD 10.0.0.1 > 10.0.0.2 dqp=0x000013: 2 messages",
			"responses 10.0.0.1 > 10.0.0.2 dqp=0x000012: 10 matched no request",
		}},
		{[]string{"decode", "--summary", golden}, 0, []string{
			"total: 31 records, 31 RoCEv2 packets (0 malformed, 0 ICRC failures), 0 skipped (not RoCEv2)",
		}},
		{[]string{"decode", "--summary", filepath.Join(testdata, "broken.pcap")}, 1, []string{
			"(14 malformed, 1 ICRC failures)",
		}},
	}
	for _, tt := range tests {
		code, out, errOut := runCmd(tt.args...)
		if code != tt.code || errOut != "" {
			t.Errorf("%v: exit %d stderr %q, want exit %d", tt.args, code, errOut, tt.code)
		}
		for _, s := range tt.contains {
			if !strings.Contains(out, s) {
				t.Errorf("%v: output lacks %q", tt.args, s)
			}
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	dir := t.TempDir()
	notPcap := filepath.Join(dir, "x.txt")
	if err := os.WriteFile(notPcap, []byte("hello, world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(testdata, "golden.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "cut.pcap")
	if err := os.WriteFile(truncated, b[:len(b)-30], 0o644); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join(testdata, "golden.pcap")
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, 2, "usage: goroce"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"help"}, 0, ""},
		{[]string{"decode"}, 2, "exactly one FILE"},
		{[]string{"decode", golden, golden}, 2, "exactly one FILE"},
		{[]string{"decode", "--nope", golden}, 2, "flag provided but not defined"},
		{[]string{"decode", "--pmtu", "1000", golden}, 2, "not an InfiniBand MTU"},
		{[]string{"decode", "--json", "--flows", golden}, 2, "exclude each other"},
		{[]string{"decode", filepath.Join(dir, "missing.pcap")}, 2, "no such file"},
		{[]string{"decode", notPcap}, 2, "not a pcap or pcapng file"},
		{[]string{"decode", truncated}, 2, "unexpected EOF"},
		{[]string{"decode", "-h"}, 0, "usage: goroce decode"},
	}
	for _, tt := range tests {
		code, _, errOut := runCmd(tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.stderr) {
			t.Errorf("%v: exit %d stderr %q, want exit %d and %q", tt.args, code, errOut, tt.code, tt.stderr)
		}
	}
	// A read error comes after what could be decoded.
	code, out, _ := runCmd("decode", truncated)
	if code != 2 || strings.Count(out, "\n") != 30 {
		t.Errorf("truncated file: exit %d, %d lines", code, strings.Count(out, "\n"))
	}
}
