package presence

import (
	"slices"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// Annotate sets each client's State and SeenAt from entries (every
// client's presence, by id) as of now, and drops the gone clients last
// seen or heard more than Forget ago. A client without an entry was
// never seen connected (or was forgotten): gone.
func Annotate(clients []controlapi.ClientState, entries map[string]Entry, now time.Time) []controlapi.ClientState {
	for i := range clients {
		c := &clients[i]
		c.State = string(Gone)
		if e, ok := entries[c.ClientID]; ok {
			c.State, c.SeenAt = string(e.Shown(now)), e.At
		}
	}
	return slices.DeleteFunc(clients, func(c controlapi.ClientState) bool {
		return c.State == string(Gone) && now.Sub(laterOf(c.SeenAt, c.UpdatedAt)) > Forget
	})
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Count counts clients (of one namespace, annotated) into st as its
// revision says: the live ones in Clients, Live, Acked, Nacked and
// Behind, the stale ones in Stale.
func Count(st *controlapi.NamespaceStatus, clients []controlapi.ClientState) {
	for _, c := range clients {
		switch c.State {
		case string(Stale):
			st.Stale++
			continue
		case string(Live):
		default:
			continue
		}
		st.Clients++
		st.Live++
		switch {
		case c.AckedRevision >= st.Revision:
			st.Acked++
		case c.NackedRevision >= st.Revision:
			st.Nacked++
			st.Behind++
		default:
			st.Behind++
		}
	}
}

// LiveByNamespace counts the live clients of each namespace (clients
// annotated with their presence).
func LiveByNamespace(clients []controlapi.ClientState) map[string]int {
	n := make(map[string]int)
	for _, c := range clients {
		if c.State == string(Live) {
			n[c.Namespace]++
		}
	}
	return n
}
