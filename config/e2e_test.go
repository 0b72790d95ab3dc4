package config_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Timings for tests, the harness's (internal/sdksuite): a fast heartbeat,
// and a client that declares a stream dead after three of them (testIdle)
// where a test is about that; elsewhere the harness's relaxed idle
// timeout, so a machine loaded by -race and busy readers does not turn
// slow replies into reconnects.
const (
	testHeartbeat = sdksuite.Heartbeat
	testIdle      = 3 * testHeartbeat
	relaxedIdle   = sdksuite.RelaxedIdle
	waitLimit     = sdksuite.WaitLimit
)

func TestInvalidNamespaceName(t *testing.T) {
	srv := sdksuite.StartReference(t)
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	for _, name := range []string{"", ".", "..", "../x", "a/b", "/abs", "UPPER", "-lead", string(make([]byte, 200))} {
		_, err := c.Namespace(context.Background(), name)
		if !errors.Is(err, transport.ErrInvalidNamespace) {
			t.Errorf("Namespace(%q) = %v; want ErrInvalidNamespace", name, err)
		}
	}
}

func TestNewValidatesOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []config.Option
	}{
		{"no endpoint", nil},
		{"bad url", []config.Option{config.WithEndpoint("ftp://x")}},
		{"nil logger", []config.Option{config.WithEndpoint("http://127.0.0.1:1"), config.WithLogger(nil)}},
		{"bad backoff", []config.Option{config.WithEndpoint("http://127.0.0.1:1"), config.WithReconnectBackoff(time.Second, time.Millisecond)}},
		{"bad idle", []config.Option{config.WithEndpoint("http://127.0.0.1:1"), config.WithStreamIdleTimeout(0)}},
		{"a client id the server refuses", []config.Option{config.WithEndpoint("http://127.0.0.1:1"), config.WithClientID("host\n1")}},
		{"a client id too long", []config.Option{config.WithEndpoint("http://127.0.0.1:1"), config.WithClientID(strings.Repeat("h", 257))}},
	}
	for _, tt := range tests {
		if c, err := config.New(tt.opts...); err == nil {
			_ = c.Close()
			t.Errorf("%s: New succeeded", tt.name)
		}
	}
}

// TestSDKAgainstTheReferenceServer runs the SDK's end-to-end suite
// against the reference server; the server module runs it against
// holdfast server, transport/etcd against the etcd source.
func TestSDKAgainstTheReferenceServer(t *testing.T) {
	sdksuite.Run(t, sdksuite.Reference)
}
