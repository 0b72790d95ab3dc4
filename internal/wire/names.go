package wire

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// MaxNamespaceLen is the longest namespace name.
const MaxNamespaceLen = 128

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
		return fmt.Errorf("transport: client id %q has a control character", Truncate(id, 64))
	}
	return nil
}

// TruncateUTF8 cuts s to at most n bytes, on a rune boundary.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Truncate bounds a string from the other side before it goes into an
// error, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return TruncateUTF8(s, n) + "…"
}
