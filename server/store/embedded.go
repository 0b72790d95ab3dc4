package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// formatVersion is the layout of a data directory this server writes and
// reads; a directory of a later one is refused, not misread.
const formatVersion = 1

// embeddedCatchUpEntries is the raft log entries the embedded member
// keeps in memory past its last snapshot (etcd takes one every 100 entries
// applied): its raft log holds at most RaftLogEntries entries, each one
// request of at most etcd's MaxRequestBytes (1.5 MiB).
const (
	embeddedCatchUpEntries = 8
	RaftLogEntries         = 100 + embeddedCatchUpEntries
)

// The files of a data directory beside etcd's own (member/).
const (
	lockFile   = "holdfast.lock"
	formatFile = "holdfast-format"
	etcdSubdir = "etcd"
)

func (s *Store) openEmbedded(ctx context.Context, cfg Config, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("store: data directory: %w", err)
	}
	s.DataDir = dir
	lock, err := lockDir(dir)
	if err != nil {
		return err
	}
	s.lock = lock
	if err := checkFormat(dir); err != nil {
		return err
	}
	if err := checkDB(filepath.Join(dir, etcdSubdir, "member", "snap", "db")); err != nil {
		return err
	}
	if err := checkFree(dir, cfg.Logger); err != nil {
		return err
	}
	loopback, _ := url.Parse("http://127.0.0.1:0")
	ec := embed.NewConfig()
	ec.Name = "holdfast"
	ec.Dir = filepath.Join(dir, etcdSubdir)
	ec.ListenClientUrls = []url.URL{*loopback}
	ec.AdvertiseClientUrls = []url.URL{*loopback}
	ec.ListenPeerUrls = []url.URL{*loopback}
	ec.AdvertisePeerUrls = []url.URL{*loopback}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	s.fatal = &fatalHook{log: cfg.Logger, dir: dir, release: make(chan struct{})}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(newSlogCore(cfg.Logger.With("component", "etcd"), &s.closing), zap.WithFatalHook(s.fatal)))
	ec.ListenMetricsUrls = nil
	// etcd's own command sets these defaults through its flags; NewConfig
	// leaves them zero, and a zero unary-request threshold logs every
	// request (a WARN "request stats" line each).
	ec.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	ec.AutoCompactionMode, ec.AutoCompactionRetention, _ = compaction(cfg.Retention)
	// A publish is one transaction: etcd's defaults (128 operations, 1.5
	// MiB) would hold about 125 keys of it.
	ec.MaxTxnOps, ec.MaxRequestBytes = EmbeddedMaxTxnOps, EmbeddedMaxRequestBytes
	// etcd keeps the raft log's entries in memory since its last
	// snapshot (one every 100 entries) plus SnapshotCatchUpEntries (5,000
	// by default) for slow followers; the embedded member has none, and
	// each entry is a whole publish, up to MaxRequestBytes: 5,000 of 600
	// KB held 3 GB. A few cover a member restarting, and bound the log
	// by raftLogEntries entries of at most MaxRequestBytes each.
	ec.SnapshotCatchUpEntries = embeddedCatchUpEntries
	ec.ExperimentalSnapshotCatchUpEntries = embeddedCatchUpEntries
	member, err := startEtcd(ec)
	if err != nil {
		return fmt.Errorf("store: the embedded etcd in %s did not start: %w%s", dir, err, diskAdvice(dir))
	}
	s.member = member
	select {
	case <-member.Server.ReadyNotify():
	case err := <-member.Err():
		return fmt.Errorf("store: the embedded etcd in %s failed: %w", dir, err)
	case <-ctx.Done():
		return fmt.Errorf("store: the embedded etcd in %s was not ready in time: %w", dir, ctx.Err())
	}
	s.Endpoints = []string{"http://" + member.Clients[0].Addr().String()}
	return nil
}

// startEtcd is embed.StartEtcd with a panic at start (etcd panics when
// it cannot create its write-ahead log: a disk too full) returned as an
// error.
func startEtcd(ec *embed.Config) (member *embed.Etcd, err error) {
	defer func() {
		if r := recover(); r != nil {
			member, err = nil, fmt.Errorf("%v", r)
		}
	}()
	return embed.StartEtcd(ec)
}

// minFreeNew is the free space a new embedded member needs: etcd
// preallocates its write-ahead log in segments of 64 MiB, and its
// database needs some room.
const minFreeNew = 64<<20 + 8<<20

// freeBytes is the space available to this process on dir's file system.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// checkFree refuses to start a new member in dir without room for its
// write-ahead log's first segment (etcd would panic: "failed to create
// WAL"), and warns when an existing one has less than a segment left.
func checkFree(dir string, log *slog.Logger) error {
	free, err := freeBytes(dir)
	if err != nil {
		return nil // not knowing is not a reason to refuse: etcd tells
	}
	_, werr := os.Stat(filepath.Join(dir, etcdSubdir, "member", "wal"))
	switch {
	case errors.Is(werr, os.ErrNotExist) && free < minFreeNew:
		return fmt.Errorf("store: %s has %d MiB free; a new embedded etcd needs at least %d MiB (its write-ahead log takes 64 MiB segments): free space there or choose another data directory",
			dir, free>>20, minFreeNew>>20)
	case free < 64<<20:
		log.Warn("store: the data directory has less than 64 MiB free: the embedded etcd's next write-ahead log segment will not fit; free space there",
			"dir", dir, "free_mib", free>>20)
	}
	return nil
}

// diskAdvice is what a start that failed says of dir's disk, when it is
// nearly full.
func diskAdvice(dir string) string {
	if free, err := freeBytes(dir); err == nil && free < minFreeNew {
		return fmt.Sprintf(" (%s has %d MiB free: free space there, or choose another data directory)", dir, free>>20)
	}
	return ""
}

// fatalHook stands for zap's exit on the embedded etcd's fatal errors:
// etcd exits the process when it cannot write its log or database (a full
// disk), with no word from holdfast and its served reads gone with it.
// The hook says what happened and what to do, and parks the etcd
// goroutine that failed (it must not go on past a fatal error) until the
// store closes; the server keeps serving what its cache holds, its
// writes fail, and the operator restarts it once there is space.
type fatalHook struct {
	log     *slog.Logger
	dir     string
	once    sync.Once
	failed  atomic.Bool
	release chan struct{} // closed by the store's Close
}

func (h *fatalHook) OnWrite(e *zapcore.CheckedEntry, _ []zapcore.Field) {
	h.failed.Store(true)
	h.once.Do(func() {
		args := []any{"dir", h.dir, "etcd_error", e.Message}
		if free, err := freeBytes(h.dir); err == nil {
			args = append(args, "free_mib", free>>20)
		}
		h.log.Error("store: the embedded etcd stopped on a fatal error (a full disk?): writes fail, cached reads are served; "+
			"free space in the data directory and restart the server (every publish it answered is in its write-ahead log)", args...)
	})
	<-h.release
	runtime.Goexit()
}

// checkDB opens the embedded member's database, if it has one, read-only:
// etcd panics on a database it cannot open, which would take the whole
// process down with a stack trace instead of an error.
func checkDB(name string) error {
	if _, err := os.Stat(name); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	db, err := bbolt.Open(name, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("store: the embedded etcd's database %s cannot be opened (damaged?): %w", name, err)
	}
	return db.Close()
}

// dirLock is an flock(2) on a data directory's lock file, which names the
// process holding it.
type dirLock struct{ f *os.File }

func lockDir(dir string) (*dirLock, error) {
	name := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(name)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by %s", ErrLocked, name, describeHolder(holder))
		}
		return nil, fmt.Errorf("store: lock %s: %w", name, err)
	}
	host, _ := os.Hostname()
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d on %s\n", os.Getpid(), host)), 0)
	}
	return &dirLock{f: f}, nil
}

func describeHolder(b []byte) string {
	if h := strings.TrimSpace(string(b)); h != "" {
		return "another holdfast server (" + h + ")"
	}
	return "another process"
}

func (l *dirLock) release() error { return l.f.Close() } // closing drops the flock

// checkFormat writes the data directory's format version if it has none
// (a new directory) and refuses one this server does not know.
func checkFormat(dir string) error {
	name := filepath.Join(dir, formatFile)
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(filepath.Join(dir, etcdSubdir)); serr == nil {
			return fmt.Errorf("store: %s holds an etcd directory but no %s: not a holdfast data directory, or a damaged one", dir, formatFile)
		}
		return os.WriteFile(name, []byte(strconv.Itoa(formatVersion)+"\n"), 0o600)
	}
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	switch {
	case err != nil:
		return fmt.Errorf("store: %s: not a format version: %q", name, b)
	case v > formatVersion:
		return fmt.Errorf("store: %s is of format %d, newer than this server's %d: run a newer holdfast", dir, v, formatVersion)
	case v < 1:
		return fmt.Errorf("store: %s: format %d is not one holdfast wrote", name, v)
	}
	return nil
}

// closeMember closes the embedded member; after a fatal error (failed)
// it waits at most memberCloseAfterFatal: the member's goroutine that
// failed is gone, and its close may wait for it forever.
func closeMember(m *embed.Etcd, failed bool) {
	if !failed {
		m.Close()
		return
	}
	done := make(chan struct{})
	go func() { defer close(done); m.Close() }()
	select {
	case <-done:
	case <-time.After(memberCloseAfterFatal):
	}
}

const memberCloseAfterFatal = 10 * time.Second
