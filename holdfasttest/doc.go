// Package holdfasttest runs holdfast's reference server in-process, for the
// tests of applications that use holdfast. It is the same server the SDK's
// own tests run against, a real config plane rather than a mock: revisions,
// history, compaction, live SSE streams, schemas, acks, staged rollouts,
// and faults to inject (refused requests, latency, dropped streams, a
// black hole, a store reset, a crash and restart on the same address).
//
//	srv := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(100*time.Millisecond))
//	srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 50})
//	c, _ := config.New(config.WithEndpoint(srv.URL()))
//	...
//	srv.Stop() // the config plane goes down: the client serves stale
//
// The server listens on 127.0.0.1 on a free port. Server has the
// reference server's whole Go API: Publish, PublishWith,
// PublishRaw, Delete, Rollback, RollbackWith, SetSchema, Compact,
// History, ValuesAt, ValuesAtTime, Diff, Snapshot, Status, Clients,
// Head, CompactRevision, StoreID, Stats, OpenStreams; the rollouts
// (StartRollout, Rollout, Rollouts, WaitRollout, AbortRollout,
// PromoteRollout); the faults (FailNext, SetLatency, DropStreams,
// SetBlackhole, ResetStore, RestoreTo); and its life (URL, Addr, Stop,
// Restart, Close). Faults apply to the data plane (/sdk/...) only, so
// that a test can always drive the control API and the Go API.
//
// The server also serves holdfast's control API over HTTP under
// /control/ (docs/PROTOCOL.md), as holdfast server does. A test that
// drives it as an operator's tool would uses the typed client of package
// controlapi; Client returns one whose connections close with the
// server:
//
//	c := srv.Client()
//	rev, err := c.Publish(ctx, "payments.prod", controlapi.PublishRequest{...})
//	if errors.Is(err, controlapi.ErrConflict) { ... }
//
// The control API includes the change workflow (docs/CHANGES.md):
// proposals, approvals and publishing of changes. Its policies need
// identities: a server given tokens (WithTokens; a token with Admin, to
// set policies and lints: access.Token{Name: "root", Secret: …, Admin:
// true}; see ExampleWithTokens_policy).
//
// Errors of the Go API: ErrInvalid (a malformed name, key, value or
// revision), ErrUnknownNamespace, ErrNoRevision (a revision or time the
// namespace never had), *transport.CompactedError (a revision below the
// compaction point), *SchemaError (a publish that fails the namespace's
// schema), *ConflictError (a publish whose IfRevision is not the
// namespace's revision), ErrClosed; of staged rollouts (StartRollout),
// ErrRolloutRunning, ErrRolloutEnded and ErrUnknownRollout.
//
// Every revision has an audit record (History): who committed it, why,
// and which keys it changed. Compaction drops values, not records, so a
// test can check what an operator did long after; ValuesAt, ValuesAtTime
// and Diff read the values still kept.
package holdfasttest
