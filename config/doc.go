// Package config is the holdfast client: it keeps an application's
// configuration in process memory, fresh from a config plane, and keeps
// serving it, marked stale, when the plane is unreachable.
//
// # Opening a namespace
//
// A Client talks to one config plane; Namespace opens one namespace and
// returns once it serves data:
//
//	c, err := config.New(config.WithEndpoint("https://config.example.com"),
//		config.WithClientID("checkout-7f9c"), config.WithLogger(logger))
//	if err != nil { ... }
//	defer c.Close()
//	ns, err := c.Namespace(ctx, "payments.prod", config.MaxStaleness(5*time.Minute))
//
// Client options start with With (WithEndpoint, WithCacheDir, ...);
// WithHTTPOptions passes any transport.HTTPOption to the HTTP source, whose
// defaults (transport.Default*) apply where no option says otherwise.
// Namespace options are bare nouns: MaxStaleness, FailOpen, FailClosed,
// Defaults, Schema.
//
// # Reading
//
// Reads are local: Get and the typed getters (String, Int, Float, Bool,
// Duration) load an atomic pointer to an immutable snapshot and look the key
// up. They never touch the network, never wait for a writer and do not
// allocate; values were decoded once, when the snapshot was built. A getter
// returns its default when the key is absent or holds another type (a type
// mismatch, counted by TypeMismatches). To read several keys of one
// revision, take a Snapshot and read from it. A Value (from Get) is a
// handle to one decoded JSON value: Kind, Str, Int, Int64, Float, Bool,
// Duration, Raw, Decode.
//
// To read a structured value without decoding it on every read, bind it:
// Bind[T](ns, key, def) decodes the key once per change and Get returns it
// with one atomic load. A time.Duration in T reads "250ms" strings as the
// Duration getter does. A value that does not decode keeps the previous
// one bound; Err says why until a good value replaces it, and Status shows
// it (ErrorBind).
//
// # Changes
//
// OnChange(key, fn) and OnAnyChange(fn) run callbacks after each update is
// served, in revision order, one at a time per namespace, on a goroutine of
// their own: a slow callback delays only later callbacks, never applying or
// reading, and a panic is recovered and counted. WaitForRevision blocks until
// a revision is served.
//
// # Staying current
//
// Each namespace has one sync loop: it fetches a snapshot, then watches from
// its cursor (Server-Sent Events, or long-poll behind proxies that buffer
// streams). Where the server offers it, the watches of all of a Client's
// namespaces ride one stream, with one cursor each. On a disconnect it
// resumes from the cursor after an exponential, jittered backoff that
// never gives up; when the server has compacted past the cursor, when a
// change does not follow the applied revision, or when the server's store
// id changes, it fetches a new snapshot. A stream that
// delivers no whole event for the idle timeout (WithStreamIdleTimeout,
// 15s: three of a server's default heartbeats) is dropped as dead. Within
// one store id the served revision never goes back: a server whose history
// is behind what was applied (a lagging replica, or a store restored from
// a backup) is refused, the last good serving Stale, until it is proven to
// be new history (WithHistoryRewriteGrace).
//
// # Several endpoints
//
// WithEndpoints lists several servers or relays of one config plane, in
// order of preference; they serve the same store (the same store id and
// revisions), so a cursor of one is a cursor of any:
//
//	c, err := config.New(config.WithEndpoints("http://relay-1:8080", "http://relay-2:8080"))
//
// The client talks to one at a time, all its traffic (snapshots, its one
// stream, acks) on one connection. When that endpoint cannot be reached
// or fails (a broken or idle connection, a 5xx, a 429), it moves to the
// next, after the usual backoff (and Retry-After), and every namespace
// resumes from its cursor: no snapshot is fetched again. While another
// serves, the first is probed in the background, and the client returns
// to it once it has answered well for WithFailbackAfter (30s), not on
// every blip; that return does not interrupt anything. Status.Endpoint
// says which endpoint serves, and each switch is logged at Info.
// WithEndpoint is the one-endpoint case.
//
// # Staleness and status
//
// Status reports the state (Syncing, Fresh, Stale, Breached, FailedClosed,
// Closed), where the data came from (network, disk, defaults), the
// endpoint serving, its revision and cursor, how long since it was last confirmed current, and
// the last error by kind, when it happened and whether it is past
// (ErrorInfo.Recovered; Status.String prints it all in one line);
// OnStatusChange delivers transitions in order and
// WaitForState waits for one. MaxStaleness with FailOpen (the default) or
// FailClosed and Defaults decides what a namespace serves once its data is
// too old. WithCacheDir keeps the last good data on disk and serves it at
// start, before the network; Schema rejects updates this build cannot
// parse, keeping the last good, reporting a nack to the server and calling
// OnReject subscribers. A namespace is Fresh only while its connection is
// healthy and it was confirmed within the idle timeout.
//
// Behind a relay, a confirmation counts from when the relay's upstream
// last confirmed the data, as the relay says (its age of relayed data,
// added up along a chain of relays; no synchronised clocks needed), and a
// relay that says its upstream is not confirming right now
// (Status.Unconfirmed) keeps the namespace out of Fresh: a client behind a
// relay cut off from its origin goes Stale, then Breached, as if it were
// cut off itself.
//
// # Staged rollouts
//
// A server can stage a change to a share of its clients (a rollout: 1%,
// then 10%, then all, advancing while no client nacks). The staged change
// and the stage's rule travel with the namespace's data, and each client
// works out from its client id (WithClientID; choose one that is stable
// across restarts) whether it is in the stage: a client in it serves the
// namespace with the change, the others without. Either is an ordinary
// revision: Get, OnChange (with what changed of what is served; a stage
// that changes nothing a client serves calls nothing), the last-good file
// and Status behave as for any update. Status.Rollout says which rollout
// the data carries and whether this client serves its change. Schema runs
// on what the client serves: a client in the stage whose Schema rejects
// the change rejects the revision, keeps its last good and nacks (naming
// the rollout), which stops the rollout. With the rollout's prevalidation
// on, a client outside the stage also checks the change, and reports a
// would-nack when its Schema rejects it (logged and counted as the
// apply result would_reject), serving the base all the same. The
// last-good file keeps the data as it came, so a client restarted with
// another id serves what its new id's membership says, from disk at once.
//
// # Errors
//
// Namespace fails at once with transport.ErrInvalidNamespace for a bad
// name, and with an *OpenError when its context ends first; the OpenError
// wraps both the context's error and the last error seen (for example
// transport.ErrNotFound, transport.ErrNotHoldfast for an endpoint that is
// not a holdfast server, or transport.ErrUnauthorized). Opening an open
// namespace with other options fails with ErrOptionsDiffer. Once open, a namespace
// never fails: transport errors and rejected updates (ErrRejected) show in
// Status and the logs while the last good data keeps serving.
//
// # Closing
//
// Close stops every goroutine and connection the Client owns and waits for
// them; it is idempotent. Namespaces keep answering reads with their last
// data after Close.
package config
