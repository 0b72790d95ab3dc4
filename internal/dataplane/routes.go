package dataplane

import (
	"net/http"
	"strings"

	"github.com/holdfast-dev/holdfast/transport"
)

// routes mounts the data plane, then WithRoutes' routes, each behind
// authentication (WithTokens); a known path asked with another method gets
// 405, an unknown one 404.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	routes := []Route{
		{"GET", transport.PathSnapshot, s.handleSnapshot},
		{"GET", transport.PathEvents, s.handleEvents},
		{"GET", transport.PathWatch, s.handleWatch},
		{"POST", transport.PathAck, s.handleAck},
		{"POST", transport.PathAckStream, s.handleAckStream},
		{"POST", transport.PathAckCohort, s.handleAckCohort},
		{"POST", transport.PathPresence, s.handlePresence},
		{"GET", transport.PathStream, s.handleStream},
		{"GET", transport.PathStreamEvents, s.handleStreamEvents},
	}
	routes = append(routes, s.opts.routes...)
	allowed := map[string][]string{} // path: its methods
	var paths []string
	for _, rt := range routes {
		if (rt.Path == transport.PathStream || rt.Path == transport.PathStreamEvents) && !s.opts.offers(transport.CapabilityStream) ||
			rt.Path == transport.PathAckCohort && !s.opts.offers(transport.CapabilityAckCohort) ||
			rt.Path == transport.PathPresence && !s.opts.offers(transport.CapabilityPresence) {
			continue // as a server that predates it: 404
		}
		mux.HandleFunc(rt.Method+" "+rt.Path, s.authenticate(rt.Handler))
		if allowed[rt.Path] == nil {
			paths = append(paths, rt.Path)
		}
		allowed[rt.Path] = append(allowed[rt.Path], rt.Method)
	}
	for _, path := range paths {
		allow, plane := strings.Join(allowed[path], ", "), strings.HasPrefix(path, "/sdk/")
		mux.HandleFunc(path, s.authenticate(func(w http.ResponseWriter, r *http.Request) {
			if plane {
				// The data plane's faults and token hold for every request.
				if !s.gate(w, r, false) {
					return
				}
				defer s.speak(r)()
				s.planeHeaders(w, "")
			}
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, transport.ErrorBody{Error: transport.CodeBadRequest, Message: "method not allowed; use " + allow})
		}))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, transport.ErrorBody{Error: transport.CodeNotFound, Message: "no such endpoint: " + r.URL.Path})
	})
	return mux
}
