package access

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// Tokens kept in a store (holdfast server's etcd) are Records: a name,
// the SHA-256 of the secret, never the secret, and the scopes. A server
// or relay holds the records it currently knows, replaced whole when they
// change, and authenticates against them (an Authenticator).
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
	// Subject is the client certificate's subject, as the listener
	// that verified it writes it (RFC 2253, e.g. "CN=deploy-bot,O=example"): the
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

// Authenticator authenticates a bearer secret. *Tokens is one, and so is
// the table of a store's records that holdfast server and relay keep.
type Authenticator interface {
	Authenticate(secret string) (Identity, bool)
}

// SubjectAuthenticator authenticates a caller by its verified client
// certificate's subject (RFC 2253). The table of a store's records that
// holdfast server and relay keep is one.
type SubjectAuthenticator interface {
	AuthenticateSubject(subject string) (Identity, bool)
}

// FromAuthenticator returns a *Tokens that authenticates with a (for the
// handlers that take a *Tokens); names is what Names returns, for logs.
func FromAuthenticator(a Authenticator, names ...string) *Tokens {
	return &Tokens{auth: a, names: names}
}

// Anonymous is the name of the identity every caller of a store that
// does not require tokens authenticates as (a store that has never had
// an admin token is open).
const Anonymous = "anonymous"
