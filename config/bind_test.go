package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
)

type dbConfig struct {
	Host    string   `json:"host"`
	Port    int      `json:"port"`
	Replica []string `json:"replicas"`
}

func TestBind(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "db", map[string]any{"primary": map[string]any{"host": "a", "port": 5432, "replicas": []string{"r1"}}})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "db")

	b := config.Bind(ns, "primary", dbConfig{Host: "localhost"})
	defer b.Stop()
	if got := b.Get(); got.Host != "a" || got.Port != 5432 || len(got.Replica) != 1 {
		t.Fatalf("bound %+v", got)
	}
	rev := sdksuite.Publish(t, srv, "db", map[string]any{"primary": map[string]any{"host": "b", "port": 6432}})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool { return b.Get().Host == "b" }, "the rebind")

	// A value that does not decode keeps the last one, and is counted.
	rev = sdksuite.Publish(t, srv, "db", map[string]any{"primary": "not an object"})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool { return b.Errors() == 1 }, "the decode error")
	if b.Get().Host != "b" || b.Err() == nil {
		t.Errorf("after a bad value: %+v, %v", b.Get(), b.Err())
	}
	// A deleted key binds the default.
	rev = sdksuite.Publish(t, srv, "db", nil, "primary")
	nstest.WaitRevision(t, ns, rev, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool { return b.Get().Host == "localhost" }, "the default")
}

func TestWaitForState(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "ws", map[string]any{"v": 1})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "ws")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := ns.WaitForState(ctx, config.StateFresh); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := ns.WaitForState(ctx, config.StateStale, config.StateBreached); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if err := ns.WaitForState(short, config.StateFailedClosed); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitForState of a state never reached = %v", err)
	}
	_ = c.Close()
	if err := ns.WaitForState(ctx, config.StateFresh); !errors.Is(err, config.ErrClosed) {
		t.Errorf("WaitForState after Close = %v", err)
	}
	if err := ns.WaitForState(ctx, config.StateClosed); err != nil {
		t.Errorf("WaitForState(Closed) after Close = %v", err)
	}
}

type timeouts struct {
	Read  time.Duration `json:"read"`
	Inner struct {
		Retry []time.Duration          `json:"retry"`
		ByOp  map[string]time.Duration `json:"by_op"`
		Ptr   *time.Duration           `json:"ptr"`
	} `json:"inner"`
	Embedded
	Count int `json:"count"`
}

type Embedded struct {
	Idle time.Duration // untagged: matched by name, without regard to case
}

// TestBindDurations: a time.Duration at any depth decodes from the strings
// the Duration getter reads, and from numbers of nanoseconds as before.
func TestBindDurations(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "d", map[string]any{
		"top": "250ms",
		"num": 1500,
		"all": map[string]any{
			"read":  "1m30s",
			"inner": map[string]any{"retry": []any{"10ms", 20}, "by_op": map[string]any{"get": "2s"}, "ptr": "3h"},
			"idle":  "5s",
			"count": 3,
		},
	})

	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "d")

	top := config.Bind(ns, "top", time.Duration(0))
	defer top.Stop()
	if got := top.Get(); got != 250*time.Millisecond || top.Err() != nil {
		t.Errorf("top = %v, %v; the Duration getter reads %v", got, top.Err(), ns.Duration("top", 0))
	}
	num := config.Bind(ns, "num", time.Duration(0))
	defer num.Stop()
	if got := num.Get(); got != 1500 || num.Err() != nil {
		t.Errorf("num = %v, %v", got, num.Err())
	}
	all := config.Bind(ns, "all", timeouts{})
	defer all.Stop()
	got := all.Get()
	if all.Err() != nil || got.Read != 90*time.Second || got.Idle != 5*time.Second || got.Count != 3 ||
		len(got.Inner.Retry) != 2 || got.Inner.Retry[0] != 10*time.Millisecond || got.Inner.Retry[1] != 20 ||
		got.Inner.ByOp["get"] != 2*time.Second || got.Inner.Ptr == nil || *got.Inner.Ptr != 3*time.Hour {
		t.Errorf("all = %+v, %v", got, all.Err())
	}

	// A string that is no duration still fails, as json.Unmarshal would.
	rev := sdksuite.Publish(t, srv, "d", map[string]any{"top": "soon"})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool { return top.Err() != nil }, "the decode error")
	if top.Get() != 250*time.Millisecond {
		t.Errorf("after a bad value: %v", top.Get())
	}
}

// TestBindErrorClearsAndShowsInStatus: Err clears once a good value
// replaces a bad one, and the failure shows in Status as ErrorBind, marked
// past once a good value is bound.
func TestBindErrorClearsAndShowsInStatus(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "b", map[string]any{"port": 1})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "b")
	b := config.Bind(ns, "port", 0)
	defer b.Stop()

	rev := sdksuite.Publish(t, srv, "b", map[string]any{"port": "eighty"})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool { return b.Err() != nil }, "the decode error")
	st := ns.Status()
	if st.LastError.Kind != config.ErrorBind || st.LastError.Recovered || !errors.Is(st.LastError.Err, b.Err()) {
		t.Errorf("LastError after a bad value = %#v", st.LastError)
	}

	rev = sdksuite.Publish(t, srv, "b", map[string]any{"port": 80})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool { return b.Get() == 80 }, "the good value")
	if err := b.Err(); err != nil {
		t.Errorf("Err after a good value = %v", err)
	}
	if b.Errors() != 1 {
		t.Errorf("Errors = %d, want 1", b.Errors())
	}
	if le := ns.Status().LastError; le.Kind != config.ErrorBind || !le.Recovered {
		t.Errorf("LastError after the good value = %+v; want ErrorBind, recovered", le)
	}
}

// A time.Duration field tagged ",string" holds its nanoseconds as a JSON
// string: Bind still reads what json.Unmarshal reads ("0", "250000000"),
// and duration strings too, as everywhere else.
func TestBindDurationStringTag(t *testing.T) {
	type tagged struct {
		D time.Duration `json:"d,string"`
	}
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "st", map[string]any{
		"zero":  map[string]any{"d": "0"},
		"nanos": map[string]any{"d": "250000000"},
		"text":  map[string]any{"d": "250ms"},
	})

	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "st")
	for key, want := range map[string]time.Duration{"zero": 0, "nanos": 250 * time.Millisecond, "text": 250 * time.Millisecond} {
		b := config.Bind(ns, key, tagged{D: -1})
		if got := b.Get(); got.D != want || b.Err() != nil {
			t.Errorf("%s: %v, %v; want %v", key, got.D, b.Err(), want)
		}
		b.Stop()
	}
}

// Embedded structs, for TestBindDurationsFollowEncodingJSONFieldRules.
type (
	deepName        struct{ Timeout string }
	viaDeep         struct{ deepName }
	shallowDuration struct{ Timeout time.Duration }
	taggedName      struct {
		Timeout string `json:"Timeout"`
	}
	otherDuration struct{ Timeout time.Duration }
)

// TestBindDurationsFollowEncodingJSONFieldRules: which field a JSON key
// fills is encoding/json's choice, duration strings or not: the shallower
// of two embedded fields wins, a tagged one wins at the same depth, two
// untagged at the same depth are both ignored, and names match without
// regard to case.
func TestBindDurationsFollowEncodingJSONFieldRules(t *testing.T) {
	type shallowWins struct {
		viaDeep         // Timeout (a string) at depth 2
		shallowDuration // Timeout (a time.Duration) at depth 1: this one
	}
	type taggedWins struct {
		shallowDuration // Timeout, untagged
		taggedName      // Timeout, tagged, at the same depth: this one
	}
	type ambiguous struct {
		shallowDuration
		otherDuration // Timeout twice, untagged, at the same depth: neither
		Other         time.Duration
	}
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "emb", map[string]any{
		"timeout": map[string]any{"Timeout": "250ms", "Other": "1s"},
		"folded":  map[string]any{"timeout": "250ms", "OTHER": "1s"},
	})

	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "emb")

	check := func(name string, got, want any, err, jsonErr error) {
		t.Helper()
		if err != nil || jsonErr != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Bind %+v (%v), want %+v as encoding/json decides (%v)", name, got, err, want, jsonErr)
		}
	}
	// What encoding/json decodes once the strings are nanoseconds.
	nanos := []byte(`{"Timeout":250000000,"Other":1000000000}`)
	var wantShallow shallowWins
	jsonErr := json.Unmarshal(nanos, &wantShallow)
	sw := config.Bind(ns, "timeout", shallowWins{})
	defer sw.Stop()
	check("shallower wins", sw.Get(), wantShallow, sw.Err(), jsonErr)
	if wantShallow.shallowDuration.Timeout != 250*time.Millisecond || wantShallow.viaDeep.Timeout != "" {
		t.Errorf("encoding/json decoded %+v, want the shallower field set", wantShallow)
	}

	var wantTagged taggedWins
	jsonErr = json.Unmarshal([]byte(`{"Timeout":"250ms"}`), &wantTagged)
	tw := config.Bind(ns, "timeout", taggedWins{})
	defer tw.Stop()
	check("tagged wins", tw.Get(), wantTagged, tw.Err(), jsonErr)
	if wantTagged.taggedName.Timeout != "250ms" {
		t.Errorf("encoding/json decoded %+v, want the tagged field set", wantTagged)
	}

	var wantAmbiguous ambiguous
	jsonErr = json.Unmarshal(nanos, &wantAmbiguous)
	for _, key := range []string{"timeout", "folded"} {
		am := config.Bind(ns, key, ambiguous{})
		check("ambiguous ("+key+")", am.Get(), wantAmbiguous, am.Err(), jsonErr)
		am.Stop()
	}
	if wantAmbiguous.Other != time.Second || wantAmbiguous.shallowDuration.Timeout != 0 || wantAmbiguous.otherDuration.Timeout != 0 {
		t.Errorf("encoding/json decoded %+v, want Other alone", wantAmbiguous)
	}
}
