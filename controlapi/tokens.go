package controlapi

import "time"

// TokenCreateRequest is the body of POST /control/tokens (admin scope).
// The server makes the secret; Expires, when not zero, is when the token
// stops authenticating (ExpiresIn, a Go duration such as "720h", is the
// same measured from the server's clock; give one or neither).
type TokenCreateRequest struct {
	Name string `json:"name"`
	// Subject, when set, makes a certificate identity: no secret; a
	// caller whose verified TLS client certificate has this subject
	// (RFC 2253) gets the scopes, and the audit names it by the subject.
	Subject   string    `json:"subject,omitempty"`
	Control   []string  `json:"control,omitempty"`
	Data      []string  `json:"data,omitempty"`
	Admin     bool      `json:"admin,omitempty"`
	Relay     bool      `json:"relay,omitempty"`
	Expires   time.Time `json:"expires,omitzero"`
	ExpiresIn string    `json:"expires_in,omitempty"`
}

// TokenInfo is what the control API shows of a token: never its secret
// nor its hash. LastUsed is written at most once a minute per server.
type TokenInfo struct {
	Name      string    `json:"name"`
	Subject   string    `json:"subject,omitempty"` // a certificate identity's
	Control   []string  `json:"control,omitempty"`
	Data      []string  `json:"data,omitempty"`
	Admin     bool      `json:"admin,omitempty"`
	Relay     bool      `json:"relay,omitempty"`
	Expires   time.Time `json:"expires,omitzero"`
	Expired   bool      `json:"expired,omitempty"`
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by,omitempty"`
	LastUsed  time.Time `json:"last_used,omitzero"`
}

// TokenCreated is the reply of POST /control/tokens: the token and its
// secret, shown this once (the store keeps only its hash).
type TokenCreated struct {
	TokenInfo
	Secret string `json:"secret,omitempty"` // none for a certificate identity
}

// TokenList is the reply of GET /control/tokens, sorted by name.
type TokenList struct {
	Tokens []TokenInfo `json:"tokens"`
}

// TokenSyncRequest is the body of POST /control/tokens/sync (relay
// scope): the reply waits until the server's tokens are past After, or at
// most a few seconds. Used names the tokens the relay's clients
// authenticated with since its previous request (for their last use).
type TokenSyncRequest struct {
	After int64    `json:"after"`
	Used  []string `json:"used,omitempty"`
}
