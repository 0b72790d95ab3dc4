package transport

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// Sentinel errors of the transport layer. Test with errors.Is.
var (
	// ErrCompacted: the requested cursor is below the store's compaction
	// point. The caller resnapshots. The error is a *CompactedError.
	ErrCompacted = errors.New("transport: cursor compacted")
	// ErrNotFound: the namespace does not exist on the server (a holdfast
	// server said so: its 404 names a store, in the Holdfast-Store-Id
	// header or a not_found body's store_id).
	ErrNotFound = errors.New("transport: namespace not found")
	// ErrNotHoldfast: the endpoint answered, but not as a holdfast server
	// does: a 404 that names no store, or a 200 that is not the protocol's
	// reply and names none (a wrong base path or host, a web server, a
	// single-page app). Retried slowly, like ErrNotFound.
	ErrNotHoldfast = errors.New("transport: not a holdfast endpoint")
	// ErrCursorAhead: the server refused a watch cursor above its head. Its
	// history is not the one the cursor came from: a new store, a store
	// restored from a backup under the same store id, or a replica lagging
	// behind the one the cursor came from. The caller resnapshots.
	ErrCursorAhead = errors.New("transport: cursor above the server's head")
	// ErrBadRequest: a server of protocol version 1 or later refused the
	// request as malformed (400 bad_request). Unlike a 400 from a server
	// of version 0, which may mean a refused cursor, it is retried from
	// the same cursor with backoff: a new snapshot would not fix it.
	ErrBadRequest = wire.ErrBadRequest
	// ErrNotModified: a conditional snapshot found the namespace unchanged.
	ErrNotModified = errors.New("transport: not modified")
	// ErrUnauthorized: the server refused the credentials (401) or the
	// namespace is outside their scope (403).
	ErrUnauthorized = errors.New("transport: unauthorized")
	// ErrTooLarge: a response or event exceeded the configured limit.
	ErrTooLarge = errors.New("transport: message too large")
	// ErrMalformed: the server sent bytes that do not decode.
	ErrMalformed = wire.ErrMalformed
	// ErrStoreChanged: the server's store id changed (its history was
	// rebuilt); the caller resnapshots and resets its monotonic floor.
	ErrStoreChanged = errors.New("transport: store id changed")
	// ErrStreamIdle: a request received no bytes for the idle timeout, a
	// watch stream delivered no whole event for it (keepalive comments and
	// a trickled event do not count), or a long-poll had no reply within
	// its wait plus the idle timeout (a black-holed or half-open
	// connection, or an intermediary whose upstream is gone).
	ErrStreamIdle = errors.New("transport: stream idle")
	// ErrInvalidNamespace: a namespace name that ValidateNamespace refuses.
	ErrInvalidNamespace = wire.ErrInvalidNamespace
	// ErrInvalidKey: a key that ValidateKey refuses.
	ErrInvalidKey = errors.New("transport: invalid key")
)

// CompactedError is returned when a cursor is below CompactRevision.
// errors.Is(err, ErrCompacted) holds for it.
type CompactedError struct {
	CompactRevision int64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("transport: cursor compacted (compact revision %d)", e.CompactRevision)
}

// Is reports ErrCompacted.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// StatusError is a non-success HTTP reply. It unwraps to the sentinel that
// matches its status and code, if any (ErrNotFound or ErrNotHoldfast on 404,
// ErrCursorAhead on 409, or 400 cursor_ahead from a server of version 0,
// ErrBadRequest on 400 bad_request from a server of version 1,
// ErrUnauthorized, ErrCompacted, ...).
type StatusError struct {
	StatusCode int
	// Code and Message come from the JSON error body, when it had one.
	Code    string
	Message string
	// StoreID is the store the server named: the error body's store_id,
	// else its Holdfast-Store-Id header; empty when it named none. With
	// ErrCursorAhead it tells a new store (another id) from history
	// rewritten under the same id.
	StoreID string
	// RetryAfter is the server's Retry-After, zero when absent.
	RetryAfter time.Duration
	// Err is the matching sentinel or typed error, or nil.
	Err error
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("transport: server replied %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Code != "" {
		s += ": " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func (e *StatusError) Unwrap() error { return e.Err }

// Retryable reports whether a watch that failed with err can be retried
// from the same cursor: everything except compaction, a store change, an
// invalid namespace name and a cursor the server refuses (ErrCursorAhead,
// or a 400 from a server of protocol version 0, which may mean one). The
// others call for a new snapshot. A missing namespace, an endpoint that is
// not holdfast (ErrNotHoldfast), refused credentials and ErrBadRequest are
// retried (slowly): the namespace may be created, the proxy fixed, the
// credentials rotated, the server upgraded.
func Retryable(err error) bool {
	var se *StatusError
	switch {
	case errors.Is(err, ErrBadRequest):
		return true
	case errors.Is(err, ErrCompacted), errors.Is(err, ErrStoreChanged),
		errors.Is(err, ErrInvalidNamespace), errors.Is(err, ErrCursorAhead),
		errors.As(err, &se) && se.StatusCode == http.StatusBadRequest:
		return false
	}
	return true
}
