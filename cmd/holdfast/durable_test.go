package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// startServerProc starts `holdfast server` as a process on a port kept
// for the test (the same port on restarts), with a short heartbeat and
// args.
func startServerProc(t testing.TB, bin string, args ...string) *relayProc {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.LoopbackPort(t))
	p := &relayProc{t: t, bin: bin, addr: addr, ready: "serving",
		args: append([]string{"server", "-addr", addr, "-heartbeat", "200ms", "-log-format", "json"}, args...)}
	p.start()
	t.Cleanup(p.kill)
	return p
}

// controlClient returns a client of the control API at base whose
// requests hc sends (nil: a client of its own, each request bounded by
// 10 s, whose connections close with the test).
func controlClient(tb testing.TB, base string, hc *http.Client) *controlapi.Client {
	tb.Helper()
	if hc == nil {
		tr := &http.Transport{}
		tb.Cleanup(tr.CloseIdleConnections)
		hc = &http.Client{Timeout: 10 * time.Second, Transport: tr}
	}
	c, err := controlapi.NewClient(base, controlapi.WithHTTPClient(hc))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// publishApp publishes v as the value of key through c, to namespace app.
func publishApp(c *controlapi.Client, key string, v int) (int64, error) {
	return c.Publish(context.Background(), "app", controlapi.PublishRequest{Puts: map[string]json.RawMessage{key: json.RawMessage(strconv.Itoa(v))}})
}

// answered is a publish the server answered 200.
type answered struct {
	rev   int64
	key   string
	value int
}

// TestServerKill9LosesNoAnsweredPublish: `holdfast server -data-dir`
// killed with SIGKILL in the middle of a burst of publishes from four
// writers, started again on the same directory: every publish it had
// answered 200 is in the store (values at its revision), the store id is
// the same, and its SDK clients resume with their cursors (no snapshot)
// and are current within 5 s of the restarted server listening.
func TestServerKill9LosesNoAnsweredPublish(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	srv := startServerProc(t, bin, "-data-dir", dir)
	cc := controlClient(t, srv.url(), nil)
	if _, err := publishApp(cc, "v", 0); err != nil {
		t.Fatalf("first publish: %v", err)
	}
	storeID := func() string {
		code, body, _ := get(t, srv.url()+"/statusz")
		var st struct {
			StoreID string `json:"store_id"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.StoreID == "" {
			t.Fatalf("/statusz: %d %s", code, body)
		}
		return st.StoreID
	}
	id := storeID()

	clients := 20 // HOLDFAST_KILL9_CLIENTS=1000 for a fleet's figure
	if n, err := strconv.Atoi(os.Getenv("HOLDFAST_KILL9_CLIENTS")); err == nil && n > 0 {
		clients = n
	}
	var nss []*config.Namespace
	var cts []*countingTransport
	logs := make([]*lockedBuffer, clients) // each client's log, shown if it fails
	for i := range clients {
		logs[i] = &lockedBuffer{}
		c, ct := fleetClient(t, []string{srv.url()}, config.WithLogger(slog.New(slog.NewTextHandler(logs[i], &slog.HandlerOptions{Level: slog.LevelDebug}))))
		nss = append(nss, openNS(t, c, "app"))
		cts = append(cts, ct)
	}

	var (
		mu   sync.Mutex
		done []answered
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("w%d", w)
			for i := 1; !stop.Load(); i++ {
				rev, err := publishApp(cc, key, i)
				if err != nil {
					continue // killed mid-request: not answered, so not owed
				}
				mu.Lock()
				done = append(done, answered{rev, key, i})
				mu.Unlock()
			}
		}()
	}
	testutil.Eventually(t, waitLimit, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) >= 100
	}, "100 answered publishes")
	srv.kill()
	stop.Store(true)
	wg.Wait()
	snapshots := make([]int64, clients)
	for i, ct := range cts {
		snapshots[i] = ct.snapshots.Load()
	}

	srv.start()
	listening := time.Now()
	if got := storeID(); got != id {
		t.Fatalf("store id %q after the restart, want %q", got, id)
	}
	for _, a := range done {
		v, err := cc.ValuesAt(context.Background(), "app", a.rev)
		if err != nil || string(v.Values[a.key]) != fmt.Sprint(a.value) {
			t.Fatalf("the answered publish %s=%d at revision %d: after kill -9, values are %+v, %v", a.key, a.value, a.rev, v, err)
		}
	}
	last, err := publishApp(cc, "v", 1)
	if err != nil {
		t.Fatalf("publish after the restart: %v", err)
	}
	for i, ns := range nss {
		for ns.Status().Revision < last {
			if time.Since(listening) > 5*time.Second {
				t.Fatalf("client %d at revision %d 5s after the restarted server listened, want %d (%+v)", i, ns.Status().Revision, last, ns.Status())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n := cts[i].snapshots.Load() - snapshots[i]; n != 0 {
			t.Errorf("client %d fetched %d snapshots after the restart, want 0 (a resume by cursor); its log:\n%s", i, n, logs[i].String())
		}
	}
	if t.Failed() {
		t.Logf("the server's log:\n%s", srv.logs.String())
	}
	t.Logf("%d publishes answered before kill -9, all present; %d clients current %v after the restart listened",
		len(done), clients, time.Since(listening).Round(time.Millisecond))
	if !strings.Contains(srv.logs.String(), `"kind":"embedded"`) {
		t.Errorf("the server's log does not say its store is embedded:\n%s", srv.logs.String())
	}
}
