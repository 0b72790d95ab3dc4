package watchcache

import (
	"net/http"
	"time"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/transport"
)

// HandFed is a cache's follower store fed by hand (Apply, Confirm, ...),
// served by a data plane (NewHandFed): an upstream for the relay's tests,
// standing in for an upstream relay in states a real upstream does not
// reach on demand (a resnapshot dated back, a reserved key published).
type HandFed = follower

// NewHandFed returns a follower store whose windows keep maxChanges
// change sets, and its data plane, heartbeating every heartbeat, not yet
// listening. A namespace it was never fed is answered 404, as an upstream
// that has not it answers (a relay probing its upstream asks for one).
func NewHandFed(maxChanges int, heartbeat time.Duration) (*HandFed, *dataplane.Server, error) {
	f := newFollower(maxChanges, 0, func(ns string) error {
		return &dataplane.RefusedError{Namespace: ns, Status: http.StatusNotFound, Code: transport.CodeNotFound, Message: "never fed"}
	})
	s, err := dataplane.New(f, dataplane.WithHeartbeat(heartbeat))
	if err != nil {
		return nil, nil, err
	}
	f.serve(s)
	return f, s, nil
}
