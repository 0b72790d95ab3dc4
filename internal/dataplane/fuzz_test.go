package dataplane

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/transport"
)

// FuzzParsePublish feeds outside bytes to the publish decoder: it must
// never panic, must refuse with ErrInvalid, and what it accepts must be
// valid keys and compact JSON values that the store can commit.
func FuzzParsePublish(f *testing.F) {
	for _, seed := range []string{
		`{"puts":{"a":1,"db/primary/host":"x"},"deletes":["b"]}`,
		`{}`, `{"puts":null}`, `{"puts":{"a":1},"deletes":["a"]}`, `{"puts":{"a b":1}}`,
		`{"puts":{"a":{"n":[1,2,{"x":null}]}}}`, `{"deletes":["a","a"]}`, `{"puts":{"a":1e400}}`,
		`[]`, `null`, `{"puts":{"a":"\ud800"}}`, "{\"puts\":{\"a\":\"\x00\"}}", `{"puts":{"":1}}`, `{} {}`,
		`{"puts":{"$holdfast/rollout":1}}`, `{"deletes":["$holdfast/x"],"abort_rollout":true}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		puts, dels, _, err := parsePublish("ns", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for k, v := range puts {
			if transport.ValidateKey(k) != nil || rollout.Reserved(k) || !json.Valid(v) {
				t.Fatalf("accepted key %q value %q", k, v)
			}
		}
		for _, k := range dels {
			if _, ok := puts[k]; ok || transport.ValidateKey(k) != nil || rollout.Reserved(k) {
				t.Fatalf("accepted delete %q", k)
			}
		}
		st := newStore(0)
		c, err := st.publish("ns", puts, dels)
		if err != nil {
			t.Fatal(err)
		}
		var back transport.ChangeSet
		if err := json.Unmarshal(c.frame()[len("event: change\nid: 1\ndata: "):], &back); err != nil {
			t.Fatalf("frame does not decode: %v: %q", err, c.frame())
		}
	})
}

// FuzzParseAck feeds outside bytes to the ack decoder.
func FuzzParseAck(f *testing.F) {
	for _, seed := range []string{
		`{"client_id":"c1","ns":"app","revision":2,"status":"ack"}`,
		`{"client_id":"c1","ns":"app","revision":2,"status":"nack","error":"bad"}`,
		`{"client_id":"","ns":"app","revision":2,"status":"ack"}`, `{"client_id":"c","ns":"..","status":"ack"}`,
		`{"client_id":"c","ns":"a","revision":-1,"status":"ack"}`, `{"client_id":"c\u0000","ns":"a","status":"ack"}`,
		`{"revision":1e99}`, `nul`, `{"client_id":"c","ns":"a","status":"ack","x":[]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ack, err := parseAck(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if ack.ClientID == "" || ack.Revision < 0 || transport.ValidateNamespace(ack.Namespace) != nil ||
			(ack.Status != transport.AckApplied && ack.Status != transport.AckRejected) || len(ack.Error) > maxAckErrorLen {
			t.Fatalf("accepted %+v", ack)
		}
	})
}

func FuzzParseStreamNamespaces(f *testing.F) {
	for _, seed := range []string{
		"app:0", "app:12\x00b:3", "app", "app:", ":5", "a:b:3", "app:-1", "app:+1", "app:01",
		"app:9223372036854775807", "app:9223372036854775808", "a:1\x00a:2", "Bad Name:3", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, joined string) {
		values := strings.Split(joined, "\x00")
		if joined == "" {
			values = nil
		}
		reqs, err := parseStreamNamespaces(values)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if len(reqs) != len(values) || len(reqs) == 0 || len(reqs) > transport.MaxStreamNamespaces {
			t.Fatalf("%d namespaces from %d values", len(reqs), len(values))
		}
		seen := map[string]bool{}
		for i, r := range reqs {
			if seen[r.Name] || r.Since < 0 || values[i] != r.Name+":"+strconv.FormatInt(r.Since, 10) && !strings.HasPrefix(values[i], r.Name+":0") {
				t.Fatalf("value %q read as %+v", values[i], r)
			}
			seen[r.Name] = true
		}
		valid, ended := splitInvalid(reqs)
		if len(valid)+len(ended) != len(reqs) {
			t.Fatalf("split %d+%d of %d", len(valid), len(ended), len(reqs))
		}
		for _, r := range valid {
			if transport.ValidateNamespace(r.Name) != nil {
				t.Fatalf("invalid %q kept", r.Name)
			}
		}
	})
}
