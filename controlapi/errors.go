package controlapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// Errors of the control API that transport has no sentinel for. A
// Client's *Error unwraps to them by its code; test with errors.Is.
var (
	// ErrConflict: the request does not hold against the store's state
	// now (409 conflict): a publish whose IfRevision is not the
	// namespace's revision (Error.Revision is the namespace's), a publish
	// or a rollout while a rollout runs, an ended rollout aborted.
	ErrConflict = errors.New("controlapi: conflict")
	// ErrSchemaViolation: the content a publish, rollback or rollout
	// would commit fails the namespace's schema (422 schema_violation);
	// Error.Details lists every failure. Nothing was committed.
	ErrSchemaViolation = errors.New("controlapi: schema violation")
	// ErrUnavailable: the server or its store did not answer (503
	// unavailable, 507 when the store is out of space); Error.RetryAfter
	// says when to try again.
	ErrUnavailable = errors.New("controlapi: unavailable")
)

// Error is a reply of the control API that is not 2xx: its status and
// the error body the server sent. It unwraps to the sentinel of its code:
// transport.ErrNotFound (not_found), transport.ErrBadRequest
// (bad_request), transport.ErrUnauthorized (unauthorized, forbidden),
// transport.ErrTooLarge (too_large), a *transport.CompactedError
// (compacted; errors.Is ErrCompacted), ErrConflict (conflict, and the
// change workflow's stale_base, not_approvable, already_approved),
// ErrSchemaViolation, ErrUnavailable; the change workflow's
// approval_required, self_approval and not_approver unwrap to
// transport.ErrUnauthorized (branch on Code to tell them apart).
type Error struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the API's error code (transport.CodeNotFound, ...); empty
	// when the reply was not the API's error form (a proxy's page, say).
	Code string
	// Message says what went wrong: the API's message, or the start of
	// the text of a reply not in its form.
	Message string
	// Details lists every failure, e.g. each schema violation.
	Details []string
	// Revision is, with ErrConflict, the namespace's revision now (0:
	// it has none).
	Revision int64
	// CompactRevision is, with compacted, the store's compaction point.
	CompactRevision int64
	// StoreID is the store the server named, if any.
	StoreID string
	// RetryAfter is the server's Retry-After, zero when absent.
	RetryAfter time.Duration
}

// Error is "code (HTTP status): message", and the details, if any, after
// "; ". A reply not in the API's form reads as its status text, e.g.
// "bad_gateway (HTTP 502): upstream went away".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.code())
	b.WriteString(" (HTTP ")
	b.WriteString(strconv.Itoa(e.StatusCode))
	b.WriteString(")")
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if len(e.Details) > 0 {
		b.WriteString("; " + strings.Join(e.Details, "; "))
	}
	return b.String()
}

// code is Code, or the status text in its form ("bad_gateway").
func (e *Error) code() string {
	if e.Code != "" {
		return e.Code
	}
	return strings.ToLower(strings.ReplaceAll(http.StatusText(e.StatusCode), " ", "_"))
}

// Unwrap returns the sentinel (or typed error) of e's code, nil if none.
func (e *Error) Unwrap() error {
	switch e.Code {
	case transport.CodeNotFound:
		return transport.ErrNotFound
	case transport.CodeBadRequest:
		return transport.ErrBadRequest
	case transport.CodeUnauthorized, transport.CodeForbidden:
		return transport.ErrUnauthorized
	case transport.CodeTooLarge:
		return transport.ErrTooLarge
	case transport.CodeCompacted:
		return &transport.CompactedError{CompactRevision: e.CompactRevision}
	case transport.CodeConflict, CodeStaleBase, CodeNotApprovable, CodeAlreadyApproved:
		return ErrConflict
	case CodeApprovalRequired, CodeSelfApproval, CodeNotApprover:
		return transport.ErrUnauthorized
	case transport.CodeSchemaViolation:
		return ErrSchemaViolation
	case transport.CodeUnavailable:
		return ErrUnavailable
	}
	return nil
}

// maxErrorMessage bounds the text kept of a reply not in the API's form.
const maxErrorMessage = 512

// newError is the *Error of a reply that is not 2xx, with its body.
func newError(resp *http.Response, body []byte) *Error {
	e := &Error{StatusCode: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var eb transport.ErrorBody
	if json.Unmarshal(body, &eb) != nil || eb.Error == "" {
		e.Message = clip(strings.TrimSpace(string(body)), maxErrorMessage)
		e.StoreID = resp.Header.Get("Holdfast-Store-Id")
		return e
	}
	e.Code, e.Message, e.Details = eb.Error, eb.Message, eb.Details
	e.Revision, e.CompactRevision, e.StoreID = eb.Revision, eb.CompactRevision, eb.StoreID
	if e.StoreID == "" {
		e.StoreID = resp.Header.Get("Holdfast-Store-Id")
	}
	return e
}

// retryAfter reads a Retry-After value, seconds or an HTTP date; zero
// when absent, malformed or past.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(max(0, min(secs, int64(24*time.Hour/time.Second)))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, min(t.Sub(now), 24*time.Hour))
	}
	return 0
}
