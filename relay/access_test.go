package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

const (
	paymentsSecret = "s3cret-payments-svc-0001"
	edgeSecret     = "s3cret-edge-relay-000004"
	opsSecret      = "s3cret-ops-everything-03"
)

// accessTokens is the configuration the origin and the relay share: a
// service reading payments.*, the relay's own token (data over
// payments.*, what it serves), and an operator's.
func accessTokens(t testing.TB) *access.Tokens {
	t.Helper()
	toks, err := access.New(
		access.Token{Name: "payments-svc", Secret: paymentsSecret, Data: []string{"payments.*"}},
		access.Token{Name: "edge-relay", Secret: edgeSecret, Data: []string{"payments.*"}, Relay: true},
		access.Token{Name: "ops", Secret: opsSecret, Control: []string{"*"}, Data: []string{"*"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func noSecrets(t testing.TB, what, text string) {
	t.Helper()
	for _, s := range []string{paymentsSecret, edgeSecret, opsSecret} {
		if strings.Contains(text, s) {
			t.Errorf("%s shows a secret:\n%s", what, text)
		}
	}
}

// get fetches url with "Authorization: Bearer secret" (none for "").
func get(t testing.TB, url, secret string) (int, string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// scopedOrigin is an origin with accessTokens and payments.prod and
// fraud.prod published.
func scopedOrigin(t *testing.T, logs *logBuffer) *holdfasttest.Server {
	t.Helper()
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond),
		holdfasttest.WithTokens(accessTokens(t)), holdfasttest.WithLogger(logs.logger()))
	for _, ns := range []string{"payments.prod", "fraud.prod"} {
		if _, err := origin.Publish(ns, map[string]any{"v": 1}); err != nil {
			t.Fatal(err)
		}
	}
	return origin
}

// upstream is an HTTP source of url with the relay's own token.
func upstream(t testing.TB, url, secret string) transport.Source {
	t.Helper()
	opts := []transport.HTTPOption{}
	if secret != "" {
		opts = append(opts, transport.WithBearerToken(secret))
	}
	src, err := transport.NewHTTPSource(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// TestRelayEnforcesScopes: a relay with the origin's token configuration
// refuses a client without a token (401) and a read outside its scope
// (403, with the reason, and without following the namespace upstream);
// it follows its upstream with a token of its own, and forwards its
// clients' acks under it, which the origin records.
func TestRelayEnforcesScopes(t *testing.T) {
	var originLogs, relayLogs logBuffer
	origin := scopedOrigin(t, &originLogs)
	r, url := startRelay(t, origin.URL(), withSource(upstream(t, origin.URL(), edgeSecret)),
		relay.WithTokens(accessTokens(t)), relay.WithLogger(relayLogs.logger()))

	if code, body := get(t, url+"/sdk/snapshot?ns=payments.prod", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token at the relay: %d %s, want 401", code, body)
	}
	code, body := get(t, url+"/sdk/snapshot?ns=fraud.prod", paymentsSecret)
	var eb transport.ErrorBody
	if code != http.StatusForbidden || json.Unmarshal([]byte(body), &eb) != nil || eb.Error != transport.CodeForbidden ||
		eb.Message != `token "payments-svc" may not read namespace "fraud.prod"` {
		t.Fatalf("fraud.prod at the relay: %d %s, want 403 with the reason", code, body)
	}

	c := newClient(t, url, config.WithBearerToken(paymentsSecret))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pay, err := c.Namespace(ctx, "payments.prod")
	if err != nil {
		t.Fatal(err)
	}
	var openErr error
	testutil.Wait(waitLimit, func() bool {
		// Short attempts until one's first snapshot is answered in time.
		short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancelShort()
		_, openErr = c.Namespace(short, "fraud.prod")
		return openErr == nil || errors.Is(openErr, transport.ErrUnauthorized)
	})
	if !errors.Is(openErr, transport.ErrUnauthorized) {
		t.Fatalf("open fraud.prod through the relay: %v, want ErrUnauthorized", openErr)
	}
	rev, _ := origin.Publish("payments.prod", map[string]any{"v": 2})
	if err := pay.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	for _, ns := range r.Namespaces() {
		if ns.Namespace == "fraud.prod" {
			t.Fatalf("the relay follows fraud.prod for a client that may not read it: %+v", ns)
		}
	}
	testutil.Eventually(t, waitLimit, func() bool {
		for _, cs := range origin.Clients() {
			if cs.ClientID == c.ClientID() && cs.Namespace == "payments.prod" && cs.AckedRevision == rev {
				return true
			}
		}
		return false
	}, "the origin to record the client's ack, forwarded under the relay's token")
	if !strings.Contains(relayLogs.String(), `"msg":"relay: access control on","tokens":["payments-svc","edge-relay","ops"]`) {
		t.Errorf("the relay's log does not say access is controlled:\n%s", relayLogs.String())
	}
	noSecrets(t, "the relay's log", relayLogs.String())
	noSecrets(t, "the origin's log", originLogs.String())
}

// TestRelayNeedsItsOwnToken: a relay without a token of its own is
// refused by an origin that requires one (its namespace's last error
// says so); and without WithTokens a relay says at start that it is
// open.
func TestRelayNeedsItsOwnToken(t *testing.T) {
	var originLogs, relayLogs logBuffer
	origin := scopedOrigin(t, &originLogs)
	r, _ := startRelay(t, origin.URL(), withSource(upstream(t, origin.URL(), "")), relay.WithLogger(relayLogs.logger()),
		relay.WithNamespaces("payments.prod"))
	if !strings.Contains(relayLogs.String(), `"level":"WARN","msg":"relay: no tokens configured`) {
		t.Errorf("an open relay does not warn:\n%s", relayLogs.String())
	}
	testutil.Eventually(t, waitLimit, func() bool {
		for _, ns := range r.Namespaces() {
			if ns.Namespace == "payments.prod" && strings.Contains(ns.LastError, "unauthorized") {
				return true
			}
		}
		return false
	}, "the relay's namespace to record the upstream's 401")
}
