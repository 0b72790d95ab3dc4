// Package access is who may do what in holdfast: bearer tokens (and
// certificate identities), each with a name and its scopes, checked by
// servers, relays and the reference server alike.
//
//   - Control: the namespaces the token may change through the control API
//     (publish, rollback, rollouts, schemas, and reading a namespace's
//     status and history there). A store-wide operation (compaction, fault
//     injection) needs the pattern "*", which names every namespace.
//   - Data: the namespaces the token may read on the data plane (snapshot,
//     long-poll, watch, the multi-namespace stream) and ack. A token with
//     data scope only cannot call the control API.
//
// A scope is a list of patterns in path.Match syntax, matched against the
// whole namespace name. Namespace names have no '/', so '*' matches any run
// of characters, dots included: "payments.*" matches "payments.prod" and
// "payments.prod.eu", not "payments"; "fraud.prod" matches only itself;
// "*" matches every name.
//
// holdfast server and holdfast relay take their records (Record) from the
// store ('holdfast token create'), and authenticate against them through
// FromAuthenticator; New builds a fixed set in Go, for the reference
// server and tests.
//
// Secrets are compared in constant time (Authenticate), and no value of
// this package prints one: an Identity has no secret, and a Token's String,
// GoString and LogValue leave it out.
package access

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/internal/peer"
)

// ErrInvalid is wrapped by every error of New, Parse and Load: the
// configuration is refused whole.
var ErrInvalid = errors.New("access: invalid token configuration")

// The bounds of a secret, in bytes.
const (
	MinSecretLen = 16
	MaxSecretLen = 4096
)

// Token is one bearer token and what it may do. Secret is what a client
// sends ("Authorization: Bearer <Secret>"); Name identifies it in replies,
// logs and audit records, which never show the secret.
type Token struct {
	Name    string
	Secret  string
	Control []string
	Data    []string
	// Relay is the relay scope: a relay's own token, which speaks for
	// its clients (their acks, its cohort reports) to its upstream.
	Relay bool
	// Admin is the admin scope: token management, policies, lints and
	// the admin endpoints (what a store's token record's Admin grants).
	Admin bool
}

// String describes t without its secret.
func (t Token) String() string {
	switch {
	case t.Relay && t.Admin:
		return fmt.Sprintf("token %q (control %v, data %v, relay, admin)", t.Name, t.Control, t.Data)
	case t.Relay:
		return fmt.Sprintf("token %q (control %v, data %v, relay)", t.Name, t.Control, t.Data)
	case t.Admin:
		return fmt.Sprintf("token %q (control %v, data %v, admin)", t.Name, t.Control, t.Data)
	}
	return fmt.Sprintf("token %q (control %v, data %v)", t.Name, t.Control, t.Data)
}

// GoString is String: %#v does not print the secret either.
func (t Token) GoString() string { return t.String() }

// LogValue logs t without its secret.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", t.Name), slog.Any("control", t.Control), slog.Any("data", t.Data), slog.Bool("relay", t.Relay), slog.Bool("admin", t.Admin))
}

// Identity is an authenticated token: its name and scopes, never its
// secret. The zero Identity may do nothing.
type Identity struct {
	Name    string
	control []string
	data    []string
	admin   bool // token management, the admin endpoints
	relay   bool // a relay: it may read the store's token records
	// expires, when not zero, is when the identity stops authenticating
	// (its record's Expires).
	expires time.Time
}

// NewIdentity returns the identity name with scopes s (a store's token
// record, an mTLS subject mapped to scopes).
func NewIdentity(name string, s Scopes) Identity {
	return Identity{Name: name, control: slices.Clone(s.Control), data: slices.Clone(s.Data), admin: s.Admin, relay: s.Relay}
}

// WithExpiry returns id expiring at t (zero: never).
func (id Identity) WithExpiry(t time.Time) Identity {
	id.expires = t
	return id
}

// Expires returns when the identity stops authenticating; zero: never.
// A data plane ends the streams it opened by then.
func (id Identity) Expires() time.Time { return id.expires }

// Scopes returns the identity's scopes.
func (id Identity) Scopes() Scopes {
	return Scopes{Control: slices.Clone(id.control), Data: slices.Clone(id.data), Admin: id.admin, Relay: id.relay}
}

// IsAdmin reports whether the identity has the admin scope: token
// management and the admin endpoints.
func (id Identity) IsAdmin() bool { return id.admin }

// IsRelay reports whether the identity has the relay scope: it may read
// the store's token records (their hashes and scopes), to check its own
// clients' tokens.
func (id Identity) IsRelay() bool { return id.relay }

// MayRead reports whether the identity may read namespace ns on the data
// plane (and ack it).
func (id Identity) MayRead(ns string) bool { return matchAny(id.data, ns) }

// MayControl reports whether the identity may change namespace ns through
// the control API.
func (id Identity) MayControl(ns string) bool { return matchAny(id.control, ns) }

// MayControlAll reports whether the identity may run store-wide control
// operations (compaction, faults): its control scope has the pattern "*".
func (id Identity) MayControlAll() bool { return slices.Contains(id.control, "*") }

// HasControl reports whether the identity has any control scope at all.
func (id Identity) HasControl() bool { return len(id.control) > 0 }

func matchAny(patterns []string, ns string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, ns); ok {
			return true
		}
	}
	return false
}

// Tokens is a checked token configuration. It is immutable and safe for
// concurrent use.
type Tokens struct {
	entries []entry
	// auth, when set, authenticates instead of entries (FromAuthenticator).
	auth  Authenticator
	names []string
}

type entry struct {
	id     Identity
	digest [sha256.Size]byte // of the secret: fixed-length, for the comparison
}

// New checks tokens and returns the configuration: at least one token;
// each with a unique non-empty name of printable ASCII, a unique secret
// of MinSecretLen..MaxSecretLen bytes of printable ASCII without spaces
// (what a header carries), and at least one valid, non-empty pattern in
// Control or Data (or the Admin scope). Errors wrap ErrInvalid and never quote a secret.
func New(tokens ...Token) (*Tokens, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%w: no token", ErrInvalid)
	}
	t := &Tokens{entries: make([]entry, 0, len(tokens))}
	names := make(map[string]bool, len(tokens))
	secrets := make(map[[sha256.Size]byte]string, len(tokens))
	for i, tok := range tokens {
		switch {
		case tok.Name == "":
			return nil, fmt.Errorf("%w: token %d has no name", ErrInvalid, i+1)
		case !printable(tok.Name, true) || len(tok.Name) > 128:
			return nil, fmt.Errorf("%w: token %d: name %q: want 1..128 bytes of printable ASCII", ErrInvalid, i+1, tok.Name)
		case names[tok.Name]:
			return nil, fmt.Errorf("%w: token name %q given twice", ErrInvalid, tok.Name)
		case len(tok.Secret) < MinSecretLen || len(tok.Secret) > MaxSecretLen:
			return nil, fmt.Errorf("%w: token %q: its secret has %d bytes, want %d..%d", ErrInvalid, tok.Name, len(tok.Secret), MinSecretLen, MaxSecretLen)
		case !printable(tok.Secret, false):
			return nil, fmt.Errorf("%w: token %q: its secret has a byte a header cannot carry (want printable ASCII, no space)", ErrInvalid, tok.Name)
		case len(tok.Control) == 0 && len(tok.Data) == 0 && !tok.Admin:
			return nil, fmt.Errorf("%w: token %q has neither control nor data scope", ErrInvalid, tok.Name)
		}
		names[tok.Name] = true
		for _, p := range slices.Concat(tok.Control, tok.Data) {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				return nil, fmt.Errorf("%w: token %q: pattern %q: want a non-empty path.Match pattern", ErrInvalid, tok.Name, p)
			}
		}
		d := sha256.Sum256([]byte(tok.Secret))
		if other, dup := secrets[d]; dup {
			return nil, fmt.Errorf("%w: tokens %q and %q have the same secret", ErrInvalid, other, tok.Name)
		}
		secrets[d] = tok.Name
		t.entries = append(t.entries, entry{
			id:     Identity{Name: tok.Name, control: slices.Clone(tok.Control), data: slices.Clone(tok.Data), admin: tok.Admin, relay: tok.Relay},
			digest: d,
		})
	}
	return t, nil
}

// printable reports whether s is printable ASCII (with space if space).
func printable(s string, space bool) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == ' ' && !space {
			return false
		}
	}
	return true
}

// Authenticate returns the identity whose secret is secret. It takes the
// same time whichever token matches, if any, and whatever secret's
// length: it compares fixed-length digests, with every token, without
// an early exit.
func (t *Tokens) Authenticate(secret string) (Identity, bool) {
	if t == nil {
		return Identity{}, false
	}
	if t.auth != nil {
		return t.auth.Authenticate(secret)
	}
	d := sha256.Sum256([]byte(secret))
	match := 0 // 1 + the index of the matching entry; 0: none
	for i := range t.entries {
		eq := subtle.ConstantTimeCompare(d[:], t.entries[i].digest[:])
		match = subtle.ConstantTimeSelect(eq, i+1, match)
	}
	if match == 0 {
		return Identity{}, false
	}
	return t.entries[match-1].id, true
}

// DigestAuthenticator authenticates by the SHA-256 digest of a secret: a
// console session keeps its token's digest, never the token, and
// re-checks it on each request so that a revoked token ends its sessions.
type DigestAuthenticator interface {
	AuthenticateDigest(d [sha256.Size]byte) (Identity, bool)
}

// AuthenticateDigest is Authenticate for the SHA-256 digest of a secret
// (see DigestAuthenticator). A configuration from an Authenticator that
// is not a DigestAuthenticator authenticates no digest.
func (t *Tokens) AuthenticateDigest(d [sha256.Size]byte) (Identity, bool) {
	if t == nil {
		return Identity{}, false
	}
	if t.auth != nil {
		if da, ok := t.auth.(DigestAuthenticator); ok {
			return da.AuthenticateDigest(d)
		}
		return Identity{}, false
	}
	match := 0
	for i := range t.entries {
		eq := subtle.ConstantTimeCompare(d[:], t.entries[i].digest[:])
		match = subtle.ConstantTimeSelect(eq, i+1, match)
	}
	if match == 0 {
		return Identity{}, false
	}
	return t.entries[match-1].id, true
}

// AuthenticateHeader is Authenticate for the value of an Authorization
// header, "Bearer <secret>" (the scheme is case-insensitive).
func (t *Tokens) AuthenticateHeader(header string) (Identity, bool) {
	scheme, secret, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		secret = "" // still the full comparison: no timing of its own
	}
	return t.Authenticate(secret)
}

// AuthenticateRequest returns the identity a request authenticates as,
// the one place that asks who is calling: its bearer token
// (AuthenticateHeader) when it sends one, the token deciding; else the
// subject of its verified client certificate (which the listener that
// verified it puts on the request's context), when the configuration
// knows certificate identities (a SubjectAuthenticator, such as a
// server's or relay's table of the store's tokens).
func (t *Tokens) AuthenticateRequest(r *http.Request) (Identity, bool) {
	header := r.Header.Get("Authorization")
	if header == "" && t != nil {
		if sa, ok := t.auth.(SubjectAuthenticator); ok {
			if p, ok := peer.FromContext(r.Context()); ok {
				return sa.AuthenticateSubject(p.Subject)
			}
		}
	}
	return t.AuthenticateHeader(header)
}

// Change tells which identities a Notifier's records changed: those
// named (an identity's Name), or every one (All).
type Change struct {
	Names []string
	All   bool
}

// Notifier is an Authenticator whose records change while it serves (a
// server's or relay's table of the store's tokens): it tells fn of each
// change once the new records authenticate, so that whoever holds what
// an identity opened (a data plane's streams) checks it again. fn must
// not block. stop ends the notifications.
type Notifier interface {
	NotifyChanges(fn func(Change)) (stop func())
}

// NotifyChanges tells fn of each change of the records t authenticates
// against (see Notifier); ok is false, and fn never called, when they
// cannot change (a fixed set of New, or an Authenticator that is no
// Notifier).
func (t *Tokens) NotifyChanges(fn func(Change)) (stop func(), ok bool) {
	if t == nil {
		return func() {}, false
	}
	n, ok := t.auth.(Notifier)
	if !ok {
		return func() {}, false
	}
	return n.NotifyChanges(fn), true
}

// Names returns the tokens' names, in configuration order (for a
// FromAuthenticator configuration, the names it was given).
func (t *Tokens) Names() []string {
	if t == nil {
		return nil
	}
	if t.auth != nil {
		return slices.Clone(t.names)
	}
	names := make([]string, len(t.entries))
	for i, e := range t.entries {
		names[i] = e.id.Name
	}
	return names
}

type identityKey struct{}

// NewContext returns ctx carrying id, the identity a request authenticated
// as.
func NewContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the identity NewContext put in ctx, if any.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}
