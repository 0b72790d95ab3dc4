package transport

import (
	"fmt"
	"regexp"
	"strings"
)

// MaxNamespaceLen is the longest namespace name.
const MaxNamespaceLen = 128

// MaxKeyLen is the longest key.
const MaxKeyLen = 512

var namespacePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// ValidateNamespace reports whether name is a valid namespace name:
// ^[a-z0-9][a-z0-9._-]{0,127}$, and never "." or "..". A valid name contains
// no path separator, so it can name a file inside a cache directory.
func ValidateNamespace(name string) error {
	if !namespacePattern.MatchString(name) { // "." and ".." fail it: the first byte is [a-z0-9]
		return fmt.Errorf("%w: %q (want ^[a-z0-9][a-z0-9._-]{0,127}$)", ErrInvalidNamespace, name)
	}
	return nil
}

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
const MaxClientIDBytes = 256

// ValidateClientID checks a client id as a server does: 1 to
// MaxClientIDBytes bytes, no control character. A server refuses an ack
// whose id fails it.
func ValidateClientID(id string) error {
	switch {
	case id == "" || len(id) > MaxClientIDBytes:
		return fmt.Errorf("transport: a client id must have 1..%d bytes, not %d", MaxClientIDBytes, len(id))
	case strings.ContainsFunc(id, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return fmt.Errorf("transport: client id %q has a control character", truncate(id, 64))
	}
	return nil
}
