package controlplane

import (
	"net/http"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// TokenSyncWait is the longest a relay's sync request waits for a change:
// each reply, changed or not, tells the relay its copy is current, so it
// stays well under the 5 s in which a revocation must take effect.
const TokenSyncWait = 2 * time.Second

// MaxTokenSyncUsed bounds the names a sync request reports as used.
const MaxTokenSyncUsed = 10_000

func (h *Handler) tokenStore() (TokenStore, error) {
	if h.cfg.Tokens == nil {
		return nil, &httpError{status: http.StatusNotFound, code: transport.CodeNotFound, msg: "this server keeps no tokens"}
	}
	return h.cfg.Tokens, nil
}

func (h *Handler) createToken(w http.ResponseWriter, r *http.Request) error {
	ts, err := h.tokenStore()
	if err != nil {
		return err
	}
	var body controlapi.TokenCreateRequest
	if err := ReadJSON(w, r, maxControlBytes, &body, false); err != nil {
		return err
	}
	now := time.Now().UTC()
	expires := body.Expires
	if body.ExpiresIn != "" {
		if !expires.IsZero() {
			return badRequest("give expires or expires_in, not both")
		}
		d, err := time.ParseDuration(body.ExpiresIn)
		if err != nil || d <= 0 {
			return badRequest("expires_in %q: want a positive duration such as 720h", body.ExpiresIn)
		}
		expires = now.Add(d)
	}
	if !expires.IsZero() && !expires.After(now) {
		return badRequest("expires %s is not in the future", expires.Format(time.RFC3339))
	}
	id, _ := access.FromContext(r.Context())
	rec := access.Record{Name: body.Name, Subject: body.Subject,
		Scopes:  access.Scopes{Control: body.Control, Data: body.Data, Admin: body.Admin, Relay: body.Relay},
		Expires: expires.UTC(), Created: now, CreatedBy: id.Name}
	secret := ""
	if body.Subject == "" {
		secret = access.NewSecret()
		rec.Hash = access.HashSecret(secret)
	}
	if err := ts.Create(r.Context(), rec); err != nil {
		return err
	}
	h.log.Info("control: token created", "token", rec.Name, "subject", rec.Subject, "by", id.Name, "control", rec.Control, "data", rec.Data,
		"admin", rec.Admin, "relay", rec.Relay, "expires", rec.Expires)
	writeJSON(w, http.StatusCreated, controlapi.TokenCreated{TokenInfo: controlapi.TokenInfo{
		Name: rec.Name, Subject: rec.Subject, Control: rec.Control, Data: rec.Data, Admin: rec.Admin, Relay: rec.Relay,
		Expires: rec.Expires, Created: rec.Created, CreatedBy: rec.CreatedBy}, Secret: secret})
	return nil
}

func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request) error {
	ts, err := h.tokenStore()
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	list, err := ts.List(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []controlapi.TokenInfo{}
	}
	writeJSON(w, http.StatusOK, controlapi.TokenList{Tokens: list})
	return nil
}

// tokenName reads and checks the {name} path segment.
func tokenName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := access.ValidateName(name); err != nil {
		return "", badRequest("%v", err)
	}
	return name, nil
}

func (h *Handler) getToken(w http.ResponseWriter, r *http.Request) error {
	ts, err := h.tokenStore()
	if err != nil {
		return err
	}
	name, err := tokenName(r)
	if err != nil {
		return err
	}
	list, err := ts.List(r.Context())
	if err != nil {
		return err
	}
	for _, t := range list {
		if t.Name == name {
			writeJSON(w, http.StatusOK, t)
			return nil
		}
	}
	return &httpError{status: http.StatusNotFound, code: transport.CodeNotFound, msg: "no token named " + name}
}

func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request) error {
	ts, err := h.tokenStore()
	if err != nil {
		return err
	}
	name, err := tokenName(r)
	if err != nil {
		return err
	}
	if err := ts.Revoke(r.Context(), name); err != nil {
		return err
	}
	id, _ := access.FromContext(r.Context())
	h.log.Info("control: token revoked", "token", name, "by", id.Name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// syncTokens is a relay's copy of the records: it waits up to
// TokenSyncWait for a change past the request's revision, and replies
// with every record (hashes, never secrets).
func (h *Handler) syncTokens(w http.ResponseWriter, r *http.Request) error {
	ts, err := h.tokenStore()
	if err != nil {
		return err
	}
	var body controlapi.TokenSyncRequest
	if err := ReadJSON(w, r, maxTokenSyncBytes, &body, true); err != nil {
		return err
	}
	if len(body.Used) > MaxTokenSyncUsed {
		return badRequest("%d names used, want at most %d", len(body.Used), MaxTokenSyncUsed)
	}
	ts.NoteUses(body.Used, time.Now())
	writeJSON(w, http.StatusOK, ts.Sync(r.Context(), body.After, TokenSyncWait))
	return nil
}
