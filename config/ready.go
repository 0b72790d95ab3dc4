package config

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// ErrNotReady is matched (with errors.Is) by the *NotReadyError that
// CheckReady returns.
var ErrNotReady = errors.New("config: not ready")

// NotReady says why one namespace fails a readiness check.
type NotReady struct {
	Namespace string
	// State is the namespace's state; StateSyncing also for a namespace
	// this client has not opened.
	State State
	// Staleness is the age of what the namespace serves (zero while
	// Syncing).
	Staleness time.Duration
	// Reason is one line for a human: what is wrong and what it serves.
	Reason string
}

func (r NotReady) String() string { return r.Namespace + ": " + r.Reason }

// NotReadyError lists the namespaces that fail a readiness check, in the
// order they were asked for.
type NotReadyError struct {
	NotReady []NotReady
	// Checked is how many namespaces were checked.
	Checked int
}

func (e *NotReadyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config: not ready: %d of %d namespaces", len(e.NotReady), e.Checked)
	for _, r := range e.NotReady {
		b.WriteString("; ")
		b.WriteString(r.String())
	}
	return b.String()
}

// Is reports whether target is ErrNotReady.
func (e *NotReadyError) Is(target error) bool { return target == ErrNotReady }

// CheckReady is a readiness check over the namespaces named (all the
// namespaces this client has open, when none are named). It returns nil
// when each of them serves data of its own config plane, or else a
// *NotReadyError naming every one that is not ready and why. A namespace is
// not ready while it is:
//
//   - not open on this client, or still opening (StateSyncing);
//   - FailedClosed: serving its Defaults, not config-plane data;
//   - serving its Defaults for another reason (a fail-open namespace whose
//     first snapshot was rejected);
//   - Closed;
//   - older than maxStaleness, or of unknown age (a last-good file
//     confirmed in the future), when maxStaleness > 0 (whatever its own
//     policy says: a fail-open namespace past its MaxStaleness keeps
//     serving, Breached, and is ready unless it is also past maxStaleness).
//
// After Client.Close every namespace is not ready. With no names and no
// namespace open, CheckReady reports ready: name the namespaces the
// application cannot serve without.
//
// Stale data within those limits is ready: down = stale, not down. Pick
// maxStaleness for the probe, not the namespace: how old a config this
// instance may serve before the load balancer should stop sending it
// traffic. CheckReady never waits and is safe for concurrent use.
func (c *Client) CheckReady(maxStaleness time.Duration, namespaces ...string) error {
	c.mu.Lock()
	closed := c.closed
	if len(namespaces) == 0 {
		for name := range c.namespaces {
			namespaces = append(namespaces, name)
		}
		slices.Sort(namespaces) // a stable body, not the map's order
	}
	open := make([]*Namespace, len(namespaces))
	for i, name := range namespaces {
		open[i] = c.namespaces[name]
	}
	c.mu.Unlock()

	var bad []NotReady
	for i, name := range namespaces {
		if closed {
			bad = append(bad, NotReady{Namespace: name, State: StateClosed, Reason: "the client is closed"})
			continue
		}
		if r, ok := readiness(name, open[i], maxStaleness); !ok {
			bad = append(bad, r)
		}
	}
	if bad == nil {
		return nil
	}
	return &NotReadyError{NotReady: bad, Checked: len(namespaces)}
}

// readiness checks one namespace; n is nil when it is not open.
func readiness(name string, n *Namespace, maxStaleness time.Duration) (NotReady, bool) {
	r := NotReady{Namespace: name, State: StateSyncing}
	if n == nil {
		r.Reason = "not open on this client"
		return r, false
	}
	st := n.Status()
	r.State, r.Staleness = st.State, st.Staleness
	switch {
	case st.State == StateSyncing:
		r.Reason = "syncing: no data yet"
	case st.State == StateClosed:
		r.Reason = "closed"
	case st.State == StateFailedClosed:
		r.Reason = fmt.Sprintf("failed closed: stale %v, past its MaxStaleness %v; serving its Defaults", round(st.Staleness), st.MaxStaleness)
	case st.Origin == OriginDefaults:
		r.Reason = fmt.Sprintf("%v: serving its Defaults, not config-plane data (its first snapshot was rejected)", st.State)
	case maxStaleness > 0 && st.LastConfirmed.IsZero():
		r.Reason = fmt.Sprintf("%v: age unknown, so not within the %v this check allows (revision %d)", st.State, maxStaleness, st.Revision)
	case maxStaleness > 0 && st.Staleness > maxStaleness:
		r.Reason = fmt.Sprintf("%v: stale %v, past the %v this check allows (revision %d)", st.State, round(st.Staleness), maxStaleness, st.Revision)
	default:
		return r, true
	}
	if st.LastError.Kind != ErrorNone {
		r.Reason += fmt.Sprintf("; last error (%v): %s", st.LastError.Kind, st.LastError.Message)
	}
	return r, false
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// ReadyHandler is CheckReady as an http.Handler, for a readiness probe:
// 200 when ready, 503 when not, with a text/plain body of one line per
// namespace that says which are not ready and why.
func (c *Client) ReadyHandler(maxStaleness time.Duration, namespaces ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		err := c.CheckReady(maxStaleness, namespaces...)
		var nr *NotReadyError
		if !errors.As(err, &nr) {
			w.WriteHeader(http.StatusOK)
			fmt.Fprintln(w, "ready")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %d of %d namespaces\n", len(nr.NotReady), nr.Checked)
		for _, r := range nr.NotReady {
			fmt.Fprintln(w, r.String())
		}
	})
}
