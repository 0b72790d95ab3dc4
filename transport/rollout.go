package transport

// CapabilityRollout is the capability of staged rollouts (docs/PROTOCOL.md,
// "Staged rollouts"). A client lists it when it evaluates a namespace's
// staged rollout (the reserved key "$holdfast/rollout") itself; a server
// sends that key, in snapshots and change sets, only to clients that list
// it, so that a client that predates rollouts serves the base. A server
// lists it when it runs rollouts and takes AckWouldReject reports.
const CapabilityRollout = "rollout"
