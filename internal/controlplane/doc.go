// Package controlplane is the control API (/control/..., docs/PROTOCOL.md
// "Control API"), written once over a Store, as package dataplane serves
// /sdk/... over a Backend: holdfast server mounts it over etcd
// (server/control), the reference server over its in-memory store
// (internal/fakeserver). Every route, query rule, error code and reply is
// declared here; a store keeps only what is its own (how a write commits,
// where the audit and the clients' reports live, which server leads).
//
// Identity is a seam: an Authenticator puts the caller's identity on the
// request's context (access.NewContext), and the handler reads it from
// there. A server whose front end authenticated already (the data plane's
// mux) leaves the identity in place; console sessions or client
// certificates plug in as other authenticators.
package controlplane
