package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// The source states its protocol version on every request, and records
// what a holdfast server's replies advertise: the version, the
// capabilities (well-formed tokens only, sorted) and the heartbeat, from
// which it derives its idle timeout when the user set none. A reply that
// names no store (not a holdfast server's) changes nothing; a version-0
// server's reply (a store, no version) brings the default back.
func TestServerInfoRecorded(t *testing.T) {
	leakCheck(t)
	var v0 atomic.Bool
	var gotProto atomic.Value
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		gotProto.Store(r.Header.Get(HeaderProtocol))
		if r.URL.Query().Get("ns") == "proxy" {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set(HeaderStoreID, "s1")
		if !v0.Load() {
			w.Header().Set(HeaderProtocol, "1")
			w.Header().Add(HeaderCapabilities, "watch-multi, Bad Token,relay")
			w.Header().Add(HeaderCapabilities, "watch-multi")
			w.Header().Set(HeaderHeartbeat, "200")
		}
		writeJSON(t, w, http.StatusOK, testSnapshot())
	})
	s := newSource(t, srv.URL)
	if i := s.ServerInfo(); !i.Seen.IsZero() || s.IdleTimeout() != DefaultIdleTimeout {
		t.Fatalf("before any reply: %+v, idle %v", i, s.IdleTimeout())
	}
	snap := func(ns string) {
		t.Helper()
		_, _ = s.Snapshot(context.Background(), SnapshotRequest{Namespace: ns})
	}
	snap(testNS)
	if p, _ := gotProto.Load().(string); p != "1" {
		t.Errorf("request %s = %q, want 1", HeaderProtocol, p)
	}
	i := s.ServerInfo()
	if i.Protocol != 1 || !slices.Equal(i.Capabilities, []string{"relay", "watch-multi"}) || i.Heartbeat != 200*time.Millisecond || i.Seen.IsZero() {
		t.Fatalf("ServerInfo = %+v", i)
	}
	if !i.HasCapability("relay") || i.HasCapability("Bad Token") || i.HasCapability("other") {
		t.Errorf("HasCapability wrong for %v", i.Capabilities)
	}
	if d := s.IdleTimeout(); d != 600*time.Millisecond {
		t.Errorf("IdleTimeout = %v, want three 200ms heartbeats", d)
	}
	if q := s.QuietLimit(); q != 600*time.Millisecond {
		t.Errorf("QuietLimit = %v, want the derived idle timeout", q)
	}
	snap("proxy")
	if s.ServerInfo().Protocol != 1 || s.IdleTimeout() != 600*time.Millisecond {
		t.Errorf("a reply naming no store changed ServerInfo to %+v", s.ServerInfo())
	}
	v0.Store(true)
	snap(testNS)
	if i := s.ServerInfo(); i.Protocol != 0 || i.Capabilities != nil || i.Heartbeat != 0 || s.IdleTimeout() != DefaultIdleTimeout {
		t.Errorf("after a version-0 reply: %+v, idle %v; want protocol 0 and the default idle timeout", i, s.IdleTimeout())
	}

	// An explicit idle timeout is never overridden.
	v0.Store(false)
	e := newSource(t, srv.URL, WithIdleTimeout(time.Minute))
	_, _ = e.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	if e.ServerInfo().Heartbeat != 200*time.Millisecond || e.IdleTimeout() != time.Minute {
		t.Errorf("explicit idle timeout: %v (server info %+v), want 1m", e.IdleTimeout(), e.ServerInfo())
	}
}

func TestDerivedIdleTimeoutBounds(t *testing.T) {
	for hb, want := range map[time.Duration]time.Duration{
		0:                      DefaultIdleTimeout,
		time.Millisecond:       MinDerivedIdleTimeout,
		5 * time.Second:        15 * time.Second,
		10 * time.Minute:       MaxDerivedIdleTimeout,
		200 * time.Millisecond: 600 * time.Millisecond,
	} {
		if got := derivedIdleTimeout(hb, DefaultIdleTimeout); got != want {
			t.Errorf("derivedIdleTimeout(%v) = %v, want %v", hb, got, want)
		}
	}
}

// The two meanings of 400 are apart: a cursor above the head is 409 (from
// a server of version 1) or 400 cursor_ahead (version 0), both
// ErrCursorAhead and not retryable; a malformed request from a server of
// version 1 is 400 bad_request, ErrBadRequest, retried from the cursor;
// a 400 bad_request from a server of version 0 keeps its old reading
// (not retryable: the caller resnapshots).
func TestStatusCodesOfProtocolVersions(t *testing.T) {
	leakCheck(t)
	cases := []struct {
		name                 string
		proto                string
		status               int
		body                 string
		ahead, bad, retrying bool
	}{
		{"v1 cursor ahead", "1", http.StatusConflict, `{"error":"cursor_ahead","store_id":"s"}`, true, false, false},
		{"v1 cursor ahead, body cut", "1", http.StatusConflict, ``, true, false, false},
		{"v1 bad request", "1", http.StatusBadRequest, `{"error":"bad_request","store_id":"s"}`, false, true, true},
		{"v0 cursor ahead", "", http.StatusBadRequest, `{"error":"cursor_ahead","store_id":"s"}`, true, false, false},
		{"v0 bad request", "", http.StatusBadRequest, `{"error":"bad_request","store_id":"s"}`, false, false, false},
		{"v1 other conflict", "1", http.StatusConflict, `{"error":"something_else","store_id":"s"}`, false, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(HeaderStoreID, "s")
				if tc.proto != "" {
					w.Header().Set(HeaderProtocol, tc.proto)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			for call, do := range calls(t, srv.URL) {
				if call == "snapshot" {
					continue
				}
				err := do()
				var se *StatusError
				if !errors.As(err, &se) || se.StatusCode != tc.status {
					t.Fatalf("%s: err = %v, want a *StatusError %d", call, err, tc.status)
				}
				if errors.Is(err, ErrCursorAhead) != tc.ahead || errors.Is(err, ErrBadRequest) != tc.bad || Retryable(err) != tc.retrying {
					t.Errorf("%s: %v: cursor ahead %v, bad request %v, retryable %v; want %v, %v, %v", call, err,
						errors.Is(err, ErrCursorAhead), errors.Is(err, ErrBadRequest), Retryable(err), tc.ahead, tc.bad, tc.retrying)
				}
			}
		})
	}
}

// A client declares stream and ack-batch, neither of which adds an event
// to the single-namespace watch, so a conforming server sends it only
// change and progress events there: an unknown event name is the server's
// mistake, and the stream ends with ErrMalformed (resumed from the
// cursor), never skipped, since a skipped event may have carried state.
func TestUnknownEventIsRefused(t *testing.T) {
	leakCheck(t)
	var caps atomic.Value
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		caps.Store(r.Header.Values(HeaderCapabilities))
		c := openSSE(t, w)
		c.send(EventProgress, 11, progress(11, 11))
		c.send("reset", 12, progress(11, 12))
		<-r.Context().Done()
	})
	s := newSource(t, srv.URL)
	n := 0
	err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, func(Event) error { n++; return nil })
	if !errors.Is(err, ErrMalformed) || n != 1 {
		t.Errorf("Watch = %v after %d events; want ErrMalformed after 1", err, n)
	}
	if v, _ := caps.Load().([]string); !slices.Equal(v, []string{"stream,ack-batch,ack-stream,rollout"}) {
		t.Errorf("the client declared capabilities %q; want [\"stream,ack-batch,ack-stream,rollout\"]", v)
	}
}

func TestParseServerInfoHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"200", 200 * time.Millisecond},
		{" 5000 ", 5 * time.Second},
		{"3600000", time.Hour},
		{"7200000", time.Hour}, // clamped, like the derived timeout, not ignored
		{"99999999999999999", time.Hour},
		{"0", 0},
		{"-5", 0},
		{"5s", 0},
		{"", 0},
	} {
		h := http.Header{}
		h.Set(HeaderStoreID, "s1")
		h.Set(HeaderHeartbeat, tc.header)
		info, ok := parseServerInfo(h, time.Now())
		if !ok || info.Heartbeat != tc.want {
			t.Errorf("Heartbeat %q: got %v (ok %v), want %v", tc.header, info.Heartbeat, ok, tc.want)
		}
	}
}
