package dataplane

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// Presence (docs/SERVER.md, "Presence"): every stream and held long-poll
// that names its client (transport.HeaderClientID) is an open entry of
// the server's table while it lasts, confirmed by each write the client
// took; a relay's presence reports (POST /sdk/presence) add the clients
// behind it.

// maxPresenceBody bounds a presence report's body:
// wire.MaxPresenceClients ids of the usual length fit many times over.
const maxPresenceBody = 4 << 20

// present opens r's client's entry in the presence table: stream, a
// stream that its writes confirm; else a long-poll, live while held.
func (s *Server) present(r *http.Request, stream bool) presence.Handle {
	client := r.Header.Get(transport.HeaderClientID)
	if client == "" || transport.ValidateClientID(client) != nil {
		return presence.Handle{}
	}
	return s.presence.Open(client, stream)
}

// handlePresence is POST /sdk/presence (capability presence): a relay's
// report of the clients connected to it.
func (s *Server) handlePresence(w http.ResponseWriter, r *http.Request) {
	if !s.gate(w, r, false) {
		return
	}
	var buf []byte
	data, err := readBodyInto(w, r, maxPresenceBody, &buf)
	var rep wire.PresenceReport
	if err == nil {
		err = s.mayReportCohort(r)
	}
	if err == nil {
		if err = json.Unmarshal(data, &rep); err != nil {
			err = fmt.Errorf("%w: presence report: %v", ErrInvalid, err)
		}
	}
	if err == nil {
		if err = wire.CheckPresenceReport(&rep); err != nil {
			err = fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	if err == nil {
		err = s.presence.Report(&rep)
	}
	if err != nil {
		s.planeError(w, r, "", err)
		return
	}
	defer s.speak(r)()
	s.planeHeaders(w, "")
	w.WriteHeader(http.StatusNoContent)
}

// Presence is the server's presence table: its own clients' connections
// and what the relays behind it report.
func (s *Server) Presence() *presence.Table { return s.presence }
