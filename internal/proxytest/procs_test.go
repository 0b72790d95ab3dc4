package proxytest

import (
	"bytes"
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
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// needBinary returns the path of a proxy's binary. Without it the test is
// skipped, but under CI (CI=true, where .ci/run installs it) it fails.
func needBinary(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if path := filepath.Join("/usr/sbin", name); exec.Command(path, "-v").Run() == nil {
		return path // Debian's place, off some PATHs
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found under CI=true (.ci/run installs it): %v", name, err)
	}
	t.Skipf("%s not found (apt-get install -y --no-install-recommends nginx haproxy): %v", name, err)
	return ""
}

// certs is a CA and a server certificate it signed (ECDSA P-256) for
// 127.0.0.1 and tlsHost, as files in a test's temporary directory.
type certs struct {
	pool              *x509.CertPool
	caFile            string
	certFile, keyFile string
	combined          string // certificate then key: HAProxy's crt
	serverCertificate tls.Certificate
}

// tlsHost is the name the server certificate carries besides 127.0.0.1
// (the forward proxy's test reaches it by name).
const tlsHost = "config.holdfast.test"

func newCerts(t testing.TB) *certs {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "holdfast test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: tlsHost},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{tlsHost}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	dir := t.TempDir()
	c := &certs{pool: x509.NewCertPool(), caFile: filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"), combined: filepath.Join(dir, "combined.pem")}
	c.pool.AddCert(caCert)
	for path, data := range map[string][]byte{
		c.caFile:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		c.certFile: certPEM, c.keyFile: keyPEM, c.combined: append(append([]byte{}, certPEM...), keyPEM...),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if c.serverCertificate, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	return c
}

// httpClient trusts the test CA; otherwise http.DefaultTransport's
// settings (HTTP/2 over TLS, the environment's proxy).
func (c *certs) httpClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: c.pool}
	return &http.Client{Transport: tr}
}

// proc is a proxy process run in the foreground on a loopback port.
type proc struct {
	t     testing.TB
	name  string
	port  int
	start func(port int) *exec.Cmd // the command to listen on port

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  *bytes.Buffer
}

// startProc starts a proxy on a port kept for the test
// (testutil.LoopbackPort: nginx and HAProxy cannot listen on port 0, and
// a restart finds it free), retrying on another port when it exits
// before it listens.
func startProc(t testing.TB, name string, start func(port int) *exec.Cmd) *proc {
	t.Helper()
	p := &proc{t: t, name: name, start: start}
	var err error
	for range 5 {
		p.port = testutil.LoopbackPort(t)
		if err = p.run(); err == nil {
			t.Cleanup(p.stop)
			return p
		}
	}
	t.Fatalf("%s did not start: %v", name, err)
	return nil
}

func (p *proc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// run starts the process on p.port and waits until it accepts connections.
func (p *proc) run() error {
	cmd := p.start(p.port)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = &lockedBuffer{b: out}, &lockedBuffer{b: out}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.addr(), time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		select {
		case <-done:
			return fmt.Errorf("exited before it listened on %s: %s", p.addr(), out)
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("not listening on %s after 15 s: %s", p.addr(), out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.mu.Lock()
	p.cmd, p.done, p.out = cmd, done, out
	p.mu.Unlock()
	return nil
}

// stop ends the process (SIGTERM, then SIGKILL after 5 s) and waits.
func (p *proc) stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// restart stops the proxy and starts it again on the same port (the
// client's endpoint), retrying while the port is not free yet.
func (p *proc) restart() {
	p.t.Helper()
	p.stop()
	var err error
	for range 50 {
		if err = p.run(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // a port in use: no condition to wait on but time
	}
	p.t.Fatalf("%s did not restart: %v", p.name, err)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// proxySetup is what a proxy's configuration says.
type proxySetup struct {
	upstream string // host:port
	tls      *certs // nil: plaintext
	// nginx: the location's directives; HAProxy: the defaults section's
	// timeouts.
	extra string
}

// nginx location directives of the configurations the tests use (and
// docs/PROXIES.md shows).
const (
	// nginxDefaults: proxy_pass alone (HTTP/1.0 to the upstream, a new
	// connection per request, proxy_buffering on; nginx honours the
	// server's X-Accel-Buffering: no on streams).
	nginxDefaults = ""
	// nginxSSE: the configuration recommended for streams.
	nginxSSE = `
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
			proxy_read_timeout 1h;`
	// nginxBuffering: a proxy that buffers streams whatever the server
	// says.
	nginxBuffering = `
			proxy_ignore_headers X-Accel-Buffering;`
)

// startNginx runs nginx in the foreground (daemon off, a master and one
// worker, as root so that its workers can write their temp files in the
// test's directory).
func startNginx(t testing.TB, s proxySetup) *proc {
	t.Helper()
	bin := needBinary(t, "nginx")
	dir := t.TempDir()
	return startProc(t, "nginx", func(port int) *exec.Cmd {
		listen := fmt.Sprintf("127.0.0.1:%d", port)
		var tlsConf string
		if s.tls != nil {
			listen += " ssl http2"
			tlsConf = fmt.Sprintf("ssl_certificate %s;\n\t\tssl_certificate_key %s;", s.tls.certFile, s.tls.keyFile)
		}
		conf := fmt.Sprintf(`user root;
daemon off;
master_process on;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 1024; }
http {
	access_log off;
	client_body_temp_path %[1]s/client_body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	server {
		listen %[2]s;
		%[3]s
		location / {
			proxy_pass http://%[4]s;%[5]s
		}
	}
}
`, dir, listen, tlsConf, s.upstream, s.extra)
		path := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		return exec.Command(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", path)
	})
}

// haproxyTimeouts: HAProxy's defaults as commonly written.
const haproxyTimeouts = `
	timeout connect 5s
	timeout client 50s
	timeout server 50s`

// startHAProxy runs HAProxy in the foreground (-db), mode http.
func startHAProxy(t testing.TB, s proxySetup) *proc {
	t.Helper()
	bin := needBinary(t, "haproxy")
	dir := t.TempDir()
	timeouts := s.extra
	if timeouts == "" {
		timeouts = haproxyTimeouts
	}
	return startProc(t, "haproxy", func(port int) *exec.Cmd {
		bind := fmt.Sprintf("127.0.0.1:%d", port)
		if s.tls != nil {
			bind += " ssl crt " + s.tls.combined + " alpn h2,http/1.1"
		}
		conf := fmt.Sprintf(`global
	maxconn 1024
defaults
	mode http%s
frontend holdfast
	bind %s
	default_backend servers
backend servers
	server s1 %s
`, timeouts, bind, s.upstream)
		path := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		return exec.Command(bin, "-db", "-f", path)
	})
}

func (p *proc) url(tls bool) string {
	if tls {
		return "https://" + p.addr()
	}
	return "http://" + p.addr()
}
