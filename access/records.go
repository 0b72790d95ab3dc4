package access

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Tokens kept in a store (holdfast server's etcd) are Records: a name,
// the SHA-256 of the secret, never the secret, and the scopes. A Table
// holds the records a server or relay currently knows, replaced whole
// when they change, and authenticates against them.
//
// Why SHA-256 and not a password hash (bcrypt, scrypt, Argon2): the
// secrets are 256 random bits (NewSecret), not passwords a person chose.
// A password hash is slow to make guessing a low-entropy password costly;
// guessing one of 2^256 secrets is out of reach at any speed, so a fast
// hash loses nothing and lets every request be checked in well under a
// microsecond. A store's reader learns no secret from the hashes.

// Scopes are what an identity may do (see the package doc for Control
// and Data).
type Scopes struct {
	Control []string `json:"control,omitempty"`
	Data    []string `json:"data,omitempty"`
	// Admin grants token management and the admin endpoints.
	Admin bool `json:"admin,omitempty"`
	// Relay lets a relay read the store's token records, to check its own
	// clients' data tokens.
	Relay bool `json:"relay,omitempty"`
}

// Validate checks the scopes: at least one, and every pattern a
// non-empty path.Match pattern. Errors wrap ErrInvalid.
func (s Scopes) Validate() error {
	if len(s.Control) == 0 && len(s.Data) == 0 && !s.Admin && !s.Relay {
		return fmt.Errorf("%w: no scope (want control or data patterns, admin or relay)", ErrInvalid)
	}
	for _, p := range slices.Concat(s.Control, s.Data) {
		if _, err := path.Match(p, ""); err != nil || p == "" || len(p) > 256 {
			return fmt.Errorf("%w: pattern %q: want a non-empty path.Match pattern of at most 256 bytes", ErrInvalid, p)
		}
	}
	if len(s.Control)+len(s.Data) > 256 {
		return fmt.Errorf("%w: %d patterns, want at most 256", ErrInvalid, len(s.Control)+len(s.Data))
	}
	return nil
}

// ValidateName checks a stored token's name: 1..128 bytes of ASCII
// letters, digits, '.', '_', '-' and '@', not beginning with '.' (it is
// an etcd key's last segment and a URL path segment).
func ValidateName(name string) error {
	if name == "" || len(name) > 128 || name[0] == '.' {
		return fmt.Errorf("%w: token name %q: want 1..128 bytes of [A-Za-z0-9._@-], not beginning with '.'", ErrInvalid, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._@-", c) >= 0) {
			return fmt.Errorf("%w: token name %q: want 1..128 bytes of [A-Za-z0-9._@-], not beginning with '.'", ErrInvalid, name)
		}
	}
	return nil
}

// Record is a token as a store keeps it: a bearer token (Hash), or a
// certificate identity (Subject): the scopes of a caller whose verified
// TLS client certificate has that subject (mTLS), with no secret at all.
type Record struct {
	Name string `json:"name"`
	// Hash is "sha256:" and the hex SHA-256 of the secret (HashSecret).
	Hash string `json:"hash,omitempty"`
	// Subject is the client certificate's subject, as Peer.Subject
	// writes it (RFC 2253, e.g. "CN=deploy-bot,O=example"): the
	// identity's name in the audit.
	Subject string `json:"subject,omitempty"`
	Scopes
	// Expires, when not zero, is when the token stops authenticating.
	Expires   time.Time `json:"expires,omitzero"`
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by,omitempty"`
}

// Validate checks a record's name, hash and scopes.
func (r Record) Validate() error {
	if err := ValidateName(r.Name); err != nil {
		return err
	}
	switch {
	case r.Subject != "" && r.Hash != "":
		return fmt.Errorf("%w: token %q: a hash or a subject, not both", ErrInvalid, r.Name)
	case r.Subject != "":
		if len(r.Subject) > 1024 || !printable(r.Subject, true) {
			return fmt.Errorf("%w: token %q: subject: want at most 1,024 bytes of printable ASCII", ErrInvalid, r.Name)
		}
	default:
		if _, err := parseHash(r.Hash); err != nil {
			return fmt.Errorf("token %q: %w", r.Name, err)
		}
	}
	if err := r.Scopes.Validate(); err != nil {
		return fmt.Errorf("token %q: %w", r.Name, err)
	}
	return nil
}

// Expired reports whether the record has expired at now.
func (r Record) Expired(now time.Time) bool { return !r.Expires.IsZero() && !now.Before(r.Expires) }

const hashPrefix = "sha256:"

// HashSecret returns the hash a Record keeps of secret.
func HashSecret(secret string) string {
	d := sha256.Sum256([]byte(secret))
	return hashPrefix + hex.EncodeToString(d[:])
}

func parseHash(h string) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	x, ok := strings.CutPrefix(h, hashPrefix)
	if !ok || len(x) != 2*sha256.Size {
		return d, fmt.Errorf("%w: hash: want %s and %d hex digits", ErrInvalid, hashPrefix, 2*sha256.Size)
	}
	if _, err := hex.Decode(d[:], []byte(x)); err != nil {
		return d, fmt.Errorf("%w: hash: want %s and %d hex digits", ErrInvalid, hashPrefix, 2*sha256.Size)
	}
	return d, nil
}

// SecretPrefix begins every secret NewSecret makes, so that a leaked one
// is easy to recognise (secret scanners, logs).
const SecretPrefix = "hfs_"

// NewSecret returns a new secret: SecretPrefix and 256 random bits in
// unpadded base64url (47 bytes in all).
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// CheckSecret checks that secret can be a token's: MinSecretLen to
// MaxSecretLen bytes of printable ASCII without spaces.
func CheckSecret(secret string) error {
	if len(secret) < MinSecretLen || len(secret) > MaxSecretLen || !printable(secret, false) {
		return fmt.Errorf("%w: a secret is %d..%d bytes of printable ASCII without spaces", ErrInvalid, MinSecretLen, MaxSecretLen)
	}
	return nil
}

// Authenticator authenticates a bearer secret. *Tokens and *Table are
// Authenticators.
type Authenticator interface {
	Authenticate(secret string) (Identity, bool)
}

// SubjectAuthenticator authenticates a caller by its verified client
// certificate's subject (Peer.Subject). *Table is one.
type SubjectAuthenticator interface {
	AuthenticateSubject(subject string) (Identity, bool)
}

// FromAuthenticator returns a *Tokens that authenticates with a (for the
// handlers that take a *Tokens); names is what Names returns, for logs.
func FromAuthenticator(a Authenticator, names ...string) *Tokens {
	return &Tokens{auth: a, names: names}
}

// Anonymous is the name of the identity a Table gives every caller while
// it does not require tokens (SetRecords with required false).
const Anonymous = "anonymous"

// Table authenticates against a set of Records, replaced whole with
// SetRecords (a server's cache of its store, a relay's copy of its
// server's). Authenticate looks a secret up by its SHA-256 and compares
// the record's hash in constant time; a record that has expired does not
// authenticate. It is safe for concurrent use.
type Table struct {
	state atomic.Pointer[tableState]
	now   func() time.Time
	used  func(name string)
}

type tableState struct {
	byDigest  map[[sha256.Size]byte]*tableEntry
	bySubject map[string]*tableEntry
	records   []Record
	required  bool
}

type tableEntry struct {
	rec    Record
	digest [sha256.Size]byte
	id     Identity
}

// TableOption configures a Table.
type TableOption interface{ apply(*Table) }

type tableOptionFunc func(*Table)

func (f tableOptionFunc) apply(t *Table) { f(t) }

// WithClock sets the clock expiry is measured against (default time.Now).
func WithClock(now func() time.Time) TableOption {
	return tableOptionFunc(func(t *Table) { t.now = now })
}

// WithUse sets a function told the name of every token that
// authenticates (for a record of last use; it must not block).
func WithUse(fn func(name string)) TableOption {
	return tableOptionFunc(func(t *Table) { t.used = fn })
}

// NewTable returns an empty Table that requires tokens: it
// authenticates nobody until SetRecords.
func NewTable(opts ...TableOption) *Table {
	t := &Table{now: time.Now, used: func(string) {}}
	for _, o := range opts {
		if o != nil {
			o.apply(t)
		}
	}
	t.state.Store(&tableState{required: true})
	return t
}

// SetRecords replaces the table's records. Records that do not validate
// are left out, and returned as errors. When required is false the table
// authenticates every caller, with or without a secret, as Anonymous with
// every scope: a store that has never had an admin token is open.
func (t *Table) SetRecords(records []Record, required bool) error {
	st := &tableState{byDigest: make(map[[sha256.Size]byte]*tableEntry, len(records)),
		bySubject: make(map[string]*tableEntry), required: required}
	var errs []error
	for _, r := range records {
		if err := r.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		st.records = append(st.records, r)
		if r.Subject != "" {
			st.bySubject[r.Subject] = &tableEntry{rec: r, id: NewIdentity(r.Subject, r.Scopes)}
			continue
		}
		d, _ := parseHash(r.Hash)
		st.byDigest[d] = &tableEntry{rec: r, digest: d, id: NewIdentity(r.Name, r.Scopes)}
	}
	t.state.Store(st)
	return errors.Join(errs...)
}

// Records returns the table's records and whether it requires tokens.
func (t *Table) Records() ([]Record, bool) {
	st := t.state.Load()
	return slices.Clone(st.records), st.required
}

// Required reports whether the table requires tokens.
func (t *Table) Required() bool { return t.state.Load().required }

var anonymous = Identity{Name: Anonymous, control: []string{"*"}, data: []string{"*"}, admin: true, relay: true}

// Authenticate returns the identity of the record whose hash is secret's,
// if it has not expired.
//
// The lookup is a map's, keyed by the secret's SHA-256: its time may
// depend on how that digest compares with the stored ones, which tells
// an attacker about hashes of their own guesses, nothing that brings a
// 256-bit secret closer. The hash found is then compared in constant
// time.
func (t *Table) Authenticate(secret string) (Identity, bool) {
	st := t.state.Load()
	if !st.required {
		return anonymous, true
	}
	d := sha256.Sum256([]byte(secret))
	e, ok := st.byDigest[d]
	if !ok || subtle.ConstantTimeCompare(d[:], e.digest[:]) != 1 || e.rec.Expired(t.now()) {
		return Identity{}, false
	}
	t.used(e.rec.Name)
	return e.id, true
}

// AuthenticateSubject returns the identity of the certificate record
// whose subject is subject, if it has not expired: named by the subject,
// so that the audit shows who the certificate says. Subjects are not
// secrets: the listener has verified the certificate before.
func (t *Table) AuthenticateSubject(subject string) (Identity, bool) {
	st := t.state.Load()
	if !st.required {
		return anonymous, true
	}
	e, ok := st.bySubject[subject]
	if !ok || e.rec.Expired(t.now()) {
		return Identity{}, false
	}
	t.used(e.rec.Name)
	return e.id, true
}
