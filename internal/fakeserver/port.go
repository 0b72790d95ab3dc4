package fakeserver

import (
	"net"
	"sync"

	"github.com/holdfast-dev/holdfast/internal/portkeep"
)

// A stopped server keeps its port (portkeep), so that Restart can listen
// on it again, not fail with "address already in use" because another
// listener of the machine was given it meanwhile.

// portKeeper holds a stopped server's port until it listens again or
// closes.
type portKeeper struct {
	mu      sync.Mutex
	release func() // the reservation held; nil: none
	done    bool   // closed for good: keep nothing from now on
}

// keep reserves addr's port (after its listener closed).
func (k *portKeeper) keep(addr net.Addr) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done || k.release != nil {
		return
	}
	k.release = portkeep.Keep(addr)
}

// let lets the port go (after a listen on it, which the keeping does not
// stop on Linux, or for good when final).
func (k *portKeeper) let(final bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.done = k.done || final
	if k.release != nil {
		k.release()
		k.release = nil
	}
}

// keptListener is a server's listener: closing it keeps its port.
type keptListener struct {
	net.Listener
	keeper *portKeeper
	once   sync.Once
}

func (l *keptListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { l.keeper.keep(l.Addr()) })
	return err
}
