package dataplane

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// Errors of the data plane, mapped to HTTP statuses by the handlers.
var (
	// ErrUnknownNamespace: the backend has no such namespace (HTTP 404).
	ErrUnknownNamespace = errors.New("dataplane: unknown namespace")
	// ErrInvalid: the request is malformed or names an impossible
	// revision (HTTP 400). It is wrapped with the reason.
	ErrInvalid = errors.New("dataplane: invalid request")
	// ErrClosed: the server was closed.
	ErrClosed = errors.New("dataplane: server closed")
)

// RefusedError is a relay's refusal to serve a namespace: outside its
// allow-list (403), past its limit (429), not available yet (503).
type RefusedError struct {
	Namespace string
	Status    int    // HTTP status
	Code      string // transport.Code*
	Message   string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("namespace %q refused: %s", e.Namespace, e.Message)
}

// NewAccessError returns the refusal of a request for its credentials:
// status 401 (no valid token) or 403 (outside its scope), with msg, which
// names the token, never its secret.
func NewAccessError(status int, msg string) error { return &accessError{status, msg} }

// ErrorReply maps an error of the data plane (or of package transport) to
// its status and body; a client's mistake is never a 500.
func ErrorReply(err error) (int, transport.ErrorBody) { return errorReply(err) }

// WriteError replies with a JSON error body. 429 and 503 always carry
// Retry-After (1s unless the caller set one).
func WriteError(w http.ResponseWriter, status int, body transport.ErrorBody) {
	writeError(w, status, body)
}

// WriteJSON replies with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

// ParseDuration accepts Go durations ("1.5s") and whole seconds ("30");
// anything else is an error wrapping ErrInvalid.
func ParseDuration(s string) (time.Duration, error) { return parseDuration(s) }
