package tokentable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/version"
	"github.com/holdfast-dev/holdfast/transport"
)

// Remote keeps a Table current with the token records of a holdfast
// server's store, for a relay: it long-polls POST /control/tokens/sync
// with its own token (which needs the relay scope), and each reply
// replaces the table whole. The server answers as soon as its tokens
// change, or after about 2 s with nothing new, so a token revoked in the
// store is refused by the relay within a few seconds of the revoke. It
// reports, in each request, the tokens its clients used since the
// previous one (for their last use).
//
// Until its first reply the table authenticates nobody. While the server
// does not answer the table keeps its last records (a relay keeps serving
// through its upstream's outage) unless MaxStale says otherwise.
type Remote struct {
	cfg   RemoteConfig
	table *Table
	toks  *access.Tokens

	lastSync atomic.Int64 // unix nanoseconds of the last reply; 0: none

	mu      sync.Mutex
	used    map[string]bool
	current syncReply       // the last reply applied, for downstream relays
	names   map[string]bool // current's record names
	changed chan struct{}   // closed and replaced when current changes

	// stale tells the table's subscribers, MaxStale after the last
	// reply, that every identity stopped authenticating (their open
	// streams end too); nil without MaxStale.
	stale *time.Timer

	ready     chan struct{}
	readyOnce sync.Once
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// RemoteConfig configures a Remote.
type RemoteConfig struct {
	// URLs are the base URLs of the servers to sync from, tried in turn
	// (a relay's upstreams). At least one.
	URLs []string
	// Secret is the relay's own token; it needs the relay scope.
	Secret string
	// Client sends the requests (default: a client of its own, over
	// http.DefaultTransport's settings). Its Timeout, if any, must exceed
	// the server's wait (a few seconds).
	Client *http.Client
	Logger *slog.Logger
	// MaxStale, when positive, makes the table refuse every token once
	// its last reply from a server is older than this: a revocation is
	// then never missed for longer, at the cost of refusing every client
	// while no server answers. Zero keeps the last records.
	MaxStale time.Duration
	// UserAgent is sent with each request (default "holdfast-relay/" and
	// the SDK's version).
	UserAgent string
}

// remoteTimeout bounds one sync request; the server waits at most a few
// seconds before it answers.
const remoteTimeout = 15 * time.Second

// NewRemote starts syncing; Close stops it.
func NewRemote(cfg RemoteConfig) (*Remote, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("access: remote: no server URL")
	}
	if err := access.CheckSecret(cfg.Secret); err != nil {
		return nil, fmt.Errorf("access: remote: the relay's own token: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = version.UserAgent("holdfast-relay")
	}
	ownClient := cfg.Client == nil
	if ownClient {
		cfg.Client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	r := &Remote{cfg: cfg, used: make(map[string]bool), ready: make(chan struct{}), changed: make(chan struct{})}
	r.table = NewTable(WithUse(r.noteUse))
	r.toks = access.FromAuthenticator(r, "the store's tokens, through "+strings.Join(cfg.URLs, ","))
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.run(ctx)
		if ownClient {
			cfg.Client.CloseIdleConnections()
		}
	}()
	return r, nil
}

// Tokens is the table as an *access.Tokens, for relay.WithTokens.
func (r *Remote) Tokens() *access.Tokens { return r.toks }

// Table is the table the Remote keeps.
func (r *Remote) Table() *Table { return r.table }

// Ready is closed once the first reply has been applied.
func (r *Remote) Ready() <-chan struct{} { return r.ready }

// LastSync is the time of the last reply (zero: none yet).
func (r *Remote) LastSync() time.Time {
	n := r.lastSync.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Authenticate is the table's, but refuses everyone while the records are
// older than MaxStale (when set).
func (r *Remote) Authenticate(secret string) (access.Identity, bool) {
	if r.cfg.MaxStale > 0 && time.Since(r.LastSync()) > r.cfg.MaxStale {
		return access.Identity{}, false
	}
	return r.table.Authenticate(secret)
}

// AuthenticateSubject is the table's (certificate identities), with
// Authenticate's MaxStale.
func (r *Remote) AuthenticateSubject(subject string) (access.Identity, bool) {
	if r.cfg.MaxStale > 0 && time.Since(r.LastSync()) > r.cfg.MaxStale {
		return access.Identity{}, false
	}
	return r.table.AuthenticateSubject(subject)
}

// NotifyChanges is the table's (access.Notifier): a relay's data plane
// hears of each revocation its sync brings.
func (r *Remote) NotifyChanges(fn func(access.Change)) (stop func()) {
	return r.table.NotifyChanges(fn)
}

// Close stops syncing and waits for it. It is safe to call more than
// once.
func (r *Remote) Close() {
	r.closeOnce.Do(func() {
		r.cancel()
		r.wg.Wait()
		if r.stale != nil {
			r.stale.Stop()
		}
	})
}

func (r *Remote) noteUse(name string) {
	r.mu.Lock()
	r.used[name] = true
	r.mu.Unlock()
}

// syncReply is the reply of POST /control/tokens/sync.
type syncReply = controlapi.TokenSync

func (r *Remote) run(ctx context.Context) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	var rev int64
	i := 0
	failing := false
	for ctx.Err() == nil {
		reply, err := r.sync(ctx, r.cfg.URLs[i%len(r.cfg.URLs)], rev)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !failing {
				r.cfg.Logger.Warn("access: syncing the store's tokens failed; keeping the last records", "url", r.cfg.URLs[i%len(r.cfg.URLs)], "err", err)
				failing = true
			}
			i++
			select {
			case <-ctx.Done():
				return
			case <-time.After(bo.NextBackOff()):
			}
			continue
		}
		if failing {
			r.cfg.Logger.Info("access: syncing the store's tokens again", "url", r.cfg.URLs[i%len(r.cfg.URLs)])
			failing = false
		}
		bo.Reset()
		if err := r.table.SetRecords(reply.Records, reply.Required); err != nil {
			r.cfg.Logger.Warn("access: the server sent invalid token records; they are left out", "err", err)
		}
		r.lastSync.Store(time.Now().UnixNano())
		if r.cfg.MaxStale > 0 {
			// A little after MaxStale: Authenticate refuses by then.
			if r.stale == nil {
				r.stale = time.AfterFunc(r.cfg.MaxStale+10*time.Millisecond, func() { r.table.notify(access.Change{All: true}) })
			} else {
				r.stale.Reset(r.cfg.MaxStale + 10*time.Millisecond)
			}
		}
		r.publish(reply.Revision)
		r.readyOnce.Do(func() { close(r.ready) })
		rev = reply.Revision
	}
}

func (r *Remote) sync(ctx context.Context, base string, after int64) (syncReply, error) {
	r.mu.Lock()
	used := make([]string, 0, len(r.used))
	for n := range r.used {
		used = append(used, n)
	}
	clear(r.used)
	r.mu.Unlock()
	slices.Sort(used)
	body, err := json.Marshal(struct {
		After int64    `json:"after"`
		Used  []string `json:"used,omitempty"`
	}{after, used})
	if err != nil {
		return syncReply{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, remoteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/control/tokens/sync", bytes.NewReader(body))
	if err != nil {
		return syncReply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+r.cfg.Secret)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", r.cfg.UserAgent)
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		r.requeue(used)
		return syncReply{}, err // a *url.Error: no header in it
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		r.requeue(used)
		return syncReply{}, err
	}
	if resp.StatusCode != http.StatusOK {
		r.requeue(used)
		return syncReply{}, fmt.Errorf("HTTP %d: %.256s", resp.StatusCode, bytes.TrimSpace(data))
	}
	var reply syncReply
	if err := json.Unmarshal(data, &reply); err != nil {
		return syncReply{}, fmt.Errorf("the reply: %w", err)
	}
	return reply, nil
}

// requeue notes uses again that a failed request did not deliver.
func (r *Remote) requeue(used []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range used {
		r.used[n] = true
	}
}

// publish makes the table's records at revision rev what downstream
// relays get (ServeHTTP), waking those waiting for a change.
func (r *Remote) publish(rev int64) {
	recs, required := r.table.Records()
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev == r.current.Revision && r.current.Records != nil {
		return
	}
	if recs == nil {
		recs = []access.Record{}
	}
	r.current = syncReply{Revision: rev, Required: required, Records: recs}
	r.names = make(map[string]bool, len(recs))
	for _, rec := range recs {
		r.names[rec.Name] = true
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// The bounds of a downstream relay's sync request, as a server's.
const (
	syncWait    = 2 * time.Second
	maxSyncUsed = 10_000
	maxSyncBody = 2 << 20
)

// ServeHTTP answers POST /control/tokens/sync from the Remote's copy, so
// that a relay behind this one checks its clients against the same store
// records (one token system down a chain of relays): the caller needs
// the relay scope; the reply comes once the copy is past the request's
// revision, or after about 2 s with the copy as it is; the names the
// caller reports used are passed on upstream with this relay's own.
// Until its first sync the Remote authenticates nobody: 401.
func (r *Remote) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	refuse := func(status int, code, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(transport.ErrorBody{Error: code, Message: msg})
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse(http.StatusMethodNotAllowed, transport.CodeBadRequest, "POST only")
		return
	}
	id, ok := r.toks.AuthenticateRequest(req)
	switch {
	case !ok:
		w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
		refuse(http.StatusUnauthorized, transport.CodeUnauthorized, "the token sync needs a bearer token with the relay scope")
		return
	case !id.IsRelay():
		refuse(http.StatusForbidden, transport.CodeForbidden, fmt.Sprintf("token %q has no relay scope", id.Name))
		return
	}
	var body struct {
		After int64    `json:"after"`
		Used  []string `json:"used"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxSyncBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		refuse(http.StatusBadRequest, transport.CodeBadRequest, fmt.Sprintf("the body: %v", err))
		return
	}
	if len(body.Used) > maxSyncUsed {
		refuse(http.StatusBadRequest, transport.CodeBadRequest, fmt.Sprintf("%d names used, want at most %d", len(body.Used), maxSyncUsed))
		return
	}
	// Only the names of records pass on: the set a caller can grow is
	// the store's.
	r.mu.Lock()
	for _, name := range body.Used {
		if r.names[name] {
			r.used[name] = true
		}
	}
	r.mu.Unlock()
	timer := time.NewTimer(syncWait)
	defer timer.Stop()
	for {
		r.mu.Lock()
		cur, changed := r.current, r.changed
		r.mu.Unlock()
		if cur.Records != nil && cur.Revision > body.After {
			writeSync(w, cur)
			return
		}
		select {
		case <-changed:
			continue
		case <-timer.C:
		case <-req.Context().Done():
		}
		writeSync(w, cur)
		return
	}
}

func writeSync(w http.ResponseWriter, reply syncReply) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(reply)
}
