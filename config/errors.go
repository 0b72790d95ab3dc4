package config

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("config: client closed")
	// ErrStale: a fail-closed namespace had no data fresher than its
	// MaxStaleness, from disk or network, before the context ended. The
	// error also wraps the last network error.
	ErrStale = errors.New("config: no data fresh enough")
	// ErrRejected: an update failed its checks (undecodable values, the
	// namespace's schema) and was rejected whole; the last good keeps
	// serving. Returned inside a *RejectedError.
	ErrRejected = errors.New("config: update rejected")
	// ErrAgeUnknown: the last-good file's confirmation time is in the
	// future beyond a small tolerance (the clock stepped back, a VM booted
	// with a stale clock), so its age cannot be told. It counts as older
	// than any MaxStaleness until the network confirms the data. Shown in
	// Status.LastError (ErrorClock).
	ErrAgeUnknown = errors.New("config: age of the last-good file unknown")
	// ErrOptionsDiffer: Client.Namespace was called for a namespace open
	// with other options.
	ErrOptionsDiffer = errors.New("config: namespace already open with other options")
)

// OpenError is returned by Client.Namespace when the namespace could not be
// opened before its context ended. It unwraps to both the context's error
// and the last error seen while trying, so errors.Is works with either
// (context.DeadlineExceeded, transport.ErrNotFound, ErrStale, ...).
type OpenError struct {
	Namespace string
	Err       error // why opening stopped: the context's error, or ErrStale
	Last      error // the last error of the sync loop, or nil
}

func (e *OpenError) Error() string {
	if e.Last == nil {
		return fmt.Sprintf("config: open namespace %q: %v", e.Namespace, e.Err)
	}
	return fmt.Sprintf("config: open namespace %q: %v (last error: %v)", e.Namespace, e.Err, e.Last)
}

func (e *OpenError) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Last}
}

// RejectedError says an update to a namespace was rejected whole. The last
// good data keeps serving. errors.Is(err, ErrRejected) holds.
type RejectedError struct {
	Namespace string
	Revision  int64
	Err       error // why: a decode error or a *schema.ValidationError
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("config: namespace %q revision %d rejected: %v", e.Namespace, e.Revision, e.Err)
}

func (e *RejectedError) Unwrap() []error { return []error{ErrRejected, e.Err} }
