// Package fakeserver is holdfast's reference server for tests: a real
// config plane, not a mock, which holdfasttest wraps. It keeps an
// in-memory MVCC store (one revision counter for every namespace, history
// per key with tombstones, compaction by revision and by retention;
// store.go), its audit (audit.go), schemas and the rollout controller
// (rollout.go). It serves the control API with package controlplane over
// that store (controlstore.go) and the data-plane protocol of package
// transport (snapshot, long-poll events, SSE watch and stream, acks) with
// package dataplane: the same serving code as holdfast server's (and, for
// the data plane, a relay's), so that both answer alike. What is its own
// is the in-memory store and fault injection (faults, server.go; POST
// /control/faults, control.go), which it gives the data plane as a
// dataplane.Faults. Nothing of it runs in holdfast server or holdfast
// relay.
//
// In a test:
//
//	srv, err := fakeserver.Start(fakeserver.WithHeartbeat(100 * time.Millisecond))
//	if err != nil {
//		t.Fatal(err)
//	}
//	t.Cleanup(func() { srv.Close() })
//	rev, err := srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 50})
//	// point a client at srv.URL() ...
//
// Close stops the server and waits for every goroutine it started; it is
// idempotent. Stop and Restart take the server down and up again on the
// same address, keeping the store, to simulate a crash.
//
// Faults (FailNext, SetLatency, DropStreams, SetBlackhole, ResetStore,
// RestoreTo) apply to the data plane (/sdk/...) only, so that a test can
// always drive the control API and the Go API; the same faults are one POST
// /control/faults away for tools in other languages. ResetStore is a new
// store (a new id, revisions from 1); RestoreTo is the same store restored
// from a backup (the same id, history cut back to a revision, later
// revision numbers reused with other content). Once SetBlackhole(true) returns, not a
// byte more is sent on the data plane until SetBlackhole(false). Stats
// counts data-plane requests, so a test can tell, for example, that a
// client resumed without a new snapshot; OpenStreams lets a test wait until
// its client is watching.
//
// Cursors: a snapshot's cursor is the store's head when it was read; a
// stream's first event after its backlog is a progress event at that
// cursor, and every event id is a cursor: no change of the namespace sent
// after it is at or below it.
//
// Errors of the Go API: ErrInvalid (a malformed name, key, value or
// revision; HTTP 400), ErrUnknownNamespace and ErrNoRevision (404),
// *ConflictError (409), *transport.CompactedError (410), *SchemaError
// (422). Over HTTP every error is a transport.ErrorBody; a client's
// mistake is never a 500.
//
// Audit: every revision has a record (History: actor, reason, kind, keys
// put and deleted) that compaction keeps; ValuesAt, ValuesAtTime and Diff
// read the past values compaction kept (audit.go).
//
// A namespace exists once it is published to or given a schema. Every
// publish gets exactly one new revision, even one that changes nothing
// (deletes of absent keys are dropped from its change set).
//
// Clients that predate staged rollouts: to a request whose
// Holdfast-Capabilities does not list transport.CapabilityRollout, every
// data-plane reply leaves out reserved keys (rollout.Reserved): snapshots
// (with an ETag of their own, "<store_id>.base.<revision>", when the
// content held any) and change sets (a change of only reserved keys is an
// empty one of the same revision and prev_revision). Origin and relay
// alike: the serving code is the same (package dataplane).
//
// Watchers: each has a bounded queue (WithWatcherBuffer). A watcher that
// falls further behind is disconnected, never silently skipped; its client
// resumes from its cursor. A watch stream that cannot take a batch of
// writes within max(10s, 3 heartbeats) is disconnected too.
package fakeserver
