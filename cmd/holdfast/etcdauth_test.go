package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server/store"
)

// testPKI is a CA and the certificates the test's etcd and holdfast use,
// ECDSA P-256, written as PEM files in dir.
type testPKI struct {
	dir                                      string
	ca, server, serverKey, client, clientKey string
	jwtPub, jwtPriv                          string
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writeKey(t *testing.T, path string, k *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	p := &testPKI{dir: dir}
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "holdfast test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p.ca = filepath.Join(dir, "ca.pem")
	writePEM(t, p.ca, "CERTIFICATE", caDER)
	leaf := func(name, cn string, serial int64, usage []x509.ExtKeyUsage) (string, string) {
		k := newKey(t)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, cert, "CERTIFICATE", der)
		writeKey(t, key, k)
		return cert, key
	}
	// The members serve clients and peers with one certificate, and
	// present it as peer clients too.
	p.server, p.serverKey = leaf("member", "etcd-member", 2, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	p.client, p.clientKey = leaf("client", "holdfast-client", 3, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	jwt := newKey(t)
	p.jwtPriv = filepath.Join(dir, "jwt.key")
	writeKey(t, p.jwtPriv, jwt)
	pub, err := x509.MarshalPKIXPublicKey(&jwt.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	p.jwtPub = filepath.Join(dir, "jwt.pub")
	writePEM(t, p.jwtPub, "PUBLIC KEY", pub)
	return p
}

// clientTLS is the TLS configuration of the holdfast client certificate.
func (p *testPKI) clientTLS(t *testing.T) *tls.Config {
	t.Helper()
	pemCA, err := os.ReadFile(p.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	pair, err := tls.LoadX509KeyPair(p.client, p.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

func dialEtcd(t *testing.T, members string, tlsCfg *tls.Config, user, password string) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, m := range strings.Split(members, ",") {
		eps = append(eps, "https://"+m)
	}
	cli, err := store.Dial(eps, store.Security{TLS: tlsCfg, Username: user, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// TestEtcdOverTLSWithAuth: a real 3-member etcd cluster with TLS on its
// client and peer URLs (certificates made here: ECDSA P-256, IP SAN
// 127.0.0.1; client certificates required), JWT auth tokens signed
// ES256, and `auth enable` with a root user and a holdfast user whose role
// has read and write on the "/holdfast" prefix. holdfast server, an
// operator command's -etcd and server export reach it with -etcd-cacert,
// -etcd-cert, -etcd-key and -etcd-user, the password from a file or the
// environment; without credentials the cluster refuses.
func TestEtcdOverTLSWithAuth(t *testing.T) {
	pki := newPKI(t)
	members := startEtcdCluster(t, "https", func(int) []string {
		return []string{
			"--cert-file", pki.server, "--key-file", pki.serverKey, "--trusted-ca-file", pki.ca, "--client-cert-auth",
			"--peer-cert-file", pki.server, "--peer-key-file", pki.serverKey, "--peer-trusted-ca-file", pki.ca, "--peer-client-cert-auth",
			"--auth-token", "jwt,pub-key=" + pki.jwtPub + ",priv-key=" + pki.jwtPriv + ",sign-method=ES256,ttl=10m",
		}
	})
	tlsCfg := pki.clientTLS(t)
	admin := dialEtcd(t, members, tlsCfg, "", "")
	testutil.EventuallyNil(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := admin.Get(ctx, "health")
		return err
	}, "the TLS cluster to answer")

	// Users, a role on the prefix, then auth on.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const rootPW, holdfastPW = "root-password-for-the-test", "holdfast-password-for-the-test"
	steps := []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", rootPW); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "holdfast"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "holdfast", "/holdfast", clientv3.GetPrefixRangeEnd("/holdfast"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "holdfast", holdfastPW); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "holdfast", "holdfast"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
	// The cluster's tokens are JWTs (three base64url parts, ES256).
	resp, err := admin.Auth.Authenticate(ctx, "holdfast", holdfastPW)
	if err != nil {
		t.Fatal(err)
	}
	if parts := strings.Split(resp.Token, "."); len(parts) != 3 || !strings.HasPrefix(resp.Token, "eyJ") {
		t.Fatalf("the cluster's auth token is not a JWT: %q", resp.Token)
	}
	// Without credentials, and outside the role's prefix, the cluster
	// refuses.
	if _, err := admin.Get(ctx, "/holdfast/x"); err == nil {
		t.Fatal("a read without credentials passed")
	}
	hf := dialEtcd(t, members, tlsCfg, "holdfast", holdfastPW)
	if _, err := hf.Put(ctx, "/elsewhere", "x"); err == nil {
		t.Fatal("a write outside the holdfast prefix passed")
	}

	dir := t.TempDir()
	pwFile := writeSecret(t, dir, "etcd-password", holdfastPW)
	etcdFlags := []string{"-etcd", members, "-etcd-cacert", pki.ca, "-etcd-cert", pki.client, "-etcd-key", pki.clientKey, "-etcd-user", "holdfast"}

	bin := buildBinary(t)
	srv := startServerProc(t, bin, append(etcdFlags, "-etcd-password-file", pwFile)...)
	if code, body := request(t, "POST", srv.url()+"/control/namespaces/payments.prod/publish", "", `{"puts":{"v":1},"actor":"alice"}`); code != http.StatusOK {
		t.Fatalf("publish over the TLS, authenticated store: %d %s", code, body)
	}
	if code, body := request(t, "GET", srv.url()+"/sdk/snapshot?ns=payments.prod", "", ""); code != http.StatusOK || !strings.Contains(body, `"v":1`) {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	code, body := request(t, "GET", srv.url()+"/statusz", "", "")
	if code != http.StatusOK || !strings.Contains(body, "https://127.0.0.1:") {
		t.Fatalf("statusz: %d %s", code, body)
	}

	// An operator command's -etcd, the password from the environment.
	t.Setenv(etcdPasswordEnv, holdfastPW)
	code, stdout, stderr := cli(t, append([]string{"history"}, append(etcdFlags, "payments.prod")...)...)
	if code != exitOK || !strings.Contains(stdout, "alice") {
		t.Fatalf("history -etcd over TLS with auth: exit %d\n%s%s", code, stdout, stderr)
	}
	// server export, the password from the file.
	export := filepath.Join(dir, "store.jsonl")
	code, _, stderr = cli(t, append([]string{"server", "export", "-o", export, "-etcd-password-file", pwFile}, etcdFlags...)...)
	if code != exitOK {
		t.Fatalf("server export: exit %d: %s", code, stderr)
	}
	if data, err := os.ReadFile(export); err != nil || !strings.Contains(string(data), "payments.prod") {
		t.Fatalf("the export: %v\n%.500s", err, data)
	}

	// The wrong password: the store refuses, the server does not start.
	t.Setenv(etcdPasswordEnv, "not-the-password")
	code, _, stderr = cli(t, append([]string{"server", "-addr", "127.0.0.1:0", "-start-timeout", "3s"}, etcdFlags...)...)
	if code == exitOK || !strings.Contains(stderr, "authentication failed") {
		t.Fatalf("server with a wrong etcd password: exit %d: %s", code, stderr)
	}
	srv.stop()
}

// TestEtcdSecurityUsageErrors: a password never comes from a flag, and
// the flags go together as documented.
func TestEtcdSecurityUsageErrors(t *testing.T) {
	t.Setenv(etcdPasswordEnv, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"server", "-etcd", "127.0.0.1:2379", "-etcd-user", "holdfast"}, "-etcd-user holdfast needs a password: -etcd-password-file FILE or $HOLDFAST_ETCD_PASSWORD"},
		{[]string{"server", "-etcd", "127.0.0.1:2379", "-etcd-cert", "c.pem"}, "-etcd-cert and -etcd-key go together"},
		{[]string{"server", "-memory", "-etcd-user", "x"}, "are for -etcd"},
		{[]string{"server", "-etcd", "127.0.0.1:2379", "-etcd-password", "x"}, "flag provided but not defined: -etcd-password"},
		{[]string{"history", "-server", "http://127.0.0.1:1", "-etcd-cacert", "ca.pem", "ns"}, "are for -etcd, not -server"},
	} {
		code, _, stderr := cli(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}
