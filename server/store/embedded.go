package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// formatVersion is the layout of a data directory this server writes and
// reads; a directory of a later one is refused, not misread.
const formatVersion = 1

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
	loopback, _ := url.Parse("http://127.0.0.1:0")
	ec := embed.NewConfig()
	ec.Name = "holdfast"
	ec.Dir = filepath.Join(dir, etcdSubdir)
	ec.ListenClientUrls = []url.URL{*loopback}
	ec.AdvertiseClientUrls = []url.URL{*loopback}
	ec.ListenPeerUrls = []url.URL{*loopback}
	ec.AdvertisePeerUrls = []url.URL{*loopback}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(newSlogCore(cfg.Logger.With("component", "etcd"), &s.closing)))
	ec.ListenMetricsUrls = nil
	// etcd's own command sets these defaults through its flags; NewConfig
	// leaves them zero, and a zero unary-request threshold logs every
	// request (a WARN "request stats" line each).
	ec.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	ec.AutoCompactionMode, ec.AutoCompactionRetention, _ = compaction(cfg.Retention)
	// A publish is one transaction: etcd's defaults (128 operations, 1.5
	// MiB) would hold about 125 keys of it.
	ec.MaxTxnOps, ec.MaxRequestBytes = EmbeddedMaxTxnOps, EmbeddedMaxRequestBytes
	member, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("store: the embedded etcd in %s did not start: %w", dir, err)
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
