package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// calls runs each data-plane call of the source against one server: the
// snapshot, an SSE watch and a long-poll watch.
func calls(t *testing.T, url string, opts ...HTTPOption) map[string]func() error {
	t.Helper()
	sse := newSource(t, url, opts...)
	lp := newSource(t, url, append([]HTTPOption{WithWatchMode(WatchLongPoll)}, opts...)...)
	watch := func(s *HTTPSource) error {
		return s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 7}, func(Event) error {
			t.Error("handle called")
			return nil
		})
	}
	return map[string]func() error{
		"snapshot": func() error {
			_, err := sse.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
			return err
		},
		"sse":       func() error { return watch(sse) },
		"long-poll": func() error { return watch(lp) },
	}
}

// A 404 is "no such namespace" only when a holdfast server says so: the
// reply names a store (the Holdfast-Store-Id header, or store_id in a
// not_found body). Any other 404 — a wrong base path on an ordinary web
// server, a framework's JSON 404, the reference server's unknown path — is
// ErrNotHoldfast, retried slowly.
func TestNotFoundOnlyFromHoldfast(t *testing.T) {
	leakCheck(t)
	cases := []struct {
		name   string
		header map[string]string
		body   string
		want   error
	}{
		{"plain text", nil, "404 page not found\n", ErrNotHoldfast},
		{"html", map[string]string{"Content-Type": "text/html"}, "<html><body><h1>Not Found</h1></body></html>", ErrNotHoldfast},
		{"empty", nil, "", ErrNotHoldfast},
		{"framework json", map[string]string{"Content-Type": "application/json"}, `{"timestamp":"2026-11-29T08:00:00Z","status":404,"error":"Not Found","path":"/sdk/snapshot"}`, ErrNotHoldfast},
		{"not_found naming no store", map[string]string{"Content-Type": "application/json"}, `{"error":"not_found","message":"no such endpoint: /wrong/sdk/snapshot"}`, ErrNotHoldfast},
		{"not_found with store_id", map[string]string{"Content-Type": "application/json"}, `{"error":"not_found","message":"unknown namespace","store_id":"store-1"}`, ErrNotFound},
		{"store header, no body", map[string]string{HeaderStoreID: "store-1"}, "", ErrNotFound},
		{"store header and body", map[string]string{HeaderStoreID: "store-1", "Content-Type": "application/json"}, `{"error":"not_found","store_id":"store-1"}`, ErrNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, tc.body)
			})
			for call, do := range calls(t, srv.URL) {
				err := do()
				var se *StatusError
				if !errors.Is(err, tc.want) || !errors.As(err, &se) || se.StatusCode != http.StatusNotFound {
					t.Errorf("%s: err = %v, want a *StatusError 404 that is %v", call, err, tc.want)
				}
				other := ErrNotFound
				if tc.want == ErrNotFound {
					other = ErrNotHoldfast
				}
				if errors.Is(err, other) {
					t.Errorf("%s: err = %v is both ErrNotFound and ErrNotHoldfast", call, err)
				}
				if !Retryable(err) {
					t.Errorf("%s: %v is not retryable", call, err)
				}
			}
		})
	}
}

// A 200 that is not the protocol's reply and carries no Holdfast-Store-Id
// header — an ordinary web server's page, a single-page app answering
// every path with its index — is ErrNotHoldfast, not a malformed message
// from a holdfast server.
func TestOKFromSomethingElseIsNotHoldfast(t *testing.T) {
	leakCheck(t)
	cases := []struct {
		name string
		ct   string
		body string
	}{
		{"html page", "text/html; charset=utf-8", "<!doctype html><html><head><title>My App</title></head><body></body></html>"},
		{"other json", "application/json", `{"status":"ok","version":"1.2.3"}`},
		{"json array", "application/json", `[1,2,3]`},
		{"empty", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.ct != "" {
					w.Header().Set("Content-Type", tc.ct)
				}
				_, _ = io.WriteString(w, tc.body)
			})
			for call, do := range calls(t, srv.URL) {
				err := do()
				if !errors.Is(err, ErrNotHoldfast) || errors.Is(err, ErrMalformed) {
					t.Errorf("%s: err = %v, want ErrNotHoldfast (and not ErrMalformed)", call, err)
				}
				if !Retryable(err) {
					t.Errorf("%s: %v is not retryable", call, err)
				}
			}
		})
	}
}

// What comes from a holdfast server — it names a store in the header or
// in the body — and does not decode stays ErrMalformed.
func TestBadReplyFromHoldfastIsMalformed(t *testing.T) {
	leakCheck(t)
	cases := []struct {
		name   string
		header string
		ct     string
		body   string
	}{
		{"header, html", "store-1", "text/html", "<html></html>"},
		{"header, truncated json", "store-1", "application/json", `{"ns":"payments.prod","store_id":"store-1",`},
		{"no header, body names a store", "", "application/json", `{"ns":"other","store_id":"store-1","revision":1,"cursor":1}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.header != "" {
					w.Header().Set(HeaderStoreID, tc.header)
				}
				w.Header().Set("Content-Type", tc.ct)
				_, _ = io.WriteString(w, tc.body)
			})
			for call, do := range calls(t, srv.URL) {
				if err := do(); !errors.Is(err, ErrMalformed) || errors.Is(err, ErrNotHoldfast) {
					t.Errorf("%s: err = %v, want ErrMalformed (and not ErrNotHoldfast)", call, err)
				}
			}
		})
	}
}

// A watch or long-poll from a cursor above the server's head gets 400
// cursor_ahead: a *StatusError that is ErrCursorAhead, not retryable (the
// caller resnapshots), and names the server's store, from the body or
// else the header, so that a new store can be told from history rewritten
// under the same id.
func TestCursorAhead(t *testing.T) {
	leakCheck(t)
	cases := []struct {
		name      string
		header    string
		body      string
		wantAhead bool
		wantStore string
	}{
		{"body and header", "store-2", `{"error":"cursor_ahead","message":"cursor 7 is above the store's head 3","store_id":"store-2"}`, true, "store-2"},
		{"header only", "store-3", `{"error":"cursor_ahead","message":"cursor 7 is above the store's head 3"}`, true, "store-3"},
		{"body only", "", `{"error":"cursor_ahead","store_id":"store-4"}`, true, "store-4"},
		{"bad request", "store-1", `{"error":"bad_request","message":"bad wait","store_id":"store-1"}`, false, "store-1"},
		{"plain 400", "", "bad request", false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.header != "" {
					w.Header().Set(HeaderStoreID, tc.header)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, tc.body)
			})
			for call, do := range calls(t, srv.URL) {
				if call == "snapshot" {
					continue
				}
				err := do()
				var se *StatusError
				if !errors.As(err, &se) || se.StatusCode != http.StatusBadRequest {
					t.Fatalf("%s: err = %v, want a *StatusError 400", call, err)
				}
				if errors.Is(err, ErrCursorAhead) != tc.wantAhead {
					t.Errorf("%s: errors.Is(%v, ErrCursorAhead) = %v, want %v", call, err, !tc.wantAhead, tc.wantAhead)
				}
				if se.StoreID != tc.wantStore {
					t.Errorf("%s: StoreID = %q, want %q", call, se.StoreID, tc.wantStore)
				}
				if Retryable(err) || errors.Is(err, ErrCompacted) {
					t.Errorf("%s: %v: retryable or compacted", call, err)
				}
			}
		})
	}
	if Retryable(ErrCursorAhead) {
		t.Error("Retryable(ErrCursorAhead) = true")
	}
	if !Retryable(ErrNotHoldfast) {
		t.Error("Retryable(ErrNotHoldfast) = false")
	}
}

// Every StatusError names the store of a holdfast server's error reply.
func TestStatusErrorStoreID(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderStoreID, "store-9")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":"unavailable"}`)
	})
	for call, do := range calls(t, srv.URL) {
		var se *StatusError
		if err := do(); !errors.As(err, &se) || se.StoreID != "store-9" || !strings.Contains(se.Error(), "503") {
			t.Errorf("%s: err = %#v, want a 503 naming store-9", call, err)
		}
	}
}
