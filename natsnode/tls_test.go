package natsnode_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/natsnode"
)

// writeCert writes a certificate signed by parent (self-signed when nil)
// and its key as PEM files in dir, and returns them.
func writeCert(t *testing.T, dir, name string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, key, certFile, keyFile
}

// TestTLSFromEnv: the server's TLS block of docs/security.md (a CA, a
// server certificate, verify: clients present certificates too); with
// NATS_CA, NATS_CERT and NATS_KEY a Weft client connects, without the
// client certificate or without the CA it does not.
func TestTLSFromEnv(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	now := time.Now()
	ca, caKey, caFile, _ := writeCert(t, dir, "ca", &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "weft test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	_, _, srvCert, srvKey := writeCert(t, dir, "server", &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey)
	_, _, cliCert, cliKey := writeCert(t, dir, "client", &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "runner"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey)
	conf := filepath.Join(dir, "tls.conf")
	writeFile(t, conf, "tls {\n  cert_file: \""+srvCert+"\"\n  key_file: \""+srvKey+"\"\n  ca_file: \""+caFile+"\"\n  verify: true\n}\n")
	srv, err := natsnode.Start(ctx, natsnode.WithConfigFile(conf), natsnode.WithDataDir(filepath.Join(dir, "store")), natsnode.WithListen(0),
		natsnode.WithTLS(caFile, cliCert, cliKey))
	if err != nil {
		t.Fatalf("embedded TLS server with a client certificate: %v", err)
	}
	defer srv.Close(ctx)
	url := strings.Replace(srv.URL(), "nats://", "tls://", 1)
	env := map[string]string{natsnode.EnvURL: url, natsnode.EnvCA: caFile, natsnode.EnvCert: cliCert, natsnode.EnvKey: cliKey}
	n, err := natsnode.Start(ctx, natsnode.FromEnv(func(k string) string { return env[k] })...)
	if err != nil {
		t.Fatalf("NATS_CA, NATS_CERT, NATS_KEY: %v", err)
	}
	n.Close(ctx)
	for name, drop := range map[string][]string{"no client certificate": {natsnode.EnvCert, natsnode.EnvKey}, "no CA": {natsnode.EnvCA}} {
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		for _, k := range drop {
			delete(e, k)
		}
		// A refused handshake is tried again for the connect wait (30 s by
		// default): a second of it shows the refusal as well.
		opts := append(natsnode.FromEnv(func(k string) string { return e[k] }), natsnode.WithNATSOptions(nats.MaxReconnects(0)), natsnode.WithConnectWait(time.Second))
		if n, err := natsnode.Start(ctx, opts...); err == nil {
			n.Close(ctx)
			t.Errorf("%s: connected", name)
		}
	}
}
