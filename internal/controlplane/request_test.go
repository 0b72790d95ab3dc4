package controlplane

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/transport"
)

// FuzzPublishBody feeds outside bytes to the publish body's decoding and
// checks: it must never panic, must refuse with a 400, and what it
// accepts must be valid keys, none reserved nor both put and deleted, and
// JSON values.
func FuzzPublishBody(f *testing.F) {
	for _, seed := range []string{
		`{"puts":{"a":1,"db/primary/host":"x"},"deletes":["b"]}`,
		`{}`, `{"puts":null}`, `{"puts":{"a":1},"deletes":["a"]}`, `{"puts":{"a b":1}}`,
		`{"puts":{"a":{"n":[1,2,{"x":null}]}}}`, `{"deletes":["a","a"]}`, `{"puts":{"a":1e400}}`,
		`[]`, `null`, `{"puts":{"a":"\ud800"}}`, "{\"puts\":{\"a\":\"\x00\"}}", `{"puts":{"":1}}`, `{} {}`,
		`{"puts":{"$holdfast/rollout":1}}`, `{"deletes":["$holdfast/x"],"abort_rollout":true}`, "{\"puts\":{\"a\":\"\xff\"}}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var body controlapi.PublishRequest
		err := decodeJSON(data, &body, false)
		if err == nil {
			err = checkChange(body.Puts, body.Deletes)
		}
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) || he.status != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		for k, v := range body.Puts {
			if transport.ValidateKey(k) != nil || rollout.Reserved(k) || !json.Valid(v) {
				t.Fatalf("accepted key %q value %q", k, v)
			}
		}
		for _, k := range body.Deletes {
			if _, ok := body.Puts[k]; ok || transport.ValidateKey(k) != nil || rollout.Reserved(k) {
				t.Fatalf("accepted delete %q", k)
			}
		}
	})
}
