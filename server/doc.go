// Package server is holdfast server: the durable origin and control plane
// of a holdfast fleet, stateless above its store.
//
// A Server serves the data plane that the SDK and relays speak (/sdk/...:
// snapshot, long-poll, SSE watch and stream, acks) and the control API
// (/control/...) over one store, an etcd cluster (package store: embedded
// by default, external, or a throwaway one for development). Everything it
// keeps is in the store: namespaces and their history with each change's
// audit, schemas, the store id. So any number of servers can serve one
// store, with the same store id and revisions, and a client or relay moves
// between them by its cursor; and a server killed and started again loses
// nothing it answered.
//
// The data plane is a watch cache, as kube-apiserver's: the server
// follows the namespaces its clients ask for over one etcd watch (the
// watch cache the relay is built on, internal/watchcache) and serves
// snapshots, long-polls and streams from memory, so the store's load per
// publish does not grow with the number of clients. Writes go to etcd (package control), one
// transaction each, its audit record included.
//
// Staged rollouts run on the store's elected leader (the controller of
// internal/rollout/controller over the store: its state under
// control.RolloutRoot, every transition one conditional transaction with
// the namespace's change and its audit record); any server takes the
// rollout API. The store's token records are not served yet.
package server
