package transport

// A small stand-in for a server of the multi-namespace stream, as
// docs/PROTOCOL.md describes it: snapshots, /sdk/stream,
// /sdk/stream/events, single and batched acks, h2c. It holds one store in
// memory. transport's own tests cannot use the reference server, which
// imports transport.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// StandIn is the stand-in server (exported for the external tests of this
// package: the conformance harness).
type StandIn struct {
	URL string

	srv       *httptest.Server
	caps      string
	heartbeat time.Duration

	mu      sync.Mutex
	storeID string
	head    int64
	compact int64
	log     []ChangeSet
	vals    map[string]map[string]json.RawMessage
	nsRev   map[string]int64
	moved   chan struct{} // closed and replaced on every publish

	accepted atomic.Int64 // TCP connections accepted
	open     atomic.Int64 // not yet closed
	h2Reqs   atomic.Int64 // requests over HTTP/2
	acks     atomic.Int64 // acks received (one per element of a batch)
	ackPosts atomic.Int64 // POST /sdk/ack requests
	streams  atomic.Int64 // stream requests (SSE or long-poll)
}

// StartStandIn starts a stand-in on loopback advertising caps (a
// Holdfast-Capabilities value), speaking HTTP/1.1 and h2c.
func StartStandIn(t testing.TB, caps string, heartbeat time.Duration) *StandIn {
	t.Helper()
	s := &StandIn{caps: caps, heartbeat: heartbeat, storeID: "standin-1",
		vals: map[string]map[string]json.RawMessage{}, nsRev: map[string]int64{}, moved: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathSnapshot, s.snapshot)
	mux.HandleFunc("GET "+PathStream, s.streamSSE)
	mux.HandleFunc("GET "+PathStreamEvents, s.streamPoll)
	mux.HandleFunc("POST "+PathAck, s.ack)
	s.srv = httptest.NewUnstartedServer(mux)
	s.srv.Config.Protocols = new(http.Protocols)
	s.srv.Config.Protocols.SetHTTP1(true)
	s.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
			s.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.open.Add(-1)
		}
	}
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	s.URL = s.srv.URL
	return s
}

// Publish commits puts and deletes to ns as one revision.
func (s *StandIn) Publish(ns string, puts map[string]json.RawMessage, deletes []string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.head++
	cs := ChangeSet{Namespace: ns, Revision: s.head, PrevRevision: s.nsRev[ns], StoreID: s.storeID,
		CommittedAt: time.Now().UTC(), Puts: puts, Deletes: deletes}
	s.log = append(s.log, cs)
	v := s.vals[ns]
	if v == nil {
		v = map[string]json.RawMessage{}
		s.vals[ns] = v
	}
	for k, x := range puts {
		v[k] = x
	}
	for _, k := range deletes {
		delete(v, k)
	}
	s.nsRev[ns] = s.head
	close(s.moved)
	s.moved = make(chan struct{})
	return s.head
}

// Compact drops the history at and below rev.
func (s *StandIn) Compact(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compact = max(s.compact, rev)
	i := 0
	for i < len(s.log) && s.log[i].Revision <= rev {
		i++
	}
	s.log = s.log[i:]
}

func (s *StandIn) headers(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 2 {
		s.h2Reqs.Add(1)
	}
	h := w.Header()
	s.mu.Lock()
	h.Set(HeaderStoreID, s.storeID)
	h.Set(HeaderCursor, strconv.FormatInt(s.head, 10))
	s.mu.Unlock()
	h.Set(HeaderProtocol, "1")
	h.Set(HeaderHeartbeat, strconv.FormatInt(s.heartbeat.Milliseconds(), 10))
	if s.caps != "" {
		h.Set(HeaderCapabilities, s.caps)
	}
}

func standInJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (s *StandIn) snapshot(w http.ResponseWriter, r *http.Request) {
	s.headers(w, r)
	ns := r.URL.Query().Get("ns")
	s.mu.Lock()
	rev, ok := s.nsRev[ns]
	snap := Snapshot{Namespace: ns, StoreID: s.storeID, Revision: rev, Cursor: s.head, CompactRevision: s.compact}
	snap.Values, _ = json.Marshal(s.vals[ns])
	s.mu.Unlock()
	if !ok {
		standInJSON(w, http.StatusNotFound, ErrorBody{Error: CodeNotFound, StoreID: snap.StoreID})
		return
	}
	if r.Header.Get("If-None-Match") == wire.ETag(snap.StoreID, rev) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	standInJSON(w, http.StatusOK, snap)
}

// parseStream reads the ns parameters; an error is a whole-request 400.
func parseStream(r *http.Request) (map[string]int64, []string, error) {
	vs := r.URL.Query()["ns"]
	if len(vs) == 0 || len(vs) > MaxStreamNamespaces {
		return nil, nil, fmt.Errorf("%d namespaces", len(vs))
	}
	since := make(map[string]int64, len(vs))
	var order []string
	for _, v := range vs {
		i := strings.LastIndexByte(v, ':')
		if i < 0 {
			return nil, nil, errors.New("no ':'")
		}
		n, err := strconv.ParseInt(v[i+1:], 10, 64)
		if err != nil || n < 0 {
			return nil, nil, errors.New("bad since")
		}
		if _, dup := since[v[:i]]; dup {
			return nil, nil, errors.New("named twice")
		}
		since[v[:i]] = n
		order = append(order, v[:i])
	}
	return since, order, nil
}

// join checks each namespace at the open: those in trouble end.
func (s *StandIn) join(since map[string]int64, order []string) (ended []wire.NamespaceEndedBody) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ns := range order {
		c := since[ns]
		var b wire.NamespaceEndedBody
		switch _, known := s.nsRev[ns]; {
		case ValidateNamespace(ns) != nil:
			b = wire.NamespaceEndedBody{Namespace: ns, Code: CodeInvalidNamespace}
		case c > s.head:
			b = wire.NamespaceEndedBody{Namespace: ns, Code: CodeCursorAhead}
		case c < s.compact:
			b = wire.NamespaceEndedBody{Namespace: ns, Code: CodeCompacted, CompactRevision: s.compact}
		case !known:
			b = wire.NamespaceEndedBody{Namespace: ns, Code: CodeNotFound}
		default:
			continue
		}
		delete(since, ns)
		ended = append(ended, b)
	}
	return ended
}

// after returns the changes of the members above their cursors (which it
// advances), the head, and what closes on the next publish.
func (s *StandIn) after(since map[string]int64) ([]ChangeSet, int64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ChangeSet
	for _, cs := range s.log {
		if c, ok := since[cs.Namespace]; ok && cs.Revision > c {
			out = append(out, cs)
			since[cs.Namespace] = cs.Revision
		}
	}
	return out, s.head, s.moved
}

func (s *StandIn) streamSSE(w http.ResponseWriter, r *http.Request) {
	s.streams.Add(1)
	s.headers(w, r)
	since, order, err := parseStream(r)
	if err != nil {
		standInJSON(w, http.StatusBadRequest, ErrorBody{Error: CodeBadRequest, Message: err.Error()})
		return
	}
	ended := s.join(since, order)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	send := func(typ string, id int64, v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\nid: %d\ndata: %s\n\n", typ, id, b)
	}
	for _, b := range ended {
		send(EventEnded, 0, b)
	}
	var told int64 = -1
	tick := time.NewTicker(s.heartbeat)
	defer tick.Stop()
	for {
		changes, head, moved := s.after(since)
		for _, cs := range changes {
			send(EventChange, cs.Revision, cs)
		}
		if head != told {
			send(EventProgress, head, StreamProgress{StoreID: s.storeID, Cursor: head})
			told = head
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-moved:
		case <-tick.C:
			told = -1
		}
	}
}

func (s *StandIn) streamPoll(w http.ResponseWriter, r *http.Request) {
	s.streams.Add(1)
	s.headers(w, r)
	since, order, err := parseStream(r)
	if err != nil {
		standInJSON(w, http.StatusBadRequest, ErrorBody{Error: CodeBadRequest, Message: err.Error()})
		return
	}
	wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
	least := int64(-1)
	for _, c := range since {
		if least < 0 || c < least {
			least = c
		}
	}
	ended := s.join(since, order)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		changes, head, moved := s.after(since)
		if len(changes) > 0 || len(ended) > 0 || head > least {
			standInJSON(w, http.StatusOK, wire.StreamEventsResponse{StoreID: s.storeID, Cursor: head, Changes: changes, Ended: ended})
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-moved:
		case <-deadline.C:
			standInJSON(w, http.StatusOK, wire.StreamEventsResponse{StoreID: s.storeID, Cursor: head, Changes: []ChangeSet{}})
			return
		}
	}
}

func (s *StandIn) ack(w http.ResponseWriter, r *http.Request) {
	s.headers(w, r)
	s.ackPosts.Add(1)
	var body struct {
		Ack
		Acks []Ack `json:"acks"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		standInJSON(w, http.StatusBadRequest, ErrorBody{Error: CodeBadRequest})
		return
	}
	if body.Acks != nil {
		s.acks.Add(int64(len(body.Acks)))
	} else {
		s.acks.Add(1)
	}
	w.WriteHeader(http.StatusNoContent)
}
