// Package control is holdfast server's control API (/control/...): the
// one handler of internal/controlplane over the store in etcd (store.go),
// with what only a server over etcd does beside it: the audit log's
// trimming (trim.go), the clients' reports shared across servers as
// leased summaries (acks.go, reports.go), the follow of the running
// rollouts (active.go) and the rollouts' state in etcd, committed with
// the leader's condition (rollouts.go; the controller of
// internal/rollout/controller, which holdfast server runs on its leader).
// Every write is one etcd transaction that carries its audit record, so
// the store is the only state: any server of a store answers the same,
// and a restart loses nothing.
package control
