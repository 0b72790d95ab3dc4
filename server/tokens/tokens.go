// Package tokens keeps holdfast server's bearer tokens in its store (etcd)
// and a cache of them in each server, kept current by an etcd watch.
//
// A token is an access.Record under Prefix+NAME: its name, the SHA-256 of
// its secret (never the secret), its scopes, expiry, creation time and
// creator. Its last use is a key of its own under UsePrefix, written at
// most once per UseInterval per token and server (never one write per
// request). RequiredKey, once written (with the first admin token), makes
// every server of the store require tokens; until then the store is open.
//
// Open reads the records and watches Prefix: a token created or revoked
// through any server is known to every server of the store as soon as
// etcd delivers the watch event (milliseconds; the tests require under
// 5 s). Close stops the watch and the last-use writer, and waits for them.
package tokens

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/tokentable"
)

// The store's keys.
const (
	// Prefix holds the records: Prefix + NAME. Outside every namespace's
	// prefix: no watch of a namespace sees it.
	Prefix = "/holdfast-tokens/"
	// RequiredKey, once present, makes the store require tokens.
	RequiredKey = Prefix + ".required"
	// UsePrefix holds each token's last use (RFC 3339), UsePrefix + NAME.
	UsePrefix = "/holdfast-token-use/"
)

// DefaultUseInterval is how often a server writes the last use of the
// tokens used since its previous write.
const DefaultUseInterval = time.Minute

// MaxTokens bounds the records a store holds (the cache and every
// relay's copy hold them all).
const MaxTokens = 10000

// Errors.
var (
	ErrExists   = errors.New("tokens: a token of that name exists")
	ErrNotFound = errors.New("tokens: no such token")
	ErrTooMany  = fmt.Errorf("tokens: the store holds %d tokens already", MaxTokens)
	ErrClosed   = errors.New("tokens: closed")
)

// Info is what a listing shows of a token: its record without the hash,
// and its last use.
type Info = controlapi.TokenInfo

// Config configures a Store.
type Config struct {
	Logger *slog.Logger
	// UseInterval is how often last uses are written (default
	// DefaultUseInterval).
	UseInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Store is the tokens of one etcd store, and this server's cache of them.
type Store struct {
	cli   *clientv3.Client
	log   *slog.Logger
	cfg   Config
	table *tokentable.Table

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu       sync.Mutex
	records  map[string]access.Record
	required bool
	rev      int64         // the store revision the cache is current at
	changed  chan struct{} // closed and replaced at each change
	uses     map[string]time.Time
}

// Open reads the store's tokens and starts following them.
func Open(ctx context.Context, cli *clientv3.Client, cfg Config) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.UseInterval <= 0 {
		cfg.UseInterval = DefaultUseInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Store{cli: cli, log: cfg.Logger, cfg: cfg, changed: make(chan struct{}), uses: make(map[string]time.Time)}
	s.table = tokentable.NewTable(tokentable.WithClock(cfg.Now), tokentable.WithUse(s.noteUse))
	rev, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.follow(rev) }()
	go func() { defer s.wg.Done(); s.writeUses() }()
	return s, nil
}

// Close stops following the store and writes the last uses not yet
// written. It is safe to call more than once.
func (s *Store) Close() {
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
}

// Table is the cache, for authentication.
func (s *Store) Table() *tokentable.Table { return s.table }

// load reads every record and the marker, and replaces the cache.
func (s *Store) load(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, Prefix, clientv3.WithPrefix(), clientv3.WithLimit(MaxTokens+2))
	if err != nil {
		return 0, fmt.Errorf("tokens: reading %s: %w", Prefix, err)
	}
	records := make(map[string]access.Record, len(resp.Kvs))
	required := false
	for _, kv := range resp.Kvs {
		if string(kv.Key) == RequiredKey {
			required = true
			continue
		}
		if r, ok := s.decode(kv.Key, kv.Value); ok {
			records[r.Name] = r
		}
	}
	s.mu.Lock()
	s.records, s.required = records, required
	s.publishLocked(resp.Header.Revision)
	s.mu.Unlock()
	return resp.Header.Revision, nil
}

func (s *Store) decode(key, value []byte) (access.Record, bool) {
	var r access.Record
	err := json.Unmarshal(value, &r)
	if err == nil {
		err = r.Validate()
	}
	if err == nil && Prefix+r.Name != string(key) {
		err = fmt.Errorf("the record names %q", r.Name)
	}
	if err != nil {
		s.log.Warn("tokens: ignoring an invalid record", "key", string(key), "err", err)
		return access.Record{}, false
	}
	return r, true
}

// publishLocked hands the records to the table and wakes the waiters.
func (s *Store) publishLocked(rev int64) {
	recs := make([]access.Record, 0, len(s.records))
	for _, r := range s.records {
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b access.Record) int { return strings.Compare(a.Name, b.Name) })
	_ = s.table.SetRecords(recs, s.required) // decode validated them
	s.rev = rev
	close(s.changed)
	s.changed = make(chan struct{})
}

// follow applies the watch's events to the cache until Close; a watch
// that fails (compaction, a member lost) is replaced after a full read.
func (s *Store) follow(rev int64) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	for s.ctx.Err() == nil {
		err := s.watch(rev)
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn("tokens: the watch of the token records ended; reading them again", "err", err)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(bo.NextBackOff()):
		}
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		r, err := s.load(ctx)
		cancel()
		if err == nil {
			rev = r
			bo.Reset()
		}
	}
}

func (s *Store) watch(rev int64) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	defer cancel()
	for resp := range s.cli.Watch(ctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify()) {
		if err := resp.Err(); err != nil {
			return err
		}
		s.mu.Lock()
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			switch {
			case key == RequiredKey:
				s.required = ev.Type == clientv3.EventTypePut
			case ev.Type == clientv3.EventTypeDelete:
				delete(s.records, strings.TrimPrefix(key, Prefix))
			default:
				if r, ok := s.decode(ev.Kv.Key, ev.Kv.Value); ok {
					s.records[r.Name] = r
				} else {
					delete(s.records, strings.TrimPrefix(key, Prefix))
				}
			}
		}
		switch {
		case len(resp.Events) > 0:
			s.publishLocked(resp.Header.Revision)
		case resp.Header.Revision > s.rev:
			s.rev = resp.Header.Revision // progress: nothing changed
		}
		s.mu.Unlock()
	}
	return errors.New("the watch channel closed")
}

// Changes returns the cache's revision and a channel closed at its next
// change.
func (s *Store) Changes() (rev int64, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev, s.changed
}

// noteUse records that name authenticated; writeUses writes it later.
func (s *Store) noteUse(name string) {
	now := s.cfg.Now()
	s.mu.Lock()
	s.uses[name] = now
	s.mu.Unlock()
}

// NoteUses records uses a relay reports, of tokens the cache knows.
func (s *Store) NoteUses(names []string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if _, ok := s.records[n]; ok && at.After(s.uses[n]) {
			s.uses[n] = at
		}
	}
}

// writeUses writes the last uses noted every UseInterval, and once more
// at Close.
func (s *Store) writeUses() {
	t := time.NewTicker(s.cfg.UseInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.flushUses(s.ctx)
		case <-s.ctx.Done():
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s.flushUses(ctx)
			cancel()
			return
		}
	}
}

func (s *Store) flushUses(ctx context.Context) {
	s.mu.Lock()
	uses := s.uses
	s.uses = make(map[string]time.Time)
	s.mu.Unlock()
	for name, at := range uses {
		// Only while the record exists: a revoked token gets no use key
		// back.
		_, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(Prefix+name), ">", 0)).
			Then(clientv3.OpPut(UsePrefix+name, at.UTC().Format(time.RFC3339Nano))).
			Commit()
		if err != nil {
			s.log.Debug("tokens: writing a last use failed", "token", name, "err", err)
		}
	}
}

// Create writes rec, which must not exist; with the admin scope it also
// makes the store require tokens.
func (s *Store) Create(ctx context.Context, rec access.Record) error {
	if err := rec.Validate(); err != nil {
		return err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	n := len(s.records)
	s.mu.Unlock()
	if n >= MaxTokens {
		return ErrTooMany
	}
	ops := []clientv3.Op{clientv3.OpPut(Prefix+rec.Name, string(data)), clientv3.OpDelete(UsePrefix + rec.Name)}
	if rec.Admin {
		ops = append(ops, clientv3.OpPut(RequiredKey, rec.Created.UTC().Format(time.RFC3339)))
	}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(Prefix+rec.Name), "=", 0)).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %q", ErrExists, rec.Name)
	}
	s.waitFor(ctx, resp.Header.Revision)
	return nil
}

// Revoke deletes the token name: no server of the store accepts it once
// its watch delivers the deletion.
func (s *Store) Revoke(ctx context.Context, name string) error {
	if err := access.ValidateName(name); err != nil {
		return err
	}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(Prefix+name), ">", 0)).
		Then(clientv3.OpDelete(Prefix+name), clientv3.OpDelete(UsePrefix+name)).Commit()
	if err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	s.waitFor(ctx, resp.Header.Revision)
	return nil
}

// waitFor waits until the cache is current at rev (or ctx ends), so that
// what this server answers next agrees with the write it just made.
func (s *Store) waitFor(ctx context.Context, rev int64) {
	for {
		cur, ch := s.Changes()
		if cur >= rev {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// List reads every token and its last use from the store.
func (s *Store) List(ctx context.Context) ([]Info, error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(Prefix, clientv3.WithPrefix(), clientv3.WithLimit(MaxTokens+2)),
		clientv3.OpGet(UsePrefix, clientv3.WithPrefix(), clientv3.WithLimit(MaxTokens+2)),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	used := make(map[string]time.Time)
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if t, err := time.Parse(time.RFC3339Nano, string(kv.Value)); err == nil {
			used[strings.TrimPrefix(string(kv.Key), UsePrefix)] = t
		}
	}
	now := s.cfg.Now()
	out := []Info{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		if string(kv.Key) == RequiredKey {
			continue
		}
		r, ok := s.decode(kv.Key, kv.Value)
		if !ok {
			continue
		}
		out = append(out, Info{Name: r.Name, Subject: r.Subject, Control: r.Control, Data: r.Data, Admin: r.Admin, Relay: r.Relay,
			Expires: r.Expires, Expired: r.Expired(now), Created: r.Created, CreatedBy: r.CreatedBy, LastUsed: used[r.Name]})
	}
	return out, nil
}

// HasAdmin reports whether the cache holds an admin token that has not
// expired.
func (s *Store) HasAdmin() bool {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.records {
		if r.Admin && !r.Expired(now) {
			return true
		}
	}
	return false
}

// BootstrapName is the name of the admin token Bootstrap creates.
const BootstrapName = "bootstrap-admin"

// Bootstrap makes sure the store has an admin token. When it has one
// already, it does nothing (created false). Otherwise it creates one
// named BootstrapName (admin scope, control and data "*"): with the
// secret in file if file holds one, else with a new secret it writes to
// file (mode 0600, created; an existing empty file is filled).
func (s *Store) Bootstrap(ctx context.Context, file string, writeFile func(name string, data []byte) error) (created bool, err error) {
	if s.HasAdmin() {
		return false, nil
	}
	secret := ""
	data, err := os.ReadFile(file)
	switch {
	case err == nil:
		secret = strings.TrimSpace(string(data))
	case !errors.Is(err, os.ErrNotExist):
		return false, fmt.Errorf("tokens: bootstrap: %w", err)
	}
	wrote := false
	if secret == "" {
		secret = access.NewSecret()
		if err := writeFile(file, []byte(secret+"\n")); err != nil {
			return false, fmt.Errorf("tokens: bootstrap: writing the new secret: %w", err)
		}
		wrote = true
	} else if err := access.CheckSecret(secret); err != nil {
		return false, fmt.Errorf("tokens: bootstrap: %s: %w", file, err)
	}
	rec := access.Record{Name: BootstrapName, Hash: access.HashSecret(secret),
		Scopes:  access.Scopes{Control: []string{"*"}, Data: []string{"*"}, Admin: true},
		Created: s.cfg.Now().UTC(), CreatedBy: "bootstrap"}
	err = s.Create(ctx, rec)
	if errors.Is(err, ErrExists) {
		// Another server bootstrapped the same store at the same time,
		// or the old bootstrap token expired: not ours to replace.
		if wrote {
			_ = os.Remove(file)
		}
		return false, fmt.Errorf("tokens: bootstrap: a token named %q exists but the store has no valid admin token: revoke it (etcdctl del %s%s) or create an admin token", BootstrapName, Prefix, BootstrapName)
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// Sync is what a relay reads of the tokens: every record (hashes
// included) and whether tokens are required, at Revision.
type Sync = controlapi.TokenSync

// Wait returns the records once the cache is past revision after, or
// after maxWait with the records as they are (a relay's proof that its
// copy is current), or when ctx ends.
func (s *Store) Wait(ctx context.Context, after int64, maxWait time.Duration) Sync {
	t := time.NewTimer(maxWait)
	defer t.Stop()
wait:
	for {
		rev, ch := s.Changes()
		if rev > after {
			break
		}
		select {
		case <-ch:
		case <-t.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, required := s.table.Records()
	return Sync{Revision: s.rev, Required: required, Records: recs}
}
