package agent_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/probe/agent"
)

// probeSecretHash is the bcrypt hash of "probe-secret", as
// basic_auth_users takes it, at bcrypt's lowest cost (4): the exporter
// toolkit checks one password at a time, and a wrong one at cost 10 took
// more than 30 s under the race detector on a busy machine.
const probeSecretHash = "$2a$04$Bu4vw.R0dn55/FYVpZpHgOi1ofQcBYOTv5ORWNx0pentxdbHqo7Gm"

// selfSigned writes a certificate for the test's loopback addresses and
// its key to dir, and returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "goroce probe test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{addr(0).AsSlice(), addr(1).AsSlice()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return cert, key, pool
}

// Two agents serving TLS with basic authentication (an exporter toolkit
// web config) find and probe each other over it, and curl, a real client,
// gets /metrics with the password and the CA, 401 without the password,
// and nothing over plain HTTP.
func TestTLSAndBasicAuth(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	webcfg := filepath.Join(dir, "web.yml")
	os.WriteFile(webcfg, []byte(fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prometheus: %s\n", cert, key, probeSecretHash)), 0o600)
	path := filepath.Join(dir, "pinglist.yaml")
	port := freePort(t, 2)
	write(t, path, pinglist(port, "a/0/g1", "b/1/g1"))
	tlsOpts := func(o *agent.Options) {
		o.WebConfig = webcfg
		o.PeerTLS = &tls.Config{RootCAs: pool}
		o.PeerUser, o.PeerPassword = "prometheus", "probe-secret"
	}
	a := startWith(t, path, 0, port, tlsOpts)
	startWith(t, path, 1, port, tlsOpts)
	waitFor(t, 60*time.Second, "a probing b over TLS discovery", func() bool {
		for _, p := range a.a.Paths() {
			if p.Dst == "b" && p.Completed >= 5 {
				return true
			}
		}
		return false
	})
	base := fmt.Sprintf("https://%s:%d", addr(0), port)
	run := func(args ...string) (string, error) {
		out, err := exec.Command(curl, append([]string{"-sS", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_code}"}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if code, err := run("--cacert", cert, "-u", "prometheus:probe-secret", base+"/metrics"); err != nil || code != "200" {
		t.Errorf("curl with the password: %s %v", code, err)
	}
	if code, err := run("--cacert", cert, base+"/metrics"); err != nil || code != "401" {
		t.Errorf("curl without the password: %s %v, want 401", code, err)
	}
	if code, err := run("--cacert", cert, "-u", "prometheus:wrong", base+"/probe/v1/self"); err != nil || code != "401" {
		t.Errorf("curl with a wrong password: %s %v, want 401", code, err)
	}
	if code, err := run(strings.Replace(base, "https", "http", 1) + "/metrics"); code == "200" {
		t.Errorf("plain HTTP answered: %s %v", code, err)
	}
	if code, err := run("-u", "prometheus:probe-secret", base+"/metrics"); err == nil && code == "200" {
		t.Errorf("curl trusted the self-signed certificate without its CA")
	}
}
