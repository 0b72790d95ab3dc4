package config_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// The age of relayed data (docs/PROTOCOL.md, "Age of relayed data"): a
// client behind a relay cut off from its origin goes Stale and Breached as
// if it were cut off itself, by the ages the relay reports, without
// synchronised clocks.

func waitNSState(ctx context.Context, t *testing.T, ns *config.Namespace, want config.State) {
	t.Helper()
	if err := ns.WaitForState(ctx, want); err != nil {
		t.Fatalf("still %v, want %v: %v", ns.Status(), want, err)
	}
}

// near fails unless got is within [want-below, want+above].
func near(t *testing.T, what string, got, want time.Time, below, above time.Duration) {
	t.Helper()
	if d := got.Sub(want); d < -below || d > above {
		t.Errorf("%s %v off by %v; want within -%v..+%v", what, got.Format(time.StampMilli), d, below, above)
	}
}

// TestCutOffRelayGoesStaleThenBreached (1): a relay cut off from its origin
// at cutAt keeps sending progress, each saying how long ago its upstream
// last confirmed the data. The client goes Stale once cutAt is past its
// idle window although progress keeps arriving, and Breached past
// MaxStaleness; its LastConfirmed is cutAt.
func TestCutOffRelayGoesStaleThenBreached(t *testing.T) {
	cutAt := time.Now()
	ageNow := func() int64 { return time.Since(cutAt).Milliseconds() }
	var sent atomic.Int64
	src := &sdksuite.FuncSource{
		SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
			return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2,
				Values: rawObject(map[string]string{"k": "v"}), AgeMillis: ageNow()}, nil
		},
		WatchFunc: func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
			beat := time.NewTicker(20 * time.Millisecond) // the relay's heartbeat
			defer beat.Stop()
			for {
				p := &transport.Progress{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, AgeMillis: ageNow()}
				if err := handle(transport.Event{Progress: p}); err != nil {
					return err
				}
				sent.Add(1)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-beat.C:
				}
			}
		},
	}
	const idle, maxStale = 300 * time.Millisecond, 1200 * time.Millisecond
	c := sdksuite.NewClient(t, sdksuite.Source(src), config.WithStreamIdleTimeout(idle))
	ns := sdksuite.Open(t, c, "relayed", config.MaxStaleness(maxStale))
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()

	waitNSState(ctx, t, ns, config.StateStale)
	staleAt := time.Since(cutAt)
	if staleAt < idle || staleAt > idle+time.Second {
		t.Errorf("Stale %v after the relay was cut off; want once the idle window %v passed", staleAt, idle)
	}
	sentWhenStale := sent.Load()
	waitNSState(ctx, t, ns, config.StateBreached)
	if took := time.Since(cutAt); took < maxStale {
		t.Errorf("Breached %v after the relay was cut off; want past MaxStaleness %v", took, maxStale)
	}
	if sent.Load() <= sentWhenStale {
		t.Fatalf("no progress arrived while Stale (%d sent): the test proves nothing", sent.Load())
	}
	st := ns.Status()
	near(t, "LastConfirmed", st.LastConfirmed, cutAt, 5*time.Millisecond, 200*time.Millisecond)
	if st.Staleness < maxStale || st.LastError.Kind != config.ErrorNone || st.Unconfirmed {
		t.Errorf("status %v (last error %v, unconfirmed %v); want staleness past %v with no error", st, st.LastError, st.Unconfirmed, maxStale)
	}
	if got := ns.String("k", ""); got != "v" {
		t.Errorf("serves %q; the relayed data must keep serving", got)
	}
}

// TestFirstAnswerThroughACutOffRelay (2): a client that opens through a
// relay whose upstream is not confirming its data is Stale from the first
// answer, with the data's true age; one older than MaxStaleness opens
// Breached.
func TestFirstAnswerThroughACutOffRelay(t *testing.T) {
	for _, tc := range []struct {
		name        string
		age         time.Duration
		unconfirmed bool
		maxStale    time.Duration
		want        config.State
	}{
		{"unconfirmed and old", 90 * time.Second, true, 10 * time.Minute, config.StateStale},
		{"unconfirmed only", 0, true, 10 * time.Minute, config.StateStale},
		{"older than the idle window", 90 * time.Second, false, 10 * time.Minute, config.StateStale},
		{"older than MaxStaleness", 90 * time.Second, true, time.Minute, config.StateBreached},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &sdksuite.FuncSource{
				SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
					return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 7, Cursor: 9,
						Values: rawObject(map[string]string{"k": "v"}), AgeMillis: tc.age.Milliseconds(), Unconfirmed: tc.unconfirmed}, nil
				},
			}
			c := sdksuite.NewClient(t, sdksuite.Source(src), config.WithStreamIdleTimeout(relaxedIdle))
			opened := time.Now()
			ns := sdksuite.Open(t, c, "relayed", config.MaxStaleness(tc.maxStale))
			st := ns.Status()
			if st.State != tc.want || st.Unconfirmed != tc.unconfirmed {
				t.Fatalf("first answer: %v (unconfirmed %v); want %v, unconfirmed %v", st, st.Unconfirmed, tc.want, tc.unconfirmed)
			}
			if st.Staleness < tc.age || st.Staleness > tc.age+5*time.Second {
				t.Errorf("staleness %v; want the relay's age %v", st.Staleness, tc.age)
			}
			near(t, "LastConfirmed", st.LastConfirmed, opened.Add(-tc.age), 0, 5*time.Second)
		})
	}
}

// TestStreamProgressAgeReachesEveryNamespace (3, 4): over the one shared
// stream, the age and flag of a stream's progress reach every namespace
// of it; a later progress with neither makes them Fresh again.
func TestStreamProgressAgeReachesEveryNamespace(t *testing.T) {
	f := newFakeStream()
	names := []string{"a", "b"}
	for _, n := range names {
		f.publish(n, map[string]any{"k": n})
	}
	c := sdksuite.NewClient(t, sdksuite.Source(f), config.WithStreamIdleTimeout(relaxedIdle))
	nss := make([]*config.Namespace, len(names))
	for i, n := range names {
		nss[i] = sdksuite.Open(t, c, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	// Progress counts from the stream's open: wait for the one that
	// carries both.
	testutil.Eventually(t, waitLimit, func() bool {
		reqs := f.streamRequests()
		return len(reqs) > 0 && len(reqs[len(reqs)-1].Namespaces) == len(names)
	}, "a stream of both namespaces")
	for _, ns := range nss {
		waitNSState(ctx, t, ns, config.StateFresh)
	}

	for _, step := range []struct {
		age         time.Duration
		unconfirmed bool
		want        config.State
	}{
		{time.Minute, true, config.StateStale},  // cut off a minute ago
		{0, true, config.StateStale},            // the flag alone
		{time.Minute, false, config.StateStale}, // the age alone
		{0, false, config.StateFresh},           // (4) back in touch
	} {
		sent := time.Now()
		f.progressAged(step.age.Milliseconds(), step.unconfirmed)
		for _, ns := range nss {
			testutil.Eventually(t, waitLimit, func() bool {
				st := ns.Status()
				return st.LastConfirmed.After(sent.Add(-step.age-time.Millisecond)) && st.Unconfirmed == step.unconfirmed
			}, fmt.Sprintf("%s to take the progress %+v", ns.Name(), step))
			waitNSState(ctx, t, ns, step.want)
			if took := time.Since(sent); took > relaxedIdle/2 {
				// Not the report's doing: the idle window's.
				t.Errorf("%s: %v %v after the progress %+v; want at once", ns.Name(), step.want, took, step)
			}
			st := ns.Status()
			near(t, ns.Name()+" LastConfirmed", st.LastConfirmed, sent.Add(-step.age), 0, 2*time.Second)
		}
	}
	if len(f.streamRequests()) == 0 || f.count(f.watches, "a")+f.count(f.watches, "b") != 0 {
		t.Errorf("%d streams, %d single watches; want everything over the stream",
			len(f.streamRequests()), f.count(f.watches, "a")+f.count(f.watches, "b"))
	}
}

// TestReplayedBacklogIsDatedByTheProgressAfterIt: a relay cut off replays
// a change to a client that resumes through it; the change confirms
// "now", the progress right after it says how old the data really is, and
// the confirmation moves back.
func TestReplayedBacklogIsDatedByTheProgressAfterIt(t *testing.T) {
	const age = 30 * time.Second
	src := &sdksuite.FuncSource{
		SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
			return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 1, Cursor: 1,
				Values: rawObject(map[string]string{"k": "1"})}, nil
		},
		WatchFunc: func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
			if req.Since < 2 {
				cs := &transport.ChangeSet{Namespace: req.Namespace, StoreID: "s1", Revision: 2, PrevRevision: 1, Puts: rawValues(map[string]string{"k": "2"})}
				if err := handle(transport.Event{Change: cs}); err != nil {
					return err
				}
			}
			p := &transport.Progress{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 3, AgeMillis: age.Milliseconds(), Unconfirmed: true}
			if err := handle(transport.Event{Progress: p}); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		},
	}
	c := sdksuite.NewClient(t, sdksuite.Source(src), config.WithStreamIdleTimeout(relaxedIdle))
	start := time.Now()
	ns := sdksuite.Open(t, c, "relayed")
	nstest.WaitRevision(t, ns, 2, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Cursor == 3 }, "the progress after the change dates the data")
	st := ns.Status()
	near(t, "LastConfirmed", st.LastConfirmed, start.Add(-age), 0, 5*time.Second)
	if st.State != config.StateStale || !st.Unconfirmed || st.Staleness < age {
		t.Errorf("status %v (unconfirmed %v); want Stale, unconfirmed, staleness past %v", st, st.Unconfirmed, age)
	}
}

// TestLastGoodFileKeepsTheTrueAge: the last-good file records when the
// relay's upstream confirmed the data, not when the client heard of it, so
// that a client restarted with the network down knows the true age.
func TestLastGoodFileKeepsTheTrueAge(t *testing.T) {
	const age = 90 * time.Second
	dir := t.TempDir()
	src := &sdksuite.FuncSource{
		SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
			return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 4, Cursor: 4,
				Values: rawObject(map[string]string{"k": "v"}), AgeMillis: age.Milliseconds(), Unconfirmed: true}, nil
		},
	}
	c := sdksuite.NewClient(t, sdksuite.Source(src), config.WithCacheDir(dir), config.WithStreamIdleTimeout(relaxedIdle))
	opened := time.Now()
	sdksuite.Open(t, c, "relayed")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	rec, err := openCacheDir(t, dir).Load("relayed")
	if err != nil {
		t.Fatal(err)
	}
	near(t, "the file's ConfirmedAt", rec.ConfirmedAt, opened.Add(-age), 0, 5*time.Second)

	down := &sdksuite.FuncSource{SnapshotFunc: func(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) {
		return nil, errors.New("connection refused")
	}}
	c2 := sdksuite.NewClient(t, sdksuite.Source(down), config.WithCacheDir(dir))
	st := sdksuite.Open(t, c2, "relayed").Status()
	if st.Origin != config.OriginDisk || st.Staleness < age {
		t.Errorf("restarted: %v; want from disk, staleness past %v", st, age)
	}
	near(t, "restarted, LastConfirmed", st.LastConfirmed, rec.ConfirmedAt, 5*time.Millisecond, 5*time.Millisecond)
}

// TestRelayedAgeOverHTTP: the same through the HTTP source, against a
// handler that answers as a relay cut off from its origin 90 s ago does:
// the snapshot's age in its body, the flag in its headers only, then
// progress events whose ages grow.
func TestRelayedAgeOverHTTP(t *testing.T) {
	const age = 90 * time.Second
	cutAt := time.Now().Add(-age)
	var beats atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(transport.HeaderStoreID, "s1")
		w.Header().Set(transport.HeaderUnconfirmed, "true")
		switch r.URL.Path {
		case transport.PathSnapshot:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"ns":"relayed","store_id":"s1","revision":3,"cursor":5,"values":{"k":"v"},"age_ms":%d}`, time.Since(cutAt).Milliseconds())
		case transport.PathWatch:
			w.Header().Set("Content-Type", "text/event-stream")
			beat := time.NewTicker(20 * time.Millisecond)
			defer beat.Stop()
			for {
				fmt.Fprintf(w, "event: progress\nid: 5\ndata: {\"ns\":\"relayed\",\"store_id\":\"s1\",\"revision\":3,\"cursor\":5,\"age_ms\":%d,\"unconfirmed\":true}\n\n",
					time.Since(cutAt).Milliseconds())
				w.(http.Flusher).Flush()
				beats.Add(1)
				select {
				case <-r.Context().Done():
					return
				case <-beat.C:
				}
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := config.New(config.WithEndpoint(srv.URL), config.WithLogger(sdksuite.Logger(t)), config.WithWatchMode(transport.WatchSSE))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := sdksuite.Open(t, c, "relayed", config.MaxStaleness(2*time.Minute))
	st := ns.Status()
	if st.State != config.StateStale || !st.Unconfirmed {
		t.Errorf("first answer: %v (unconfirmed %v); want Stale, unconfirmed", st, st.Unconfirmed)
	}
	// The watch's progress keeps the relay's confirmation time.
	testutil.Eventually(t, waitLimit, func() bool { return beats.Load() >= 5 }, "a few heartbeats of the relay")
	st = ns.Status()
	near(t, "LastConfirmed", st.LastConfirmed, cutAt, 5*time.Millisecond, 500*time.Millisecond)
	if st.State != config.StateStale || !st.Unconfirmed || st.Staleness < age || st.LastError.Kind != config.ErrorNone {
		t.Errorf("watching: %v (unconfirmed %v); want Stale, unconfirmed, staleness past %v, no error", st, st.Unconfirmed, age)
	}
}
