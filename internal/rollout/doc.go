// Package rollout is the wire form of a staged rollout and the rule by
// which a client knows whether it is in the current stage
// (docs/PROTOCOL.md, "Staged rollouts").
//
// A rollout travels with the namespace's data, as the value of one
// reserved key, Key: the staged change (puts and deletes), the rollout's
// id, the stage and the stage's cut. Every client evaluates its own
// membership: a client is in the stage when Hash(id, its client id) <= the
// cut. A relay passes the key on like any other, so it holds no per-client
// state, and every source (HTTP, a relay, etcd) carries it unchanged. A
// server that computes a stage picks the cut from the hashes of the
// clients it knows (Cut), so that the stage covers exactly its share of
// them; a client it does not know falls in or out by the same rule.
//
// View turns the content on the wire into what a client serves: the base
// without the key, with the staged change applied when the client is in
// the stage.
package rollout
