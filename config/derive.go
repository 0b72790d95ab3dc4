package config

import (
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// facts is everything what a namespace serves and its State depend on.
type facts struct {
	applied       *snapshot.Snapshot // the last good data; nil before any
	appliedOrigin Origin             // OriginDisk until the network confirms it
	defaults      *snapshot.Snapshot // never nil: empty without Defaults
	// firstRejected: there is no applied data and the first snapshot
	// failed its checks.
	firstRejected bool
	// confirmed is when the data was last confirmed current; zero: never,
	// or unknown (ageKnown false).
	confirmed time.Time
	// ageKnown is false for data from disk whose confirmation time is in
	// the future: its age cannot be told.
	ageKnown bool
	// healthy: the last sync attempt succeeded and no failure followed.
	healthy bool
	// unconfirmed: the server's last report said its upstream is not
	// confirming the data right now (a relay cut off).
	unconfirmed bool
	now         time.Time

	maxStaleness time.Duration // 0: never stale by policy
	failClosed   bool
	// freshWindow is the longest a healthy connection goes without a
	// confirmation: past it, data is not Fresh however healthy the
	// connection looks.
	freshWindow time.Duration
}

// serving is what a namespace serves and the state it reports.
type serving struct {
	snap   *snapshot.Snapshot // nil: nothing yet
	origin Origin
	state  State
}

// derive is the one place that decides what is served and the State.
func derive(f facts) serving {
	age := f.now.Sub(f.confirmed)
	breached := f.maxStaleness > 0 && (!f.ageKnown || age > f.maxStaleness)
	switch {
	case f.applied == nil && f.firstRejected && !f.failClosed:
		return serving{f.defaults, OriginDefaults, StateStale} // fail-open opens on its Defaults
	case f.applied == nil:
		return serving{nil, OriginNone, StateSyncing}
	case breached && f.failClosed:
		return serving{f.defaults, OriginDefaults, StateFailedClosed}
	case breached:
		return serving{f.applied, f.appliedOrigin, StateBreached}
	case f.healthy && !f.unconfirmed && f.ageKnown && age <= f.freshWindow:
		return serving{f.applied, f.appliedOrigin, StateFresh}
	}
	return serving{f.applied, f.appliedOrigin, StateStale}
}

// nextChange is when derive's answer next changes by time alone, if
// nothing else happens; zero if never.
func nextChange(f facts, now State) time.Time {
	if !f.ageKnown || f.applied == nil {
		return time.Time{}
	}
	var next time.Time
	if now == StateFresh {
		next = f.confirmed.Add(f.freshWindow)
	}
	if f.maxStaleness > 0 && now != StateBreached && now != StateFailedClosed {
		if t := f.confirmed.Add(f.maxStaleness); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}
