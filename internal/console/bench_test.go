package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/fakeserver"
)

// BenchmarkPages measures the console's handler time in process, over
// the reference server with 1,000 namespaces, 10,000 clients (10 a
// namespace, one in ten nacking) and 10,000 history records in one
// namespace, and reports each page's p95 (docs/CONSOLE.md).
func BenchmarkPages(b *testing.B) {
	s, err := fakeserver.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	for i := range 1000 {
		if _, err := s.Publish(fmt.Sprintf("ns-%04d", i), map[string]any{"k": i, "s": "v"}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 10_000 {
		if _, err := s.Publish("ns-0000", map[string]any{"k": i}); err != nil {
			b.Fatal(err)
		}
	}
	tr := &http.Transport{}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	type ack struct {
		ClientID string `json:"client_id"`
		NS       string `json:"ns"`
		Revision int64  `json:"revision"`
		Status   string `json:"status"`
		Error    string `json:"error,omitempty"`
	}
	var batch []ack
	flush := func() {
		body, _ := json.Marshal(map[string]any{"client_id": "relay", "acks": batch})
		resp, err := hc.Post(s.URL()+"/sdk/ack", "application/json", strings.NewReader(string(body)))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			b.Fatalf("acks: %d", resp.StatusCode)
		}
		batch = batch[:0]
	}
	var rev int64
	for i := range 10_000 {
		ns := fmt.Sprintf("ns-%04d", i/10)
		if i%10 == 0 {
			st, _ := s.Status(ns)
			rev = st.Revision
		}
		a := ack{ClientID: fmt.Sprintf("client-%05d", i), NS: ns, Revision: rev, Status: "ack"}
		if i%10 == 0 {
			a.Status, a.Error = "nack", "k: must be below 100"
		}
		batch = append(batch, a)
		if len(batch) == 100 {
			flush()
		}
	}
	if n := len(s.Clients()); n != 10_000 {
		b.Fatalf("%d clients, want 10000", n)
	}
	con := s.Handler()
	// An open server: the first page starts the session.
	first := httptest.NewRecorder()
	con.ServeHTTP(first, httptest.NewRequest(http.MethodGet, "/console/namespaces", nil))
	cookie := first.Result().Cookies()[0]
	for _, page := range []string{"namespaces", "namespaces/ns-0000", "fleet", "fleet?page=50", "audit?ns=ns-0000", "rollouts"} {
		b.Run(strings.NewReplacer("/", "_", "?", "_", "=", "_").Replace(page), func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/console/"+page, nil)
				req.AddCookie(cookie)
				rec := httptest.NewRecorder()
				start := time.Now()
				con.ServeHTTP(rec, req)
				took = append(took, time.Since(start))
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d", page, rec.Code)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)*95/100].Microseconds())/1000, "p95-ms")
		})
	}
}
