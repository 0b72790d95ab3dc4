package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// ErrNoSession is what a SessionStore's Get returns for a session it does
// not know or that has expired.
var ErrNoSession = errors.New("console: no such session")

// Session is what a store keeps of a signed-in browser: never the token,
// only its SHA-256 digest, re-checked on every request.
type Session struct {
	// TokenDigest is the hex SHA-256 digest of the token signed in with;
	// empty for a session of an open server (no tokens).
	TokenDigest string `json:"token_digest,omitempty"`
	// Name is the identity's name when it signed in (shown; the identity
	// itself is re-read from the token's record).
	Name string `json:"name"`
	// CSRF is the session's token for forms and htmx requests.
	CSRF    string    `json:"csrf"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
}

// SessionStore keeps sessions under a key that is the hash of the
// session's id (SessionKey), so that the store never holds what the
// cookie carries. A store shared by the servers behind a balancer (etcd)
// makes a sign-in and a sign-out good on all of them.
type SessionStore interface {
	// Create keeps s under key until s.Expires.
	Create(ctx context.Context, key string, s Session) error
	// Get returns the session under key; ErrNoSession when there is none
	// or it expired.
	Get(ctx context.Context, key string) (Session, error)
	// Delete ends the session under key (none: no error).
	Delete(ctx context.Context, key string) error
}

// SessionKey is the key a store keeps the session of id under: the hex
// SHA-256 of the id.
func SessionKey(id string) string {
	d := sha256.Sum256([]byte(id))
	return hex.EncodeToString(d[:])
}

// newSecret returns 32 random bytes, base64url.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// MemorySessions is a SessionStore in memory (the reference server's, and
// a single server's).
type MemorySessions struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]Session
}

// NewMemorySessions returns an empty MemorySessions.
func NewMemorySessions() *MemorySessions {
	return &MemorySessions{now: time.Now, m: make(map[string]Session)}
}

// Create implements SessionStore; it drops the expired sessions.
func (s *MemorySessions) Create(_ context.Context, key string, sess Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, v := range s.m {
		if !now.Before(v.Expires) {
			delete(s.m, k)
		}
	}
	s.m[key] = sess
	return nil
}

// Get implements SessionStore.
func (s *MemorySessions) Get(_ context.Context, key string) (Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.m[key]
	if !ok || !s.now().Before(sess.Expires) {
		return Session{}, ErrNoSession
	}
	return sess, nil
}

// Delete implements SessionStore.
func (s *MemorySessions) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}

// Len returns how many sessions it keeps (expired ones included until
// the next Create).
func (s *MemorySessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
