package config_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestNamespaceWithOtherOptionsFails (hole 10): a second open of an open
// name with other options fails, saying which; the same options share it.
func TestNamespaceWithOtherOptionsFails(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "opts", map[string]any{"k": 1})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	first := sdksuite.Open(t, c, "opts", config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": 0}))
	same := sdksuite.Open(t, c, "opts", config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": 0}))
	if same != first {
		t.Error("the same options gave another Namespace")
	}
	for name, opts := range map[string][]config.NamespaceOption{
		"MaxStaleness": {config.MaxStaleness(time.Hour), config.Defaults(map[string]any{"k": 0})},
		"FailClosed":   {config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": 0}), config.FailClosed()},
		"Defaults":     {config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": 1})},
		"Schema":       {config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": 0}), config.Schema([]byte(`{}`))},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		_, err := c.Namespace(ctx, "opts", opts...)
		cancel()
		if !errors.Is(err, config.ErrOptionsDiffer) {
			t.Errorf("%s differs: err = %v; want ErrOptionsDiffer", name, err)
		}
	}
}

// TestOpeningFailuresAreToldApartAndLogged (hole 11): a wrong base path
// and an unknown namespace are different errors, and failed attempts
// while opening are logged at Warn, rate-limited. Before: both were
// ErrNotFound, and nothing was logged at any level.
func TestOpeningFailuresAreToldApartAndLogged(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "known", map[string]any{"k": 1})
	web := httptest.NewServer(http.NotFoundHandler()) // an ordinary web server: 404 text
	t.Cleanup(web.Close)
	for _, tt := range []struct {
		name, url, ns string
		want          error
	}{
		{"wrong base path", srv.URL() + "/not-the-api", "known", transport.ErrNotHoldfast},
		{"not a holdfast server", web.URL, "known", transport.ErrNotHoldfast},
		{"unknown namespace", srv.URL(), "unknown", transport.ErrNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs := &recordingHandler{}
			c := sdksuite.NewClient(t, sdksuite.Endpoint(tt.url), config.WithLogger(slog.New(logs)))
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := c.Namespace(ctx, tt.ns)
			var oe *config.OpenError
			if !errors.As(err, &oe) || !errors.Is(err, tt.want) {
				t.Fatalf("open error = %v; want an *OpenError wrapping %v", err, tt.want)
			}
			other := transport.ErrNotFound
			if tt.want == transport.ErrNotFound {
				other = transport.ErrNotHoldfast
			}
			if errors.Is(err, other) {
				t.Errorf("open error %v also matches %v", err, other)
			}
			// At 5-50 ms backoff, dozens of attempts: one Warn, the
			// rest at Debug.
			if n := logs.count(slog.LevelWarn, "snapshot failed"); n != 1 {
				t.Errorf("%d Warn logs of failed attempts; want 1 (rate-limited)", n)
			}
			if n := logs.count(slog.LevelDebug, "snapshot failed"); n == 0 {
				t.Error("repeated failed attempts left no Debug log")
			}
		})
	}
}
