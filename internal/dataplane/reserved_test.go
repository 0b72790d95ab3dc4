package dataplane

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// stagedFor is a valid value of rollout.Key for rollout id.
func stagedFor(t testing.TB, id string) json.RawMessage {
	t.Helper()
	v, err := rollout.Encode(&rollout.Staged{ID: id, Stage: 10, Cut: 1 << 60, Puts: map[string]json.RawMessage{"a": json.RawMessage(`"staged"`)}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The Holdfast-Capabilities of a client that evaluates rollouts, and of
// one that predates them.
const (
	newCaps = "stream,ack-batch,ack-stream,rollout"
	oldCaps = "stream,ack-batch,ack-stream"
)

func TestRolloutAwareReadsTheCapabilityToken(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{oldCaps}, false},
		{[]string{newCaps}, true},
		{[]string{"rollout"}, true},
		{[]string{" stream , rollout "}, true},
		{[]string{"stream", "rollout"}, true}, // the header given twice
		{[]string{"rollouts,x-rollout,rollout-v2,Rollout"}, false},
		{[]string{"stream,,"}, false},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		for _, v := range tc.values {
			r.Header.Add(transport.HeaderCapabilities, v)
		}
		if got := rolloutAware(r); got != tc.want {
			t.Errorf("%q: aware %v, want %v", tc.values, got, tc.want)
		}
	}
}

// A change that touches no reserved key is its own base view, at the cost
// of one scan of its keys; one that does has one base view for every old
// client, built once.
func TestBaseViewIsSharedAndFreeWithoutReservedKeys(t *testing.T) {
	be := newMemBackend()
	be.publish("app", map[string]any{"a": json.RawMessage(`1`)})
	be.publish("app", map[string]any{"a": json.RawMessage(`2`), rollout.Key: stagedFor(t, "r1")})
	sub, err := be.Subscribe("app", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, staged := sub.Backlog[0], sub.Backlog[1]
	if plain.view(false) != plain || plain.view(true) != plain {
		t.Fatal("a change without reserved keys has a view of its own")
	}
	if staged.view(true) != staged {
		t.Fatal("a new client's view is not the change itself")
	}
	base := staged.view(false)
	if base == staged || staged.view(false) != base {
		t.Fatal("the base view is not one, shared")
	}
	if string(base.json()) == string(staged.json()) || strings.Contains(string(base.frame()), rollout.ReservedPrefix) {
		t.Fatalf("base view %s", base.frame())
	}
	if base.CS.Revision != staged.CS.Revision || base.CS.PrevRevision != staged.CS.PrevRevision || base.Gen != staged.Gen {
		t.Fatalf("base view %+v of %+v", base.CS, staged.CS)
	}
}

// The SSE reader of stream frames must not be fooled by a multi-line
// frame: a base view's data line is one line, as the change's.
func TestBaseViewFrameIsOneDataLine(t *testing.T) {
	be := newMemBackend()
	be.publish("app", map[string]any{"a": json.RawMessage(`"x\ny"`), rollout.Key: stagedFor(t, "r1")})
	sub, err := be.Subscribe("app", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := sub.Backlog[0].view(false)
	sc := bufio.NewScanner(strings.NewReader(string(base.frame())))
	lines := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			lines++
			if sc.Text()[len("data: "):] != string(base.json()) {
				t.Fatalf("data line %q, JSON %s", sc.Text(), base.json())
			}
		}
	}
	if lines != 1 {
		t.Fatalf("%d data lines in %q", lines, base.frame())
	}
}

// Run with: go test -run '^$' -bench 'ChangeView|SnapshotFor' -benchmem ./internal/dataplane/
//
// What a client that predates rollouts costs: a change's bytes for it
// (its base view) against a new client's, and a 304 or a 200 of a
// namespace of 1,000 keys, with and without a reserved key.

func BenchmarkChangeView(b *testing.B) {
	be := newMemBackend()
	be.publish("app", map[string]any{"a": json.RawMessage(`1`)})
	be.publish("app", map[string]any{"a": json.RawMessage(`2`), rollout.Key: stagedFor(b, "r1")})
	sub, err := be.Subscribe("app", 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		c     *Change
		aware bool
	}{{"plain/aware", sub.Backlog[0], true}, {"plain/old", sub.Backlog[0], false}, {"reserved/aware", sub.Backlog[1], true}, {"reserved/old", sub.Backlog[1], false}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for range b.N {
				n += len(tc.c.view(tc.aware).frame())
			}
			_ = n
		})
	}
	// The first use by an old client of a change with a reserved key:
	// building its base view (once per change, for all of them).
	b.Run("build", func(b *testing.B) {
		c := sub.Backlog[1]
		b.ReportAllocs()
		for range b.N {
			fresh := &Change{Gen: c.Gen, CS: c.CS}
			_ = fresh.view(false).frame()
		}
	})
}

func BenchmarkSnapshotFor(b *testing.B) {
	be := newMemBackend()
	s := be.start(b)
	puts := make(map[string]any, 1000)
	for i := range 1000 {
		puts["cluster/c"+strconv.Itoa(i)] = json.RawMessage(`{"replicas":3,"image":"app:1.2.3"}`)
	}
	be.publish("plain", puts)
	puts[rollout.Key] = stagedFor(b, "r1")
	be.publish("staged", puts)
	h := s.mux
	w := &nopWriter{h: make(http.Header)}
	for _, ns := range []string{"plain", "staged"} {
		rev, _ := be.NsRevision(ns)
		for _, caps := range []string{newCaps, oldCaps} {
			for _, inm := range []string{wire.ETag(s.StoreID(), rev), ""} {
				name := ns + "/old"
				if caps == newCaps {
					name = ns + "/aware"
				}
				if inm != "" {
					name += "/304"
				} else {
					name += "/200"
				}
				b.Run(name, func(b *testing.B) {
					req := httptest.NewRequest(http.MethodGet, "/sdk/snapshot?ns="+ns, nil)
					req.Header.Set(transport.HeaderCapabilities, caps)
					if inm != "" {
						req.Header.Set("If-None-Match", inm)
					}
					b.ReportAllocs()
					for range b.N {
						clear(w.h)
						h.ServeHTTP(w, req)
					}
				})
			}
		}
	}
}
