package dataplane

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/transport"
)

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
