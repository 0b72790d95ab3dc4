// Package server is holdfast server: the durable origin and control plane
// of a holdfast fleet, stateless above its store.
//
// A Server serves the data plane that the SDK and relays speak (/sdk/...:
// snapshot, long-poll, SSE watch and stream, acks) and the control API
// (/control/...) over one store, an etcd cluster (package store: embedded
// by default, external, or a throwaway one for development). Everything it
// keeps is in the store: namespaces and their history with each change's
// audit, schemas, rollouts, the clients' report summaries, the bearer
// tokens (package tokens), the store id. So any number of servers can
// serve one store, with the same store id and revisions, and a client or
// relay moves between them by its cursor; and a server killed and started
// again loses nothing it answered.
//
// The data plane is a watch cache, as kube-apiserver's: the server
// follows the namespaces its clients ask for over one etcd watch (the
// watch cache the relay is built on, internal/watchcache) and serves
// snapshots, long-polls and streams from memory, so the store's load per
// publish does not grow with the number of clients. Writes go to etcd
// (package store), one transaction each, its audit record included. Once
// the store holds an admin token, both planes require a token (or a
// certificate identity) from every caller.
//
// The store's elected leader runs the jobs that must run once: the
// staged-rollout controller (internal/rollout/controller over the store:
// every transition one conditional transaction with the namespace's change
// and its audit record; any server takes the rollout API), the audit of
// changes written past holdfast, and the defragmentation of etcd's
// members.
package server
