package store_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/server/store"
)

// TestMain closes the shared store after the tests, then checks that no
// goroutine outlives them.
func TestMain(m *testing.M) {
	code := m.Run()
	closeShared()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func open(t *testing.T, dir string) (*store.Store, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return store.Open(ctx, store.Config{Kind: store.KindEmbedded, DataDir: dir, StartTimeout: 20 * time.Second})
}

// TestEmbeddedStoreKeepsItsID: the store id is created once and read back
// at every start.
func TestEmbeddedStoreKeepsItsID(t *testing.T) {
	dir := t.TempDir()
	st, err := open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	id := st.ID
	if len(id) != 32 || st.Kind != store.KindEmbedded || len(st.Endpoints) != 1 || !strings.HasPrefix(st.Endpoints[0], "http://127.0.0.1:") {
		t.Fatalf("store %+v", st)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	st, err = open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.ID != id {
		t.Fatalf("store id %q after a restart, want %q", st.ID, id)
	}
}

// TestBadDataDirs: a directory held by another store, of a newer layout,
// of an unknown one, or with a damaged etcd database is refused at start
// with a clear error, and nothing is started.
func TestBadDataDirs(t *testing.T) {
	held := t.TempDir()
	st, err := open(t, held)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	newer := t.TempDir()
	if err := os.WriteFile(filepath.Join(newer, "holdfast-format"), []byte("99\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := t.TempDir()
	if err := os.WriteFile(filepath.Join(garbage, "holdfast-format"), []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	foreign := t.TempDir()
	if err := os.MkdirAll(filepath.Join(foreign, "etcd"), 0o700); err != nil {
		t.Fatal(err)
	}
	damaged := t.TempDir()
	if st, err := open(t, damaged); err != nil {
		t.Fatal(err)
	} else if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(damaged, "etcd", "member", "snap", "db")
	if err := os.WriteFile(db, []byte("not a bolt database"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, want string
		is              error
	}{
		{"held by another", held, "is locked by another holdfast server (pid", store.ErrLocked},
		{"newer layout", newer, "is of format 99, newer than this server's 1", nil},
		{"unknown layout", garbage, "not a format version", nil},
		{"etcd without the layout file", foreign, "not a holdfast data directory", nil},
		{"damaged database", damaged, "cannot be opened (damaged?)", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := open(t, tc.dir)
			if err == nil {
				st.Close()
				t.Fatalf("opened %s", tc.dir)
			}
			if !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
		})
	}
}

// TestEmbeddedStoreLogsNoRequestStats: the embedded etcd does not log a
// WARN "request stats" line for every request it serves (embed.NewConfig
// leaves the slow-request threshold at zero; etcd's command sets it).
func TestEmbeddedStoreLogsNoRequestStats(t *testing.T) {
	var logs lockedLog
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Kind: store.KindEmbedded, DataDir: t.TempDir(), StartTimeout: 20 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 20 {
		if _, err := st.Client.Put(ctx, fmt.Sprintf("/k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Client.Get(ctx, "/k", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "request stats"); n > 2 {
		t.Fatalf("%d request-stats lines for 40 requests:\n%.2000s", n, logs.String())
	}
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEmbeddedStoreStartAndStopLogNoWarnings: a clean start and stop of
// the embedded member (a data directory, and the memory store) log no
// WARN or ERROR: its start notices (one port, simple tokens) and its
// listeners' closed errors at stop are demoted to Debug, where they
// still are.
func TestEmbeddedStoreStartAndStopLogNoWarnings(t *testing.T) {
	for _, kind := range []string{store.KindEmbedded, store.KindMemory} {
		t.Run(kind, func(t *testing.T) {
			var logs, debug lockedLog
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := store.Config{Kind: kind, StartTimeout: 20 * time.Second,
				Logger: slog.New(multiHandler{
					slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}),
					slog.NewTextHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug}),
				})}
			if kind == store.KindEmbedded {
				cfg.DataDir = t.TempDir()
			}
			st, err := store.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Client.Put(ctx, "/k", "v"); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if logs.String() != "" {
				t.Errorf("WARN or ERROR lines at a clean start and stop:\n%s", logs.String())
			}
			if !strings.Contains(debug.String(), "simple token is not cryptographically signed") {
				t.Errorf("the demoted start notice is not at Debug:\n%.3000s", debug.String())
			}
		})
	}
}

// multiHandler sends each record to every handler that takes its level.
type multiHandler []slog.Handler

func (m multiHandler) Enabled(ctx context.Context, l slog.Level) bool {
	for _, h := range m {
		if h.Enabled(ctx, l) {
			return true
		}
	}
	return false
}

func (m multiHandler) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range m {
		if h.Enabled(ctx, r.Level) {
			if err := h.Handle(ctx, r.Clone()); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m multiHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make(multiHandler, len(m))
	for i, h := range m {
		out[i] = h.WithAttrs(attrs)
	}
	return out
}

func (m multiHandler) WithGroup(name string) slog.Handler {
	out := make(multiHandler, len(m))
	for i, h := range m {
		out[i] = h.WithGroup(name)
	}
	return out
}
