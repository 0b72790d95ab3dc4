package httpmetrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/holdfast-dev/holdfast/internal/httpmetrics"
)

// TestWrap: a request is counted under its mux pattern without the
// method, never its raw path; one no pattern served under Unmatched; an
// unknown method as "other"; a handler that writes nothing as 200.
func TestWrap(t *testing.T) {
	h := &recordingHistogram{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	mux.HandleFunc("/quiet", func(http.ResponseWriter, *http.Request) {})
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refused" {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		mux.ServeHTTP(w, r)
	})
	wrapped, err := httpmetrics.Wrap(meter{h: h}, "test.duration", outer)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []struct{ method, path string }{
		{"GET", "/items/1"}, {"GET", "/items/2"}, {"BREW", "/quiet"}, {"GET", "/refused"},
	} {
		wrapped.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(req.method, req.path, nil))
	}
	want := []string{
		"/items/{id} GET 202", "/items/{id} GET 202", "/quiet other 200", httpmetrics.Unmatched + " GET 503",
	}
	if len(h.got) != len(want) {
		t.Fatalf("recorded %q, want %q", h.got, want)
	}
	for i := range want {
		if h.got[i] != want[i] {
			t.Errorf("recorded %q, want %q", h.got, want)
			break
		}
	}
}

type meter struct {
	noop.Meter
	h *recordingHistogram
}

func (m meter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return m.h, nil
}

// recordingHistogram keeps each record's route, method and code.
type recordingHistogram struct {
	embedded.Float64Histogram
	mu  sync.Mutex
	got []string
}

func (h *recordingHistogram) Record(_ context.Context, _ float64, opts ...metric.RecordOption) {
	attrs := metric.NewRecordConfig(opts).Attributes()
	route, _ := attrs.Value("route")
	method, _ := attrs.Value("method")
	code, _ := attrs.Value("code")
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, route.AsString()+" "+method.AsString()+" "+code.AsString())
}

func (h *recordingHistogram) Enabled(context.Context) bool { return true }
