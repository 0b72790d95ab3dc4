package controlplane

import (
	"encoding/json"
	"errors"
	"strings"
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

// TestCheckText: an actor or reason up to its bound of UTF-8 passes; one
// byte more, invalid UTF-8 or any control character is ErrInvalid.
func TestCheckText(t *testing.T) {
	for _, ok := range []string{"", "alice", strings.Repeat("r", MaxReasonBytes), "café ☕", "rollback: see ticket #7"} {
		if err := CheckText("reason", ok, MaxReasonBytes); err != nil {
			t.Errorf("CheckText(%.20q) = %v", ok, err)
		}
	}
	for _, bad := range []string{strings.Repeat("r", MaxReasonBytes+1), "a\nb", "a\rb", "a\tb", "\x1b[31m", "a\x00", "a\u0085b", "\xff"} {
		if err := CheckText("reason", bad, MaxReasonBytes); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckText(%.20q) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := checkAudit(strings.Repeat("a", MaxActorBytes+1), ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("an actor over %d bytes: %v", MaxActorBytes, err)
	}
}
