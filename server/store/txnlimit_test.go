package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestPublishPastTheRequestBytes: a publish whose transaction is larger
// than the store takes in one request (etcd's own refusal, or gRPC's
// past it) is a *RequestTooLargeError that names --max-request-bytes,
// and writes nothing.
func TestPublishPastTheRequestBytes(t *testing.T) {
	cl := startCluster(t)
	w := newWriter(t, cl.endpoints(), withMaxValueBytes(4<<20))
	ctx := auditCtx(t)
	value := func(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("x", n) + `"`) }
	for name, puts := range map[string]map[string]json.RawMessage{
		"etcd's limit":        {"a": value(2<<20 + 100<<10), "b": value(2<<20 + 100<<10)},
		"past gRPC's as well": {"a": value(3 << 20), "b": value(3 << 20)},
	} {
		_, err := w.Publish(ctx, "big.values", puts, nil)
		var rtl *store.RequestTooLargeError
		if !errors.As(err, &rtl) || !errors.Is(err, transport.ErrTooLarge) || !strings.Contains(err.Error(), "raise --max-request-bytes") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := w.History(ctx, "big.values", store.HistoryOptions{}); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("history after the refusals: %v; want none", err)
	}
}
