// Package certtest makes the certificates of tests: a CA and the server
// and client certificates it issues, ECDSA P-256, written as PEM files in
// a test's temporary directory.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority of a test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate's PEM file.
	File string
	dir  string
	n    atomic.Int64
}

// NewCA makes a CA named name, its certificate in a PEM file of tb's.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, dir: tb.TempDir()}
	ca.n.Store(1)
	ca.File = filepath.Join(ca.dir, "ca.pem")
	writePEM(tb, ca.File, "CERTIFICATE", der)
	return ca
}

// Pool is a pool of the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Pair is an issued certificate and its key, in PEM files and parsed.
type Pair struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(tb testing.TB, cn string) Pair {
	tb.Helper()
	return ca.issue(tb, cn, x509.ExtKeyUsageServerAuth)
}

// Client issues a client certificate whose subject is CN=cn, O=holdfast
// tests.
func (ca *CA) Client(tb testing.TB, cn string) Pair {
	tb.Helper()
	return ca.issue(tb, cn, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(tb testing.TB, cn string, usage x509.ExtKeyUsage) Pair {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	n := ca.n.Add(1)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(n),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"holdfast tests"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	p := Pair{
		CertFile: filepath.Join(ca.dir, cn+"-"+big.NewInt(n).String()+".pem"),
		KeyFile:  filepath.Join(ca.dir, cn+"-"+big.NewInt(n).String()+"-key.pem"),
	}
	writePEM(tb, p.CertFile, "CERTIFICATE", der)
	writePEM(tb, p.KeyFile, "EC PRIVATE KEY", kder)
	if p.TLS, err = tls.LoadX509KeyPair(p.CertFile, p.KeyFile); err != nil {
		tb.Fatal(err)
	}
	return p
}

// Install copies p's files to certFile and keyFile (a rotation, as a
// certificate manager does it: the key first, then the certificate; each
// file replaced whole by a rename).
func (p Pair) Install(tb testing.TB, certFile, keyFile string) {
	tb.Helper()
	for _, f := range [][2]string{{p.KeyFile, keyFile}, {p.CertFile, certFile}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			tb.Fatal(err)
		}
		tmp := f[1] + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			tb.Fatal(err)
		}
		if err := os.Rename(tmp, f[1]); err != nil {
			tb.Fatal(err)
		}
	}
}

func writePEM(tb testing.TB, name, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(name, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}
