package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/transporttest"
)

// restartable is a Server on a fixed loopback address over an embedded
// store, which a case can restart (same data dir, same address) or reset
// (a new data dir: a new store id).
type restartable struct {
	t    *testing.T
	addr string
	dir  string
	srv  *server.Server
	http *http.Server
	done chan error
}

func startRestartable(t *testing.T) *restartable {
	t.Helper()
	r := &restartable{t: t, addr: "127.0.0.1:0", dir: t.TempDir()}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *restartable) start() {
	t := r.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindEmbedded, DataDir: r.dir}, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	testutil.EventuallyNil(t, 10*time.Second, func() (err error) {
		l, err = net.Listen("tcp", r.addr) // the last run's address may be held a moment
		return err
	}, "listening on %s again", r.addr)
	// HTTP/1.1 and h2c on one listener, as the server's data plane
	// advertises (holdfast server's own listener does the same).
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	r.addr, r.srv, r.http, r.done = l.Addr().String(), s, &http.Server{Handler: s.Handler(), Protocols: &protocols}, make(chan error, 1)
	go func() { r.done <- r.http.Serve(l) }()
}

func (r *restartable) stop() {
	if r.srv == nil {
		return
	}
	_ = r.http.Close() // its streams end with their connections
	if err := <-r.done; !errors.Is(err, http.ErrServerClosed) {
		r.t.Error(err)
	}
	if err := r.srv.Close(); err != nil {
		r.t.Error(err)
	}
	r.srv = nil
}

func (r *restartable) url() string { return "http://" + r.addr }

// The HTTP source passes the transport conformance suite against holdfast
// server, as it does against the reference server: snapshots, watches,
// the multi-namespace stream, compaction, a restart (same store, same
// id) and a reset (a new store id). Revisions are etcd's, so the suite's
// cases do not assume consecutive ones.
func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) *transporttest.Store {
		r := startRestartable(t)
		src, err := transport.NewHTTPSource(r.url(), transport.WithIdleTimeout(5*time.Second), transport.WithLongPollWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = src.Close() })
		return &transporttest.Store{
			Source: src,
			Publish: func(t *testing.T, ns string, puts map[string]json.RawMessage, deletes []string) int64 {
				t.Helper()
				rev, err := controlClient(t, r.url()).Publish(t.Context(), ns, controlapi.PublishRequest{Puts: puts, Deletes: deletes})
				if err != nil {
					t.Fatalf("publish to %q: %v", ns, err)
				}
				return rev
			},
			Compact: func(t *testing.T, rev int64) {
				t.Helper()
				if _, err := controlClient(t, r.url()).Compact(t.Context(), rev); err != nil {
					t.Fatalf("compact to %d: %v", rev, err)
				}
			},
			Restart: func(*testing.T) { r.stop(); r.start() },
			Reset: func(t *testing.T) {
				r.stop()
				r.dir = t.TempDir()
				r.start()
			},
			RequireStream:  true,
			PromptProgress: true,
		}
	})
}
