package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// EnvWireCheck names the independent wire checker's check-pcap.sh.
const EnvWireCheck = "GOROCE_WIRE_CHECK"

// payloadDissectors are Wireshark's dissectors of protocols carried over
// RDMA (NFS's RPC-over-RDMA, SMB Direct, SMC-R, NVMe-oF, Lustre, iSER,
// SDP, EoIB, FCoIB). Some claim a SEND's payload by heuristic: tshark
// 4.0's RPC-over-RDMA takes short ones (ib_send_lat's 2-byte message, a
// 6-byte one) and, finding no RPC header, marks the frame Malformed.
// goroce's tests carry none of these protocols, so the checker's tshark
// runs with them off: the InfiniBand dissector still decodes and checks
// every header, and the verdict on the RoCE layer is unchanged.
var payloadDissectors = []string{"rpcordma", "smb_direct", "smc", "nvme-rdma", "lnet",
	"iser", "infiniband_sdp", "infiniband.eoib", "fcoib"}

// WireCheckCommand returns the command that runs checker (the path in
// GOROCE_WIRE_CHECK) with args, its tshark reading a configuration of
// its own (WIRESHARK_CONFIG_DIR, in t's temporary directory) with the
// payload dissectors above disabled.
func WireCheckCommand(t testing.TB, checker string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(checker, args...)
	cmd.Env = WiresharkEnv(t)
	return cmd
}

// WiresharkEnv returns this process's environment with
// WIRESHARK_CONFIG_DIR naming a configuration, in t's temporary directory,
// that disables the payload dissectors above.
func WiresharkEnv(t testing.TB) []string {
	t.Helper()
	dir := t.TempDir()
	list := strings.Join(payloadDissectors, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "disabled_protos"), []byte(list), 0o644); err != nil {
		t.Fatalf("tshark's configuration: %v", err)
	}
	return append(os.Environ(), "WIRESHARK_CONFIG_DIR="+dir)
}
