package controlapi

import (
	"encoding/json"
	"time"
)

// Bounds of the audit fields every write takes (actor, on_behalf_of and
// reason): bytes of UTF-8 text without control characters.
const (
	MaxActorBytes  = 256
	MaxReasonBytes = 4096
)

// PublishRequest is the body of POST /control/namespaces/{ns}/publish.
type PublishRequest struct {
	Puts    map[string]json.RawMessage `json:"puts,omitempty"`
	Deletes []string                   `json:"deletes,omitempty"`
	Actor   string                     `json:"actor,omitempty"`
	Reason  string                     `json:"reason,omitempty"`
	// IfRevision makes the publish conditional: it commits only if the
	// namespace is at this revision (0: it has none).
	IfRevision *int64 `json:"if_revision,omitempty"`
	// AbortRollout reverts the namespace's running rollout first; without
	// it a publish during a rollout is refused (409).
	AbortRollout bool `json:"abort_rollout,omitempty"`
	// Emergency publishes past a policy's approvals, by an identity in
	// its emergency list, with a reason: lints are reported, not
	// stopping it, and a retro review opens (the reply's EmergencyReply).
	Emergency bool `json:"emergency,omitempty"`
}

// RollbackRequest is the body of POST /control/namespaces/{ns}/rollback.
type RollbackRequest struct {
	To         *int64 `json:"to_revision"`
	Actor      string `json:"actor,omitempty"`
	Reason     string `json:"reason,omitempty"`
	IfRevision *int64 `json:"if_revision,omitempty"`
}

// RevisionReply is the reply of publish and rollback: the new revision.
type RevisionReply struct {
	Revision int64 `json:"revision"`
}

// CompactRequest is the body of POST /control/compact (0: the head).
type CompactRequest struct {
	Revision int64 `json:"revision"`
}

// CompactReply is the reply of POST /control/compact.
type CompactReply struct {
	CompactRevision int64 `json:"compact_revision"`
}

// NamespaceStatus is the reply of GET /control/namespaces/{ns}/status:
// the namespace's revision and how many of its live clients reported it.
type NamespaceStatus struct {
	Namespace       string `json:"ns"`
	StoreID         string `json:"store_id"`
	Revision        int64  `json:"revision"`
	Head            int64  `json:"head"`
	CompactRevision int64  `json:"compact_revision"`
	// Clients counts the live clients (ClientState.State) that reported
	// on the namespace: Acked of them applied Revision, Nacked rejected
	// it, Behind have not applied it. Stale and gone clients are not
	// counted.
	Clients int `json:"clients"`
	Acked   int `json:"acked"`
	Nacked  int `json:"nacked"`
	Behind  int `json:"behind"`
	// Live is Clients, by its name; Stale counts the stale clients that
	// reported on the namespace (connected but unconfirmed, or behind a
	// relay cut off from the server, or disconnected less than 5 s ago).
	Live  int `json:"live"`
	Stale int `json:"stale,omitempty"`
	// Streams counts the open watch streams of the namespace.
	Streams int `json:"streams"`
	// Servers counts the servers whose clients' reports are counted
	// (holdfast server: this one and each other with a summary in the
	// store; 0 from a server that merges none).
	Servers int `json:"servers,omitempty"`
	// Propagation is how far Revision has reached the namespace's
	// clients, when the server answering committed it (nil otherwise).
	Propagation *Propagation `json:"propagation,omitempty"`
}

// Propagation is how far one publish has reached its namespace's clients
// (holdfast server's propagation monitor): of the Clients the server knew
// of the namespace when it committed the publish, Acked have acked
// Revision or a later one; P50, P95 and P100 are the seconds from the
// commit until half, 95% and all of them had (nil: not yet).
type Propagation struct {
	Revision    int64     `json:"revision"`
	PublishedAt time.Time `json:"published_at"`
	Clients     int       `json:"clients"`
	Acked       int       `json:"acked"`
	P50         *float64  `json:"p50_seconds,omitempty"`
	P95         *float64  `json:"p95_seconds,omitempty"`
	P100        *float64  `json:"p100_seconds,omitempty"`
}

// ClientState is what one client reported about one namespace: an entry
// of GET /control/clients.
type ClientState struct {
	ClientID  string `json:"client_id"`
	Namespace string `json:"ns"`
	// AckedRevision is the last revision the client applied (0: none).
	AckedRevision int64 `json:"acked_revision"`
	// NackedRevision and NackError are the last revision it rejected, and why.
	NackedRevision int64  `json:"nacked_revision,omitempty"`
	NackError      string `json:"nack_error,omitempty"`
	// HeadRevision is the namespace's revision now; Behind is
	// AckedRevision < HeadRevision, and Lag their difference in store
	// revisions.
	HeadRevision int64     `json:"head_revision"`
	Behind       bool      `json:"behind"`
	Lag          int64     `json:"lag"`
	UpdatedAt    time.Time `json:"updated_at"`
	// Server is the server that heard it last (holdfast server: its id,
	// this one's or another's whose summary told).
	Server string `json:"server,omitempty"`
	// SDKVersion is the client's SDK version as its last report that said
	// one did (config.Version); empty when it never said.
	SDKVersion string `json:"sdk_version,omitempty"`
	// State is the client's presence: ClientLive (a connection open,
	// directly or at a relay), ClientStale (connected but unconfirmed for
	// two heartbeats, behind a relay cut off from its upstream, or
	// disconnected less than 5 s ago) or ClientGone (disconnected 5 s or
	// more, or never seen connected). Gone clients leave the list 10
	// minutes after they were last seen or heard.
	State string `json:"state,omitempty"`
	// SeenAt is when its presence was last confirmed (live, stale) or
	// when it disconnected (gone); zero when never seen connected.
	SeenAt time.Time `json:"seen_at,omitzero"`
}

// The presence states of ClientState.State.
const (
	ClientLive  = "live"
	ClientStale = "stale"
	ClientGone  = "gone"
)

// ServerReports is one other server's summary of its clients' reports on
// a namespace, as GET /control/clients merged it: At is when it was
// written (its reports are at most that old, and a client's UpdatedAt
// is when that server last heard it, as of then).
type ServerReports struct {
	Server    string    `json:"server"`
	Namespace string    `json:"ns"`
	At        time.Time `json:"at"`
	Clients   int       `json:"clients"`
	// Truncated counts the clients the summary left out (past its bound).
	Truncated int `json:"truncated,omitempty"`
}

// Clients is the reply of GET /control/clients.
type Clients struct {
	Head    int64         `json:"head"`
	Clients []ClientState `json:"clients"`
	// Server is the id of the server that answered; Servers the other
	// servers' summaries merged into Clients (holdfast server).
	Server  string          `json:"server,omitempty"`
	Servers []ServerReports `json:"servers,omitempty"`
	// Dropped counts the entries the answering server's per-client
	// tables could not keep since it started (its ack table full, its
	// presence table full): clients missing from the list, or shown gone.
	// Each drop is also logged (at most once a minute).
	Dropped int64 `json:"dropped,omitempty"`
	// Total is how many clients matched the query's ns and state, when it
	// asked for a page (offset, limit): Clients is that page of them.
	Total int `json:"total,omitempty"`
	// Summary counts the matching clients by state and groups their
	// nacks, when the query asked for it (summary=1).
	Summary *ClientSummary `json:"summary,omitempty"`
}

// MaxClientsLimit is the most clients a page of GET /control/clients
// holds.
const MaxClientsLimit = 1000

// ClientSummary is the clients of a GET /control/clients query counted:
// by presence state, and the reasons they rejected a revision, each with
// how many clients gave it, the most first.
type ClientSummary struct {
	States map[string]int `json:"states"`
	Nacks  []NackGroup    `json:"nacks"`
	// Namespaces counts each namespace's clients against its revision
	// now, as its status does.
	Namespaces map[string]NamespaceClients `json:"namespaces"`
}

// NamespaceClients counts a namespace's clients as NamespaceStatus does:
// the live ones (Acked, Nacked and Behind of them) and the stale ones.
type NamespaceClients struct {
	Live   int `json:"live"`
	Acked  int `json:"acked"`
	Nacked int `json:"nacked"`
	Behind int `json:"behind"`
	Stale  int `json:"stale"`
}

// NackGroup is the clients of a namespace that rejected one revision for
// one reason.
type NackGroup struct {
	Namespace string `json:"ns"`
	Revision  int64  `json:"revision"`
	Error     string `json:"error"`
	Count     int    `json:"count"`
}

// AuditRecord is the record of one committed revision of a namespace: who
// committed it, why, and which keys it put and deleted (sorted). It is
// one entry of GET /control/namespaces/{ns}/history.
type AuditRecord struct {
	Revision int64 `json:"revision"`
	// PrevRevision is the namespace's revision before (0: none).
	PrevRevision int64     `json:"prev_revision"`
	CommittedAt  time.Time `json:"committed_at"`
	// Actor is who committed it: the authenticated identity (a token's
	// name) when the server requires credentials; on an open server, what
	// the caller named (unverified).
	Actor string `json:"actor"`
	// OnBehalfOf is whom an authenticated caller said it acted for (the
	// request's "actor", the CLI's -actor), when not its own name.
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	Reason     string `json:"reason"`
	// Kind is publish, rollback, rollout-stage, rollout-promote,
	// rollout-revert, change (an approved change published), emergency
	// (an emergency publish), or unaudited (written past holdfast
	// server).
	Kind       string `json:"kind"`
	RollbackOf int64  `json:"rollback_of"` // a rollback's target revision; else 0
	// Change is the id of the change a commit of kind change or
	// emergency published.
	Change  string   `json:"change,omitempty"`
	Puts    []string `json:"puts"`
	Deletes []string `json:"deletes"`
}

// History is a page of a namespace's audit records, newest first: the
// reply of GET /control/namespaces/{ns}/history.
type History struct {
	Namespace string        `json:"ns"`
	Revisions []AuditRecord `json:"revisions"`
	// Truncated says that older records exist no more (past the audit's
	// retention); without it, a short page is the whole history.
	Truncated bool `json:"truncated,omitempty"`
}

// NamespaceValues is a namespace's content as of a revision or a time (keys
// reserved to holdfast left out): the reply of GET
// /control/namespaces/{ns}/values. Revision is the namespace's revision
// live then, CommittedAt its commit time.
type NamespaceValues struct {
	Namespace   string                     `json:"ns"`
	Revision    int64                      `json:"revision"`
	CommittedAt time.Time                  `json:"committed_at"`
	Values      map[string]json.RawMessage `json:"values"`
}

// Diff is what changed in a namespace between two revisions (keys
// reserved to holdfast left out): the reply of GET
// /control/namespaces/{ns}/diff. From and To are the namespace's revisions
// live at the two revisions asked for.
type Diff struct {
	Namespace string      `json:"ns"`
	From      int64       `json:"from"`
	To        int64       `json:"to"`
	Changes   []KeyChange `json:"changes"` // sorted by key
}

// KeyChange is one key of a Diff: Old is nil for a key added, New for a
// key deleted.
type KeyChange struct {
	Key string          `json:"key"`
	Old json.RawMessage `json:"old,omitempty"`
	New json.RawMessage `json:"new,omitempty"`
}

// NamespaceInfo is one namespace of GET /control/namespaces: its revision
// and its last change, as the store's index of namespaces holds them.
type NamespaceInfo struct {
	Namespace string `json:"ns"`
	// Revision is the namespace's revision (its last change's).
	Revision int64 `json:"revision"`
	// CommittedAt, Actor, OnBehalfOf, Reason and Kind are its last
	// change's, as its audit record says (Kind "unaudited": written past
	// holdfast server; an index entry made for a store an older server
	// wrote may lack the actor and reason).
	CommittedAt time.Time `json:"committed_at"`
	Actor       string    `json:"actor,omitempty"`
	OnBehalfOf  string    `json:"on_behalf_of,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	Kind        string    `json:"kind,omitempty"`
	// LiveClients counts the namespace's clients as status counts them
	// (its "clients": those that reported on it).
	LiveClients int `json:"live_clients"`
}

// Namespaces is a page of GET /control/namespaces: the namespaces the
// caller controls, sorted by name. Next, when set, is the cursor of the
// next page (?after=Next); empty, the page is the last.
type Namespaces struct {
	Namespaces []NamespaceInfo `json:"namespaces"`
	Next       string          `json:"next,omitempty"`
}

// Bounds of a page of GET /control/namespaces.
const (
	DefaultNamespacesLimit = 100
	MaxNamespacesLimit     = 1000
)
