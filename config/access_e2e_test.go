package config_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// Access control as an application sees it: a token whose
// data scope leaves out one of the client's namespaces.

const (
	paymentsSecret = "s3cret-payments-svc-0001"
	opsSecret      = "s3cret-ops-everything-03"
	fraudForbidden = `token "payments-svc" may not read namespace "fraud.prod"`
)

func scopedServer(t *testing.T) *fakeserver.Server {
	t.Helper()
	toks, err := access.New(
		access.Token{Name: "payments-svc", Secret: paymentsSecret, Data: []string{"payments.*"}},
		access.Token{Name: "ops", Secret: opsSecret, Control: []string{"*"}, Data: []string{"*"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	srv := sdksuite.StartReference(t, fakeserver.WithTokens(toks))
	sdksuite.Publish(t, srv, "payments.prod", map[string]any{"v": 1})
	sdksuite.Publish(t, srv, "fraud.prod", map[string]any{"v": 1})
	return srv
}

// TestForbiddenNamespaceOnly: with a token for payments.*, opening
// fraud.prod fails with ErrUnauthorized and the server's reason, while
// payments.prod, on the same client and stream, keeps syncing.
func TestForbiddenNamespaceOnly(t *testing.T) {
	srv := scopedServer(t)
	c := sdksuite.NewDefaultClient(t, sdksuite.Endpoint(srv.URL()), config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond), config.WithBearerToken(paymentsSecret))
	pay := sdksuite.Open(t, c, "payments.prod")

	err := openRefused(c, "fraud.prod")
	var oe *config.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, transport.ErrUnauthorized) || !strings.Contains(err.Error(), fraudForbidden) {
		t.Fatalf("open fraud.prod: %v, want an OpenError wrapping ErrUnauthorized with the reason", err)
	}
	rev := sdksuite.Publish(t, srv, "payments.prod", map[string]any{"v": 2})
	nstest.WaitRevision(t, pay, rev, waitLimit)
	if st := pay.Status(); st.State != config.StateFresh {
		t.Fatalf("payments.prod: %+v", st)
	}
}

// TestForbiddenNamespaceStatus: a client whose cache holds both
// namespaces (from a broader token) restarts with a token for payments.*:
// fraud.prod serves its last good and its Status says unauthorized (HTTP
// 403, the server's reason); payments.prod is fresh and keeps syncing.
func TestForbiddenNamespaceStatus(t *testing.T) {
	srv := scopedServer(t)
	dir := t.TempDir()
	before := sdksuite.NewDefaultClient(t, sdksuite.Endpoint(srv.URL()), config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond), config.WithBearerToken(opsSecret), config.WithCacheDir(dir))
	sdksuite.Open(t, before, "payments.prod")
	sdksuite.Open(t, before, "fraud.prod")
	if err := before.Close(); err != nil {
		t.Fatal(err)
	}

	c := sdksuite.NewDefaultClient(t, sdksuite.Endpoint(srv.URL()), config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond), config.WithBearerToken(paymentsSecret), config.WithCacheDir(dir),
		config.WithUnauthorizedBackoff(20*time.Millisecond))
	fraud := sdksuite.Open(t, c, "fraud.prod")
	pay := sdksuite.Open(t, c, "payments.prod")
	testutil.Eventually(t, waitLimit, func() bool {
		e := fraud.Status().LastError
		return e.Kind == config.ErrorUnauthorized && e.StatusCode == http.StatusForbidden && strings.Contains(e.Message, fraudForbidden)
	}, "fraud.prod's status to say unauthorized")
	// It keeps being refused (retried at the unauthorized backoff) while
	// payments.prod syncs.
	rev := sdksuite.Publish(t, srv, "payments.prod", map[string]any{"v": 2})
	sdksuite.Publish(t, srv, "fraud.prod", map[string]any{"v": 2})
	nstest.WaitRevision(t, pay, rev, waitLimit)
	if st := pay.Status(); st.State != config.StateFresh || st.LastError.Kind == config.ErrorUnauthorized && !st.LastError.Recovered {
		t.Fatalf("payments.prod: %+v", st)
	}
	st := fraud.Status()
	if st.State == config.StateFresh || st.Origin != config.OriginDisk || fraud.Int("v", 0) != 1 || st.LastError.Recovered {
		t.Fatalf("fraud.prod: %+v, v %d; want its last good from disk, unconfirmed, the error current", st, fraud.Int("v", 0))
	}
	if strings.Contains(st.LastError.String(), paymentsSecret) {
		t.Fatalf("the status shows the secret: %s", st.LastError)
	}
}

// openRefused opens name with short deadlines until an attempt's error
// wraps ErrUnauthorized (its first snapshot was answered in time), or 10s
// passed; it returns the last error.
func openRefused(c *config.Client, name string) error {
	var err error
	testutil.Wait(10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err = c.Namespace(ctx, name)
		return err == nil || errors.Is(err, transport.ErrUnauthorized)
	})
	return err
}
