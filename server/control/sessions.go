package control

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/internal/console"
)

// SessionRoot is the key prefix of the console's sessions: a session's
// is SessionRoot + the hash of its id (console.SessionKey), never the id
// nor the token, under a lease that ends with the session. Outside
// etcd.KeyRoot, so no namespace watch sees it; leased, so an export
// leaves it out.
const SessionRoot = "/holdfast-console-sessions/"

// Sessions keeps the console's sessions in etcd, so that every server of
// a store knows a sign-in and a sign-out ends a session on all of them
// (console.SessionStore).
type Sessions struct{ cli *clientv3.Client }

var _ console.SessionStore = (*Sessions)(nil)

// NewSessions returns the sessions kept in cli's store.
func NewSessions(cli *clientv3.Client) *Sessions { return &Sessions{cli: cli} }

// Create implements console.SessionStore: the key lives under a lease of
// the session's lifetime.
func (s *Sessions) Create(ctx context.Context, key string, sess console.Session) error {
	b, err := json.Marshal(sess)
	if err != nil {
		return err
	}
	ttl := int64(time.Until(sess.Expires)/time.Second) + 1
	lease, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return fmt.Errorf("control: console session: %w", err)
	}
	if _, err := s.cli.Put(ctx, SessionRoot+key, string(b), clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("control: console session: %w", err)
	}
	return nil
}

// Get implements console.SessionStore.
func (s *Sessions) Get(ctx context.Context, key string) (console.Session, error) {
	resp, err := s.cli.Get(ctx, SessionRoot+key)
	if err != nil {
		return console.Session{}, fmt.Errorf("control: console session: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return console.Session{}, console.ErrNoSession
	}
	var sess console.Session
	if err := json.Unmarshal(resp.Kvs[0].Value, &sess); err != nil || !time.Now().Before(sess.Expires) {
		return console.Session{}, console.ErrNoSession
	}
	return sess, nil
}

// Delete implements console.SessionStore: the key and its lease go.
func (s *Sessions) Delete(ctx context.Context, key string) error {
	resp, err := s.cli.Get(ctx, SessionRoot+key)
	if err != nil {
		return fmt.Errorf("control: console session: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	if lease := clientv3.LeaseID(resp.Kvs[0].Lease); lease != 0 {
		if _, err := s.cli.Revoke(ctx, lease); err == nil {
			return nil
		}
	}
	if _, err := s.cli.Delete(ctx, SessionRoot+key); err != nil {
		return fmt.Errorf("control: console session: %w", err)
	}
	return nil
}
