// Package controller is the staged-rollout controller over a durable
// state store (docs/PROTOCOL.md, "Staged rollouts"; docs/SERVER.md,
// "Rollouts").
//
// A rollout's state (its spec, stage, the stage's start, the bake's end,
// the decisions and their reasons) lives in a Store; every transition is
// one conditional Commit: the namespace's change (the reserved key
// rollout.Key, the promotion or the revert), the new state and the audit
// record in one write, made only if the state is still at the version the
// controller read (and, for the controller's own steps, only while it
// leads). So no stage is skipped or taken twice and no revert happens
// twice, whichever of several servers tries.
//
// The clients' reports are soft state, rebuilt from Reports at every
// step: a controller that takes over (a new leader, a restart) counts
// what the clients report now. Timers resume from the stored times.
//
// MemStore keeps the state in memory (the reference server, tests);
// holdfast server keeps it in etcd.
package controller
