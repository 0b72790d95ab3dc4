package watchcache

import (
	"fmt"
	"net/http"
	"time"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/transport"
)

// A client can name any namespace; the relay asks its upstream for each
// one it does not follow yet. So that a client naming thousands that do
// not exist fills neither the relay's table nor its upstream:
//
//   - at most maxProbing namespaces are followed at once before the
//     upstream has sent data of them, and at most maxProbesPerSecond new
//     ones start a second; a request for one more gets 503 with a
//     Retry-After and takes no place;
//   - a namespace the upstream answered 404 for leaves the table at once
//     and is remembered as absent for absentFor: a request for it then
//     gets 404 from the relay, without asking upstream again. The
//     remembered names are bounded too (maxAbsent).
const (
	maxProbing         = 100
	maxProbesPerSecond = 200
	absentFor          = 5 * time.Second
	maxAbsent          = 10000
)

// probeLocked reports whether a new namespace may be asked for upstream
// now, and counts it (c.mu held).
func (c *Cache) probeLocked() bool {
	if c.probing.Load() >= maxProbing {
		return false
	}
	now := time.Now()
	if now.Sub(c.probeSecond) >= time.Second {
		c.probeSecond, c.probes = now, 0
	}
	if c.probes >= maxProbesPerSecond {
		return false
	}
	c.probes++
	return true
}

// absentLocked returns the refusal of ns if the upstream said lately that
// it has no such namespace (c.mu held).
func (c *Cache) absentLocked(ns string) error {
	until, ok := c.absent[ns]
	if !ok {
		return nil
	}
	if time.Now().After(until) {
		delete(c.absent, ns)
		return nil
	}
	return &dataplane.RefusedError{Namespace: ns, Status: http.StatusNotFound, Code: transport.CodeNotFound,
		Message: fmt.Sprintf("the relay's upstream has no namespace %q (asked at most %v ago)", ns, absentFor)}
}

// probingRefusal is the refusal of a new namespace past maxProbing.
func probingRefusal(ns string) error {
	return &dataplane.RefusedError{Namespace: ns, Status: http.StatusServiceUnavailable, Code: transport.CodeUnavailable,
		Message: "the relay is asking its upstream for too many new namespaces at once; retry"}
}

// gotData counts f out of the probing namespaces, once (its syncer's
// goroutine, or the drop).
func (c *Cache) gotData(f *followed) {
	if f.probing.CompareAndSwap(true, false) {
		c.probing.Add(-1)
	}
}

// dropAbsent lets go of f, which its upstream said does not exist and
// which never had data, and remembers it as absent. It runs on a
// goroutine of its own: the syncer's (which reported it) must end first.
func (c *Cache) dropAbsent(f *followed) {
	c.mu.Lock()
	if c.closed || f.pinned || f.leaving || c.nss[f.name] != f {
		c.mu.Unlock()
		return
	}
	f.leaving = true
	if len(c.absent) >= maxAbsent {
		now := time.Now()
		for ns, until := range c.absent {
			if now.After(until) {
				delete(c.absent, ns)
			}
		}
		for ns := range c.absent { // still full: any one goes
			if len(c.absent) < maxAbsent {
				break
			}
			delete(c.absent, ns)
		}
	}
	c.absent[f.name] = time.Now().Add(absentFor)
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		f.cancel()
		<-f.done
		if c.mux != nil {
			c.mux.Leave(f.name)
		}
		c.mu.Lock()
		delete(c.nss, f.name)
		c.follower.Drop(f.name)
		c.mu.Unlock()
		c.gotData(f)
		c.log.Debug("relay: the upstream has no such namespace; not following it", "ns", f.name)
	}()
}
