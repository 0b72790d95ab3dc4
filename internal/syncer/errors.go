package syncer

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/holdfast-dev/holdfast/telemetry"
	"github.com/holdfast-dev/holdfast/transport"
)

var (
	// ErrGap: a change set or progress event does not follow the applied
	// revision.
	ErrGap = errors.New("config: revision gap")
	// ErrBackstop: a healthy watch ended for the periodic full check.
	ErrBackstop = errors.New("config: backstop snapshot due")
	// ErrBehind: the server's snapshot is behind the applied revision of
	// the same store id (a *BehindError).
	ErrBehind = errors.New("config: server behind the applied revision")
)

// BehindError says a snapshot was refused because it is behind what was
// applied, under the same store id: a lagging replica, or history not yet
// known to be rewritten. errors.Is(err, ErrBehind) holds.
type BehindError struct {
	Namespace string
	StoreID   string
	Revision  int64 // the server's
	Applied   int64
	Since     time.Time     // when the evidence began
	Grace     time.Duration // how long it must last
}

func (e *BehindError) Error() string {
	return fmt.Sprintf("config: namespace %q: server snapshot at revision %d is behind the applied %d (store %s); refused for now, taken as rewritten history after %v of such evidence (%v so far)",
		e.Namespace, e.Revision, e.Applied, e.StoreID, e.Grace, time.Since(e.Since).Round(time.Millisecond))
}

// Is reports ErrBehind.
func (e *BehindError) Is(target error) bool { return target == ErrBehind }

// StagedError: the client is in the stage of rollout Rollout, and its
// checks rejected the data with the staged change (Err says why). The
// revision is rejected whole, as any; the last good keeps serving.
type StagedError struct {
	Rollout string
	Stage   float64 // the stage's percentage
	Err     error
}

func (e *StagedError) Error() string {
	return fmt.Sprintf("staged change of rollout %q (stage %v%%): %v", e.Rollout, e.Stage, e.Err)
}

func (e *StagedError) Unwrap() error { return e.Err }

// NeedsResnapshot reports whether a watch that ended with err cannot resume
// from its cursor: what the transport says cannot be retried there
// (compaction, a new store id, a refused cursor), a gap, the backstop, or
// an event over the size limit (resuming would meet it again; the snapshot
// has a limit of its own).
func NeedsResnapshot(err error) bool {
	return !transport.Retryable(err) || errors.Is(err, ErrGap) || errors.Is(err, ErrBackstop) ||
		errors.Is(err, transport.ErrTooLarge)
}

// resnapshotReason names why a watch that ended with err needs a new
// snapshot, for the resnapshots counter.
func (s *Syncer) resnapshotReason(err error) string {
	var se *transport.StatusError
	switch {
	case errors.Is(err, transport.ErrCompacted):
		return telemetry.ResnapshotCompacted
	case errors.Is(err, transport.ErrStoreChanged):
		return telemetry.ResnapshotStoreReset
	case errors.Is(err, transport.ErrCursorAhead):
		if errors.As(err, &se) && se.StoreID != "" && se.StoreID != s.storeID {
			return telemetry.ResnapshotStoreReset
		}
		return telemetry.ResnapshotCursorAhead
	case errors.Is(err, ErrGap):
		return telemetry.ResnapshotGap
	case errors.Is(err, ErrBackstop):
		return telemetry.ResnapshotBackstop
	case errors.As(err, &se) && se.StatusCode == http.StatusBadRequest:
		return telemetry.ResnapshotBadCursor
	case errors.Is(err, transport.ErrTooLarge):
		return telemetry.ResnapshotTooLarge
	}
	return telemetry.ValueOther
}

// ReconnectReason names why a watch ended, for the reconnects counter.
func ReconnectReason(err error) string {
	var se *transport.StatusError
	switch {
	case errors.Is(err, transport.ErrStreamIdle):
		return telemetry.ReconnectIdle
	case errors.Is(err, transport.ErrUnauthorized):
		return telemetry.ReconnectUnauthorized
	case errors.As(err, &se) && (se.StatusCode == http.StatusTooManyRequests || se.StatusCode == http.StatusServiceUnavailable):
		return telemetry.ReconnectThrottled
	case errors.Is(err, io.ErrUnexpectedEOF):
		return telemetry.ReconnectEOF
	}
	return telemetry.ReconnectError
}
