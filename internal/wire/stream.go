package wire

// NamespaceEndedBody is the wire form of transport.NamespaceEnded: the
// body of a transport.EventEnded event, and an element of
// StreamEventsResponse.Ended. Code and Message are a
// transport.ErrorBody's; CompactRevision is set with
// transport.CodeCompacted.
type NamespaceEndedBody struct {
	Namespace       string `json:"ns"`
	Code            string `json:"error"`
	Message         string `json:"message,omitempty"`
	CompactRevision int64  `json:"compact_revision,omitempty"`
}

// StreamEventsResponse is the body of GET /sdk/stream/events (the
// long-poll form of the stream): the changes after the request's cursors,
// in store order, the namespaces that left the stream, and the cursor up
// to which every namespace still in the stream is complete. AgeMillis and
// Unconfirmed are the age of relayed data as of the reply (see
// transport.Snapshot).
type StreamEventsResponse struct {
	StoreID     string               `json:"store_id"`
	Cursor      int64                `json:"cursor"`
	Changes     []ChangeSet          `json:"changes"`
	Ended       []NamespaceEndedBody `json:"ended,omitempty"`
	AgeMillis   int64                `json:"age_ms,omitempty"`
	Unconfirmed bool                 `json:"unconfirmed,omitempty"`
}
