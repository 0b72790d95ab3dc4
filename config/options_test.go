package config_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestWithHTTPOptionsReachTheSource: any transport.HTTPOption reaches the
// HTTP source, and an invalid one fails New with the source's error.
func TestWithHTTPOptionsReachTheSource(t *testing.T) {
	var ua atomic.Value
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ua.Store(r.UserAgent())
		http.NotFound(w, r)
	}))
	defer hs.Close()
	c, err := config.New(config.WithEndpoint(hs.URL), config.WithHTTPOptions(transport.WithUserAgent("probe/1")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _ = c.Namespace(ctx, "ns")
	if got, _ := ua.Load().(string); got != "probe/1" {
		t.Errorf("User-Agent %q, want probe/1", got)
	}

	for name, opt := range map[string]config.Option{
		"transport option": config.WithHTTPOptions(transport.WithMaxEventBytes(0)),
		"wrapper":          config.WithMaxSnapshotBytes(-1),
		"watch mode":       config.WithWatchMode(transport.WatchMode(42)),
	} {
		if c, err := config.New(config.WithEndpoint(hs.URL), opt); err == nil {
			_ = c.Close()
			t.Errorf("%s: New succeeded", name)
		}
	}
	// nil keeps the default client, as before.
	c2, err := config.New(config.WithEndpoint(hs.URL), config.WithHTTPClient(nil))
	if err != nil {
		t.Fatalf("WithHTTPClient(nil): %v", err)
	}
	_ = c2.Close()
}
