package transport

import (
	"fmt"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// MaxNamespaceLen is the longest namespace name.
const MaxNamespaceLen = wire.MaxNamespaceLen

// MaxKeyLen is the longest key.
const MaxKeyLen = 512

// ValidateNamespace reports whether name is a valid namespace name:
// ^[a-z0-9][a-z0-9._-]{0,127}$, and never "." or "..". A valid name contains
// no path separator, so it can name a file inside a cache directory.
func ValidateNamespace(name string) error { return wire.ValidateNamespace(name) }

// ValidateKey reports whether key is a valid key: 1 to MaxKeyLen bytes of
// printable ASCII without spaces. Keys are path-like ("db/primary/host").
func ValidateKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %q has length %d (want 1..%d)", ErrInvalidKey, key, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: %q has byte %#x at %d (want printable ASCII, no space)", ErrInvalidKey, key, c, i)
		}
	}
	return nil
}

// MaxClientIDBytes bounds a client id (Ack.ClientID, a relay's id, a
// cohort's members).
const MaxClientIDBytes = wire.MaxClientIDBytes

// ValidateClientID checks a client id as a server does: 1 to
// MaxClientIDBytes bytes, no control character. A server refuses an ack
// whose id fails it.
func ValidateClientID(id string) error { return wire.ValidateClientID(id) }
