package fakeserver

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/transport"
)

// The control API's replies, as the data plane's (package dataplane).

// replyError replies to a control request with the error's status.
func (s *Server) replyError(w http.ResponseWriter, err error) {
	status, body := errorReply(err)
	body.StoreID = s.StoreID()
	if status == http.StatusInternalServerError {
		s.log.Error("fakeserver: internal error", "err", err)
	}
	writeError(w, status, body)
}

// errorReply maps an error to its status and body: the reference
// server's own, then the data plane's. Client mistakes never become a
// 500.
func errorReply(err error) (int, transport.ErrorBody) {
	var se *SchemaError
	var conflict *ConflictError
	switch {
	case errors.As(err, &conflict):
		return http.StatusConflict, transport.ErrorBody{Error: transport.CodeConflict, Message: err.Error(), Revision: conflict.Revision}
	case errors.As(err, &se):
		return http.StatusUnprocessableEntity, transport.ErrorBody{Error: transport.CodeSchemaViolation, Message: err.Error(), Details: se.Failures}
	case errors.Is(err, ErrRolloutRunning), errors.Is(err, ErrRolloutEnded), errors.Is(err, errStoreChanged):
		return http.StatusConflict, transport.ErrorBody{Error: transport.CodeConflict, Message: err.Error()}
	case errors.Is(err, ErrUnknownRollout), errors.Is(err, ErrNoRevision):
		return http.StatusNotFound, transport.ErrorBody{Error: transport.CodeNotFound, Message: err.Error()}
	}
	return dataplane.ErrorReply(err)
}

// writeError replies with a JSON error body (dataplane.WriteError).
func writeError(w http.ResponseWriter, status int, body transport.ErrorBody) {
	dataplane.WriteError(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) { dataplane.WriteJSON(w, status, v) }

// withoutReserved returns content without its reserved keys (the base a
// client serves): content itself when it has none, else a copy.
func withoutReserved(content map[string]json.RawMessage) map[string]json.RawMessage {
	return dataplane.WithoutReserved(content)
}
