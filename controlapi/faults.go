package controlapi

// Faults is the body of POST /control/faults, the reference server's
// fault injection (holdfast server has no such route: 404); every field
// is optional.
type Faults struct {
	// Fail makes the next Count data-plane requests fail with Status
	// (400..599), with Retry-After: RetryAfter (a Go duration or whole
	// seconds).
	Fail *FailFault `json:"fail,omitempty"`
	// Latency delays every data-plane request ("0": none).
	Latency *string `json:"latency,omitempty"`
	// DropStreams ends every open stream now.
	DropStreams bool `json:"drop_streams,omitempty"`
	// Blackhole, when set, switches the black hole on or off.
	Blackhole *bool `json:"blackhole,omitempty"`
	// ResetStore replaces the store by an empty one with a new id;
	// RestoreTo rewinds it to a revision (they exclude each other).
	ResetStore bool   `json:"reset_store,omitempty"`
	RestoreTo  *int64 `json:"restore_to,omitempty"`
}

// FailFault is Faults.Fail.
type FailFault struct {
	Count      int    `json:"count"`
	Status     int    `json:"status"`
	RetryAfter string `json:"retry_after,omitempty"`
}

// FaultsReply is the reply of POST /control/faults: the store's id after
// the faults.
type FaultsReply struct {
	StoreID string `json:"store_id"`
}
