package config

import (
	"errors"
	"strconv"
	"time"

	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/transport"
)

// State is where a namespace stands with its config plane.
type State int

// The states of a namespace.
const (
	// StateSyncing: no data yet; the namespace is opening.
	StateSyncing State = iota
	// StateFresh: serving data the client has confirmed current over a live
	// connection.
	StateFresh
	// StateStale: serving the last good data, not confirmed current right
	// now (the connection is down, or the data came from disk and is not
	// confirmed yet), within MaxStaleness.
	StateStale
	// StateBreached: a fail-open namespace stale past MaxStaleness; it keeps
	// serving the last good data.
	StateBreached
	// StateFailedClosed: a fail-closed namespace stale past MaxStaleness; it
	// serves its Defaults until fresh data returns.
	StateFailedClosed
	// StateClosed: the client was closed.
	StateClosed
)

var stateNames = [...]string{"Syncing", "Fresh", "Stale", "Breached", "FailedClosed", "Closed"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Origin says where the data a namespace serves came from.
type Origin int

// The origins of served data.
const (
	OriginNone     Origin = iota // nothing served yet
	OriginNetwork                // the config plane
	OriginDisk                   // the last-good file in the cache directory
	OriginDefaults               // the namespace's Defaults (fail-closed)
)

var originNames = [...]string{"none", "network", "disk", "defaults"}

func (o Origin) String() string {
	if o >= 0 && int(o) < len(originNames) {
		return originNames[o]
	}
	return "Origin(" + strconv.Itoa(int(o)) + ")"
}

// ErrorKind classifies a namespace's last error. Two kinds of trouble are
// told apart: the transport's (the client keeps serving what it has and
// retries) and the data's (an update was rejected; the last good keeps
// serving until a later revision passes).
type ErrorKind int

// The kinds of error.
const (
	ErrorNone         ErrorKind = iota
	ErrorNetwork                // could not reach the server, or the stream broke
	ErrorResponse               // the server replied with an error status
	ErrorUnauthorized           // 401/403: credentials refused; retried slowly
	ErrorNotFound               // the namespace does not exist on the server
	ErrorInvalidData            // an update was rejected whole, or a malformed message
	ErrorPersist                // writing the last-good file failed
	ErrorClock                  // the last-good file's time is in the future: its age is unknown
	ErrorNotHoldfast            // the endpoint is not a holdfast server (a wrong URL or base path)
	ErrorHistory                // the server's history is behind what was applied (a lagging replica, or a restore)
	ErrorBind                   // a Bind could not decode its key's value into its type; the previous value stays bound
)

var errorKindNames = [...]string{"none", "network", "response", "unauthorized", "not_found", "invalid_data", "persist", "clock", "not_holdfast", "history", "bind"}

func (k ErrorKind) String() string {
	if k >= 0 && int(k) < len(errorKindNames) {
		return errorKindNames[k]
	}
	return "ErrorKind(" + strconv.Itoa(int(k)) + ")"
}

// ErrorInfo describes one error. The zero ErrorInfo means no error.
//
// An ErrorInfo in a Status is the most recent error, not necessarily a
// current one: Time says when it happened, and Recovered whether the
// namespace has confirmed its data since (the error is then past). String
// says both: "network: ... (12s ago, since recovered)".
type ErrorInfo struct {
	Kind       ErrorKind
	StatusCode int // the HTTP status, when the server replied one
	Message    string
	// Time is when the error happened.
	Time time.Time
	Err  error
	// Recovered: the error is past. For LastError, the namespace
	// confirmed its data current after Time (Status.LastConfirmed is
	// later); for a rejected update (ErrRejected), a later revision was
	// applied, since confirmations of the last good do not undo a
	// rejection; for ErrorBind, the Binding bound a value that decodes.
	// A PersistError is cleared instead, by the next successful write.
	Recovered bool
}

func (e ErrorInfo) isZero() bool {
	return e.Kind == ErrorNone && e.Message == "" && e.Err == nil && e.Time.IsZero()
}

// String describes the error in one line: its kind, the HTTP status if
// any, the message, how long ago it happened and whether it is past, as
// "network: dial tcp 127.0.0.1:8080: connection refused (12s ago, since
// recovered)". The zero ErrorInfo is "none".
func (e ErrorInfo) String() string { return e.format(time.Now()) }

func (e ErrorInfo) format(now time.Time) string {
	if e.isZero() {
		return "none"
	}
	b := []byte(e.Kind.String())
	if e.StatusCode != 0 {
		b = append(b, " (HTTP "...)
		b = strconv.AppendInt(b, int64(e.StatusCode), 10)
		b = append(b, ')')
	}
	if e.Message != "" {
		b = append(b, ": "...)
		b = append(b, e.Message...)
	}
	if !e.Time.IsZero() {
		b = append(b, " ("...)
		b = append(b, ago(now.Sub(e.Time))...)
		if e.Recovered {
			b = append(b, ", since recovered"...)
		}
		b = append(b, ')')
	} else if e.Recovered {
		b = append(b, " (since recovered)"...)
	}
	return string(b)
}

// ago is a short age: "350ms ago", "12s ago", "3m0s ago".
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "in " + (-d).Round(time.Millisecond).String() // a clock step
	case d < time.Second:
		return d.Round(time.Millisecond).String() + " ago"
	default:
		return d.Round(time.Second).String() + " ago"
	}
}

func errorInfo(err error, now time.Time) ErrorInfo {
	info := ErrorInfo{Kind: ErrorNetwork, Message: err.Error(), Time: now, Err: err}
	var se *transport.StatusError
	if errors.As(err, &se) {
		info.Kind, info.StatusCode = ErrorResponse, se.StatusCode
	}
	switch {
	case errors.Is(err, transport.ErrUnauthorized):
		info.Kind = ErrorUnauthorized
	case errors.Is(err, transport.ErrNotFound):
		info.Kind = ErrorNotFound
	case errors.Is(err, transport.ErrNotHoldfast):
		info.Kind = ErrorNotHoldfast
	case errors.Is(err, ErrAgeUnknown):
		info.Kind = ErrorClock
	case errors.Is(err, syncer.ErrBehind):
		info.Kind = ErrorHistory
	case errors.Is(err, ErrRejected), errors.Is(err, transport.ErrMalformed), errors.Is(err, transport.ErrTooLarge):
		info.Kind = ErrorInvalidData
	}
	return info
}

// Status is a namespace's state, with what it serves and how old that is.
type Status struct {
	Namespace string
	State     State
	// Since is when State began.
	Since time.Time
	// Revision, Cursor and StoreID describe the last good data.
	Revision int64
	Cursor   int64
	StoreID  string
	Origin   Origin
	// Endpoint is the base URL of the endpoint the client talks to now
	// (WithEndpoint, or the current one of WithEndpoints; a password in it
	// redacted); with WithSource, what a source that is a
	// transport.EndpointReporter says, else empty.
	Endpoint string
	// WatchMode names how the client follows the namespace now: "sse"
	// (a stream), or "long-poll" (WatchLongPoll, or WatchAuto's choice
	// behind a proxy that buffers streams); with WithSource, what a source
	// that is a transport.WatchModeReporter says, else empty.
	WatchMode string
	// LastConfirmed is when the client last confirmed its data current: a
	// snapshot, a change, or a progress event (from disk: the file's time).
	// Through a relay it is when the relay's upstream last confirmed the
	// data, as the relay says (the reply's receipt minus its age): a relay
	// cut off from its origin keeps answering, but the data ages.
	LastConfirmed time.Time
	// Staleness is the time since LastConfirmed, when Status was taken.
	Staleness time.Duration
	// Unconfirmed: the server's last report said that its upstream is not
	// confirming the data right now (a relay cut off from its origin). The
	// namespace is then not Fresh, however healthy its connection, until a
	// report without it.
	Unconfirmed  bool
	MaxStaleness time.Duration
	// LastError is the most recent error of syncing or applying, kept
	// after recovery: LastError.Recovered tells it is past (the data was
	// confirmed after it), LastError.Time when it was.
	LastError ErrorInfo
	// PersistError is the most recent error writing the last-good file,
	// cleared by the next successful write.
	PersistError ErrorInfo
	// Rollout is the staged rollout the last good data carries, if any:
	// whether this client serves its change.
	Rollout RolloutStatus
}

// RolloutStatus describes the staged rollout a namespace's data carries
// (see the package doc, "Staged rollouts"). The zero RolloutStatus means
// none is running.
type RolloutStatus struct {
	// ID names the rollout; empty when none is running.
	ID string
	// Stage is the percentage of the namespace's clients the current
	// stage covers.
	Stage float64
	// Staged: this client is in the stage, and serves the staged change;
	// false, it serves the base.
	Staged bool
}

func rolloutStatus(r syncer.Rollout) RolloutStatus {
	return RolloutStatus{ID: r.ID, Stage: r.Stage, Staged: r.Member}
}

// String describes the rollout as `rollout "r1" at 10%, serving the staged
// change` (or `…, serving the base`); "no rollout" when none is running.
func (r RolloutStatus) String() string { return string(r.appendTo(nil)) }

func (r RolloutStatus) appendTo(b []byte) []byte {
	if r.ID == "" {
		return append(b, "no rollout"...)
	}
	b = append(b, "rollout "...)
	b = strconv.AppendQuote(b, r.ID)
	b = append(b, " at "...)
	b = strconv.AppendFloat(b, r.Stage, 'g', -1, 64)
	if r.Staged {
		return append(b, "%, serving the staged change"...)
	}
	return append(b, "%, serving the base"...)
}

// String describes the status in one line: namespace, state, revision,
// staleness against MaxStaleness, origin, "unconfirmed upstream" when
// so, the endpoint if known, the staged rollout the data carries if any,
// and the errors if any, as `payments: Stale, revision 42, staleness 3s
// (max 30s), from disk, endpoint http://relay-2:8080, rollout "r1" at
// 10%, serving the base, last error: network: ... (3s ago)`.
func (s Status) String() string { return s.format(time.Now()) }

func (s Status) format(now time.Time) string {
	b := make([]byte, 0, 128)
	if s.Namespace != "" {
		b = append(b, s.Namespace...)
		b = append(b, ": "...)
	}
	b = append(b, s.State.String()...)
	b = append(b, ", revision "...)
	b = strconv.AppendInt(b, s.Revision, 10)
	b = append(b, ", staleness "...)
	if s.LastConfirmed.IsZero() {
		b = append(b, "unknown"...)
	} else {
		b = append(b, s.Staleness.Round(time.Millisecond).String()...)
	}
	if s.MaxStaleness > 0 {
		b = append(b, " (max "...)
		b = append(b, s.MaxStaleness.String()...)
		b = append(b, ')')
	} else {
		b = append(b, " (no max)"...)
	}
	b = append(b, ", from "...)
	b = append(b, s.Origin.String()...)
	if s.Unconfirmed {
		b = append(b, ", unconfirmed upstream"...)
	}
	if s.Endpoint != "" {
		b = append(b, ", endpoint "...)
		b = append(b, s.Endpoint...)
	}
	if s.Rollout.ID != "" {
		b = append(b, ", "...)
		b = s.Rollout.appendTo(b)
	}
	if !s.LastError.isZero() {
		b = append(b, ", last error: "...)
		b = append(b, s.LastError.format(now)...)
	}
	if !s.PersistError.isZero() {
		b = append(b, ", persist error: "...)
		b = append(b, s.PersistError.format(now)...)
	}
	return string(b)
}
