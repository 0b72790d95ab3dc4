package controlapi

import "github.com/holdfast-dev/holdfast/access"

// TokenSync is the reply of POST /control/tokens/sync: every token record
// (hashes, never secrets) and whether the store requires tokens, as of
// the store's token revision Revision.
type TokenSync struct {
	Revision int64           `json:"revision"`
	Required bool            `json:"required"`
	Records  []access.Record `json:"records"`
}

// FaultsRequest is the body of POST /control/faults, the reference
// server's fault injection; every field is optional, and they apply
// together or not at all.
type FaultsRequest struct {
	// Fail makes the next data-plane requests fail.
	Fail *FailFault `json:"fail,omitempty"`
	// Latency delays every data-plane request by a Go duration ("250ms";
	// "0" clears it).
	Latency *string `json:"latency,omitempty"`
	// DropStreams ends every open watch stream now.
	DropStreams bool `json:"drop_streams,omitempty"`
	// Blackhole, when set, turns the black hole on or off.
	Blackhole *bool `json:"blackhole,omitempty"`
	// ResetStore replaces the store by an empty one with a new id.
	ResetStore bool `json:"reset_store,omitempty"`
	// RestoreTo rewinds the store to this revision (not with ResetStore).
	RestoreTo *int64 `json:"restore_to,omitempty"`
}

// FailFault makes the next Count data-plane requests fail with Status
// (400..599) and a Retry-After of RetryAfter (a Go duration); Count 0
// clears the fault.
type FailFault struct {
	Count      int    `json:"count"`
	Status     int    `json:"status"`
	RetryAfter string `json:"retry_after,omitempty"`
}

// FaultsReply is the reply of POST /control/faults: the store's id (new
// after a reset).
type FaultsReply struct {
	StoreID string `json:"store_id"`
}
