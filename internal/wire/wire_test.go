package wire_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// The relay keeps a client's unknown members compact: an ack stream line
// is one line, whatever layout the client's body had.
func TestAckExtraIsCompact(t *testing.T) {
	extra := wire.AckExtra([]byte("{\"ns\":\"a\",\"stage\": 10,\n \"x\": {\"a\": [1,\n 2]}}"))
	if extra != `"stage":10,"x":{"a":[1,2]}` {
		t.Fatalf("AckExtra = %q", extra)
	}
	line, err := json.Marshal(wire.AckBatch{ClientID: "r", Acks: []transport.Ack{{ClientID: "c", Namespace: "a", Status: transport.AckApplied, Extra: extra}}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(string(line), "\n\r") {
		t.Fatalf("a line with a line break: %q", line)
	}
}

func TestAckExtra(t *testing.T) {
	for _, tc := range []struct {
		obj  string
		skip []string
		want string
	}{
		{`{"client_id":"c","ns":"a","revision":1,"status":"ack","error":"e","rollout":"r"}`, nil, ""},
		{`{"ns":"a","z":1,"a<b":"\u00e9","stage":10}`, nil, `"a\u003cb":"\u00e9","stage":10,"z":1`},
		{`{"ns":"a","stage":10,"x":true}`, []string{"x"}, `"stage":10`},
		{`not json`, nil, ""},
	} {
		if got := wire.AckExtra([]byte(tc.obj), tc.skip...); got != tc.want {
			t.Errorf("AckExtra(%s, %q) = %q, want %q", tc.obj, tc.skip, got, tc.want)
		}
	}
}

func TestTruncateAckError(t *testing.T) {
	long := strings.Repeat("x", transport.MaxAckErrorBytes-1) + "é" // é straddles the limit
	if got := wire.TruncateAckError(long); got != strings.Repeat("x", transport.MaxAckErrorBytes-1) {
		t.Errorf("TruncateAckError cut %d bytes, want %d (at a rune's start)", len(got), transport.MaxAckErrorBytes-1)
	}
	if got := wire.TruncateAckError("short"); got != "short" {
		t.Errorf("TruncateAckError(short) = %q", got)
	}
}

func TestAgeFromMillis(t *testing.T) {
	maxAgeMillis := int64(transport.MaxAge / time.Millisecond)
	for _, tc := range []struct {
		in   int64
		want time.Duration
	}{
		{0, 0}, {-5, 0}, {1500, 1500 * time.Millisecond},
		{maxAgeMillis, transport.MaxAge}, {maxAgeMillis + 1, transport.MaxAge}, {1<<63 - 1, transport.MaxAge}, {-1 << 63, 0},
	} {
		if got := wire.AgeFromMillis(tc.in); got != tc.want {
			t.Errorf("AgeFromMillis(%d) = %v; want %v", tc.in, got, tc.want)
		}
	}
}

func TestEncodeValues(t *testing.T) {
	in := map[string]json.RawMessage{
		"b": json.RawMessage(` {"x": [1, "y"]} `), "a": json.RawMessage(`1`),
		`q"uote`: json.RawMessage(`"\u00e9"`), "café": json.RawMessage(`null`),
	}
	obj, err := wire.EncodeValues(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(obj), `{"a":1,"b": {"x": [1, "y"]} ,`) {
		t.Errorf("EncodeValues = %s: want sorted keys and the texts as they are", obj)
	}
	var back map[string]json.RawMessage
	if err := json.Unmarshal(obj, &back); err != nil || len(back) != len(in) {
		t.Fatalf("EncodeValues = %s: decodes to %v, %v", obj, back, err)
	}
	for k, v := range in {
		if strings.TrimSpace(string(back[k])) != strings.TrimSpace(string(v)) {
			t.Errorf("key %q: %s, want %s", k, back[k], v)
		}
	}
	if obj, err := wire.EncodeValues(nil); err != nil || string(obj) != "{}" {
		t.Errorf("EncodeValues(nil) = %s, %v; want {}", obj, err)
	}
	// A text that is not one value must not be spliced in: it could add keys.
	for _, bad := range []string{`1,"admin":true`, ``, `{`, `1 2`} {
		_, err := wire.EncodeValues(map[string]json.RawMessage{"k": json.RawMessage(bad)})
		if !errors.Is(err, transport.ErrMalformed) || !strings.Contains(err.Error(), `"k"`) {
			t.Errorf("EncodeValues(%q) error = %v, want ErrMalformed naming the key", bad, err)
		}
	}
}

// The server's ETag is what the HTTP source sends back in If-None-Match.
func TestETagIsWhatTheClientSendsBack(t *testing.T) {
	inm := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inm <- r.Header.Get("If-None-Match")
		w.Header().Set(transport.HeaderStoreID, "store-1")
		w.WriteHeader(http.StatusNotModified)
	}))
	defer srv.Close()
	src, err := transport.NewHTTPSource(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_, err = src.Snapshot(context.Background(), transport.SnapshotRequest{Namespace: "a", KnownStoreID: "store-1", KnownRevision: 41})
	if !errors.Is(err, transport.ErrNotModified) {
		t.Fatalf("Snapshot = %v, want ErrNotModified", err)
	}
	if got, want := <-inm, wire.ETag("store-1", 41); got != want {
		t.Errorf("If-None-Match = %q, want wire.ETag = %q", got, want)
	}
}

// A report that fails the sender's own check is a bad request, sent to
// nobody: the queue drops it (with a warning) instead of retrying for ever.
func TestSendCohortRefusesABadReportAsABadRequest(t *testing.T) {
	s, err := transport.NewHTTPSource("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s2, err := transport.NewHTTPSource("http://127.0.0.1:2")
	if err != nil {
		t.Fatal(err)
	}
	f, err := transport.NewFailoverSource([]*transport.HTTPSource{s, s2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range []wire.CohortReport{
		{RelayID: "relay\n1", Epoch: "e"},
		{RelayID: "r", Epoch: ""},
		{RelayID: "r", Epoch: "e", Namespaces: []wire.CohortNamespace{{Namespace: "a", Outcomes: []wire.CohortOutcome{{Revision: 1, Status: "maybe", Runs: []int{0, 1}}}}}},
	} {
		for name, src := range map[string]wire.CohortAcker{"http": s, "failover": f} {
			if err := wire.SendCohort(context.Background(), src, &r); !errors.Is(err, transport.ErrBadRequest) {
				t.Errorf("%s: SendCohort(%+v) = %v, want ErrBadRequest", name, r, err)
			}
		}
	}
	if f.Endpoint() != "http://127.0.0.1:1" {
		t.Errorf("a bad report moved the failover to %s", f.Endpoint())
	}
}
