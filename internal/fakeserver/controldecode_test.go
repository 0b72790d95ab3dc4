package fakeserver

import (
	"encoding/json"
	"errors"
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
		if err := json.Unmarshal(c.Frame()[len("event: change\nid: 1\ndata: "):], &back); err != nil {
			t.Fatalf("frame does not decode: %v: %q", err, c.Frame())
		}
	})
}
