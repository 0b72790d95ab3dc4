// Package control is holdfast server's control API (/control/...), over
// the store: publish, rollback, schemas, history, values, diff, status,
// compaction, the clients' acks and staged rollouts (the controller of
// internal/rollout/controller over the store, rollouts.go). Every write is one etcd transaction
// that carries its audit record, so the store is the only state: any
// server of a store answers the same, and a restart loses nothing.
//
// The JSON forms are those of docs/PROTOCOL.md ("Control API"), the same
// as the reference server's (internal/fakeserver). /control/faults is the
// reference server's alone: here it is 404.
package control
