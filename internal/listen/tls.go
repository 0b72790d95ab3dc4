package listen

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// reloadCheckEvery bounds how often a handshake looks at the
// certificate files' modification times.
const reloadCheckEvery = time.Second

// TLS is a listener's TLS: a certificate and key from files, reloaded
// when they change, and optionally the CAs of client certificates.
type TLS struct {
	certFile, keyFile string
	clientCAs         *x509.CertPool
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]time.Time // the files' modification times of cert
	checked time.Time
}

// NewTLS loads certFile and keyFile (PEM) and, if clientCAFile is not
// empty, the CA certificates that client certificates must chain to:
// mutual TLS, every client must present one. It fails if the pair does
// not load or match.
func NewTLS(certFile, keyFile, clientCAFile string, log *slog.Logger) (*TLS, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &TLS{certFile: certFile, keyFile: keyFile, log: log}
	c, stamp, err := t.load()
	if err != nil {
		return nil, err
	}
	t.cert, t.stamp, t.checked = c, stamp, time.Now()
	if clientCAFile != "" {
		if t.clientCAs, err = LoadCertPool(clientCAFile); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// LoadCertPool reads a PEM file of CA certificates.
func LoadCertPool(name string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", name)
	}
	return pool, nil
}

func (t *TLS) load() (*tls.Certificate, [2]time.Time, error) {
	var stamp [2]time.Time
	for i, f := range []string{t.certFile, t.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, stamp, err
		}
		stamp[i] = fi.ModTime()
	}
	c, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
	if err != nil {
		return nil, stamp, fmt.Errorf("TLS certificate %s and key %s: %w", t.certFile, t.keyFile, err)
	}
	return &c, stamp, nil
}

// Certificate returns the pair in use, first reloading it if its files
// changed (looked at once per reloadCheckEvery at most). A new pair that
// does not load or match is logged and the old one kept.
func (t *TLS) Certificate() *tls.Certificate {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if now.Sub(t.checked) < reloadCheckEvery {
		return t.cert
	}
	t.checked = now
	t.reloadLocked()
	return t.cert
}

// Reload reloads the pair now if its files changed, as a handshake would.
func (t *TLS) Reload() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.checked = time.Now()
	return t.reloadLocked()
}

func (t *TLS) reloadLocked() error {
	var stamp [2]time.Time
	for i, f := range []string{t.certFile, t.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			t.log.Warn("TLS certificate not reloaded: keeping the one in use", "err", err)
			return err
		}
		stamp[i] = fi.ModTime()
	}
	if stamp == t.stamp {
		return nil
	}
	c, stamp, err := t.load()
	if err != nil {
		// Perhaps half written (the certificate before the key): the
		// next look tries again.
		t.log.Warn("TLS certificate not reloaded: keeping the one in use", "err", err)
		return err
	}
	if same(c, t.cert) {
		t.stamp = stamp
		return nil
	}
	t.cert, t.stamp = c, stamp
	leaf := c.Leaf
	var attrs []any
	if leaf != nil {
		attrs = append(attrs, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter)
	}
	t.log.Info("TLS certificate reloaded", attrs...)
	return nil
}

func same(a, b *tls.Certificate) bool {
	if a == nil || b == nil || len(a.Certificate) != len(b.Certificate) {
		return false
	}
	for i := range a.Certificate {
		if !bytes.Equal(a.Certificate[i], b.Certificate[i]) {
			return false
		}
	}
	return true
}

// ServerConfig returns the tls.Config of a listener: TLS 1.2 at least,
// the certificate through GetCertificate (reloaded), session tickets on,
// and with client CAs every client must present a certificate that
// chains to them.
func (t *TLS) ServerConfig() *tls.Config {
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := t.Certificate(); c != nil {
				return c, nil
			}
			return nil, errors.New("no certificate")
		},
	}
	if t.clientCAs != nil {
		c.ClientCAs = t.clientCAs
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if k, ok := ticketKey(t.Certificate()); ok {
		c.SetSessionTicketKeys([][32]byte{k})
	}
	return c
}

// ticketKey derives the session ticket key from the pair's private key:
// a process restarted with the same pair (or another replica given it)
// decrypts the tickets the last one issued, so the clients of a reconnect
// storm resume their sessions instead of each making a full handshake.
// Go's default, keys of the process's own, rotated daily, resumes
// nothing across a restart. The key holds while the process runs; a new
// pair takes effect at the next start. Whoever has the private key can
// already be the server.
func ticketKey(c *tls.Certificate) ([32]byte, bool) {
	if c == nil {
		return [32]byte{}, false
	}
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return [32]byte{}, false
	}
	return sha256.Sum256(append([]byte("holdfast TLS session ticket key v1\x00"), der...)), true
}

// ClientConfig returns the tls.Config of a client (a relay's upstream,
// the CLI): the CAs of caFile (empty: the system's) and, with certFile
// and keyFile, a client certificate, reloaded as a listener's is.
func ClientConfig(caFile, certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := LoadCertPool(caFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		t, err := NewTLS(certFile, keyFile, "", log)
		if err != nil {
			return nil, err
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return t.Certificate(), nil }
	case certFile != "" || keyFile != "":
		return nil, errors.New("a client certificate needs both its certificate and its key")
	}
	return c, nil
}
