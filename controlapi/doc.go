// Package controlapi holds the request and reply types of holdfast's
// control API (/control/..., docs/PROTOCOL.md "Control API"), defined
// once, and a Client of it: holdfast server, the reference server
// (holdfasttest), the etcd source's audit queries and the holdfast
// command all speak them.
//
// A Client has one method per route, each taking a context that bounds
// its request:
//
//	c, err := controlapi.NewClient("https://holdfast.example:8080", controlapi.WithToken(secret))
//	rev, err := c.Publish(ctx, "payments.prod", controlapi.PublishRequest{
//		Puts:   map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage(`50`)},
//		Actor:  "alice",
//		Reason: "INC-1234",
//	})
//	hist, err := c.History(ctx, "payments.prod", controlapi.HistoryOptions{Limit: 20})
//
// A reply that is not 2xx is an *Error: the HTTP status, the API's error
// code, message and details, and the revision of a conflict or the
// compaction point. It unwraps to the sentinel of its code, so that
// errors.Is tells the kinds apart: transport.ErrNotFound,
// transport.ErrBadRequest, transport.ErrUnauthorized (401 and 403),
// transport.ErrTooLarge, transport.ErrCompacted (errors.As gives the
// *transport.CompactedError), ErrConflict, ErrSchemaViolation and
// ErrUnavailable. A call that fails so has changed nothing, except that
// a request the server did not answer (a transport error, a context
// ended) may or may not have been applied: read the namespace's status
// or history before retrying a write without IfRevision.
//
// The Client reads a reply up to WithMaxReplyBytes and decodes it
// leniently (a newer server's extra fields are ignored);
// WithReplyHook sees each reply's body as the server sent it.
package controlapi
