package controlapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/internal/version"
)

// DefaultMaxReplyBytes bounds a reply the Client reads (a namespace's
// values, a history page) unless WithMaxReplyBytes says otherwise.
const DefaultMaxReplyBytes = 256 << 20

// DefaultUserAgent is the User-Agent the Client sends unless
// WithUserAgent says otherwise: "holdfast-controlapi/" and the SDK's
// version (config.Version).
const DefaultUserAgent = "holdfast-controlapi/" + version.SDK

// Client calls the control API of a holdfast server (or of the reference
// server, holdfasttest): one typed method per route, each taking a
// context that bounds the request. A reply that is not 2xx is an
// *Error. It is safe for concurrent use.
type Client struct {
	base     string // the base URL without a trailing slash
	hc       *http.Client
	token    string
	ua       string
	maxReply int64
	onReply  func(*http.Response, []byte)
}

// ClientOption configures a Client.
type ClientOption interface {
	apply(*Client) error
}

type clientOption func(*Client) error

func (f clientOption) apply(c *Client) error { return f(c) }

// WithHTTPClient sends the requests with hc (its transport: TLS, proxies,
// timeouts). Default: a client of http.DefaultTransport without a
// timeout; a request is bounded by its context.
func WithHTTPClient(hc *http.Client) ClientOption {
	return clientOption(func(c *Client) error {
		if hc == nil {
			return errors.New("controlapi: nil HTTP client")
		}
		c.hc = hc
		return nil
	})
}

// WithToken sends token in "Authorization: Bearer" with every request.
// An empty token sends none.
func WithToken(token string) ClientOption {
	return clientOption(func(c *Client) error {
		if strings.ContainsAny(token, "\r\n") {
			return errors.New("controlapi: the token holds a line break")
		}
		c.token = token
		return nil
	})
}

// WithUserAgent sets the User-Agent of every request (default
// DefaultUserAgent).
func WithUserAgent(ua string) ClientOption {
	return clientOption(func(c *Client) error {
		c.ua = ua
		return nil
	})
}

// WithMaxReplyBytes bounds the reply the Client reads (default
// DefaultMaxReplyBytes): a larger one fails the call.
func WithMaxReplyBytes(n int64) ClientOption {
	return clientOption(func(c *Client) error {
		if n <= 0 {
			return fmt.Errorf("controlapi: max reply bytes %d, want > 0", n)
		}
		c.maxReply = n
		return nil
	})
}

// WithReplyHook calls fn with every reply the Client read whole (2xx or
// not), before it decodes it: body is the reply's body as the server sent
// it, resp its status and headers (its Body already closed). A caller
// that shows the API's JSON as it came (holdfast -o json) keeps body; fn
// must not keep resp past its return. Calls on one Client may come from
// concurrent requests.
func WithReplyHook(fn func(resp *http.Response, body []byte)) ClientOption {
	return clientOption(func(c *Client) error {
		c.onReply = fn
		return nil
	})
}

// NewClient returns a Client of the control API at baseURL, the server's
// base URL ("http://127.0.0.1:8080"; a path prefix is kept). It checks the
// URL and the options; it sends nothing.
func NewClient(baseURL string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("controlapi: base URL: %w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("controlapi: base URL %q: scheme must be http or https", u.Redacted())
	case u.Host == "":
		return nil, fmt.Errorf("controlapi: base URL %q has no host", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("controlapi: base URL %q must not have a query or fragment", u.Redacted())
	}
	c := &Client{
		base:     strings.TrimSuffix(u.String(), "/"),
		hc:       &http.Client{Transport: http.DefaultTransport},
		ua:       DefaultUserAgent,
		maxReply: DefaultMaxReplyBytes,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// BaseURL returns the base URL the Client calls, without a trailing
// slash.
func (c *Client) BaseURL() string { return c.base }

// nsPath is the path of namespace ns's route elems.
func nsPath(ns string, elems ...string) string {
	p := "/control/namespaces/" + url.PathEscape(ns)
	for _, e := range elems {
		p += "/" + url.PathEscape(e)
	}
	return p
}

// do sends one request, in (when not nil) encoded as JSON, and decodes a
// 2xx reply into out (when not nil; a *json.RawMessage takes the body as
// it came). A reply that is not 2xx is an *Error.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("controlapi: %s %s: encoding the request: %w", method, path, err)
		}
		body = bytes.NewReader(data)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("controlapi: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err // a *url.Error: the URL without its password, no header
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxReply+1))
	if err != nil {
		return fmt.Errorf("controlapi: %s %s: reading the reply: %w", method, path, err)
	}
	if int64(len(data)) > c.maxReply {
		return fmt.Errorf("controlapi: %s %s: reply larger than %d bytes", method, path, c.maxReply)
	}
	if c.onReply != nil {
		c.onReply(resp, data)
	}
	if resp.StatusCode/100 != 2 {
		return newError(resp, data)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if !json.Valid(data) {
		return fmt.Errorf("controlapi: %s %s: the reply is not JSON: %q", method, path, clip(string(data), 128))
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = append((*raw)[:0], data...)
		return nil
	}
	// Not strict: a newer server may add fields.
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("controlapi: %s %s: decoding the reply: %w", method, path, err)
	}
	return nil
}

// clip is s cut to n bytes, marked when cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Publish commits req's puts and deletes to namespace ns as one new
// revision and returns it (POST /control/namespaces/{ns}/publish). It
// fails with an *Error: ErrConflict (req.IfRevision is not the
// namespace's revision; Error.Revision is the namespace's, or a rollout
// runs on it), ErrSchemaViolation (Error.Details lists the failures),
// transport.ErrBadRequest, transport.ErrTooLarge.
func (c *Client) Publish(ctx context.Context, ns string, req PublishRequest) (int64, error) {
	var r RevisionReply
	err := c.do(ctx, http.MethodPost, nsPath(ns, "publish"), nil, req, &r)
	return r.Revision, err
}

// Rollback commits, as one new revision, the content namespace ns had at
// revision *req.To (required) and returns the new revision (POST
// /control/namespaces/{ns}/rollback). Its errors are Publish's, and
// transport.ErrNotFound for a revision the namespace never had.
func (c *Client) Rollback(ctx context.Context, ns string, req RollbackRequest) (int64, error) {
	var r RevisionReply
	err := c.do(ctx, http.MethodPost, nsPath(ns, "rollback"), nil, req, &r)
	return r.Revision, err
}

// PutSchema sets namespace ns's JSON Schema (PUT
// /control/namespaces/{ns}/schema), sent compacted; later publishes whose
// content fails it are refused. An invalid schema is
// transport.ErrBadRequest.
func (c *Client) PutSchema(ctx context.Context, ns string, schema json.RawMessage) error {
	return c.do(ctx, http.MethodPut, nsPath(ns, "schema"), nil, schema, nil)
}

// GetSchema returns namespace ns's JSON Schema as the server keeps it
// (GET /control/namespaces/{ns}/schema); transport.ErrNotFound when it
// has none.
func (c *Client) GetSchema(ctx context.Context, ns string) (json.RawMessage, error) {
	var s json.RawMessage
	if err := c.do(ctx, http.MethodGet, nsPath(ns, "schema"), nil, nil, &s); err != nil {
		return nil, err
	}
	return s, nil
}

// DeleteSchema removes namespace ns's JSON Schema (DELETE
// /control/namespaces/{ns}/schema); transport.ErrNotFound when it has
// none.
func (c *Client) DeleteSchema(ctx context.Context, ns string) error {
	return c.do(ctx, http.MethodDelete, nsPath(ns, "schema"), nil, nil, nil)
}

// Status returns namespace ns's revision and what its clients reported
// (GET /control/namespaces/{ns}/status).
func (c *Client) Status(ctx context.Context, ns string) (*NamespaceStatus, error) {
	var st NamespaceStatus
	if err := c.do(ctx, http.MethodGet, nsPath(ns, "status"), nil, nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// HistoryOptions select a page of History: at most Limit records (0: the
// server's default, 100) below revision Before (0: from the newest).
type HistoryOptions struct {
	Limit  int
	Before int64
}

// History returns a page of namespace ns's audit records, newest first
// (GET /control/namespaces/{ns}/history).
func (c *Client) History(ctx context.Context, ns string, opts HistoryOptions) (*History, error) {
	q := url.Values{}
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Before != 0 {
		q.Set("before", strconv.FormatInt(opts.Before, 10))
	}
	var h History
	if err := c.do(ctx, http.MethodGet, nsPath(ns, "history"), q, nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// ValuesAt returns namespace ns's content live at store revision rev (GET
// /control/namespaces/{ns}/values?revision=rev): that of its last
// revision at or below rev. It fails with transport.ErrNotFound (rev
// above the head or before the namespace's first revision) or
// transport.ErrCompacted (errors.As gives the *transport.CompactedError
// with the compaction point).
func (c *Client) ValuesAt(ctx context.Context, ns string, rev int64) (*NamespaceValues, error) {
	return c.values(ctx, ns, url.Values{"revision": {strconv.FormatInt(rev, 10)}})
}

// ValuesAtTime is ValuesAt for the last revision committed at or before t
// (?at=t, RFC 3339).
func (c *Client) ValuesAtTime(ctx context.Context, ns string, t time.Time) (*NamespaceValues, error) {
	return c.values(ctx, ns, url.Values{"at": {t.Format(time.RFC3339Nano)}})
}

func (c *Client) values(ctx context.Context, ns string, q url.Values) (*NamespaceValues, error) {
	var v NamespaceValues
	if err := c.do(ctx, http.MethodGet, nsPath(ns, "values"), q, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Diff returns the keys whose values differ between namespace ns's
// content at store revisions from and to (GET
// /control/namespaces/{ns}/diff), each read as ValuesAt reads it, with
// the same errors.
func (c *Client) Diff(ctx context.Context, ns string, from, to int64) (*Diff, error) {
	q := url.Values{"from": {strconv.FormatInt(from, 10)}, "to": {strconv.FormatInt(to, 10)}}
	var d Diff
	if err := c.do(ctx, http.MethodGet, nsPath(ns, "diff"), q, nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// Compact discards the store's history at and below revision rev (0: the
// head) and returns the compaction point (POST /control/compact).
func (c *Client) Compact(ctx context.Context, rev int64) (int64, error) {
	var r CompactReply
	err := c.do(ctx, http.MethodPost, "/control/compact", nil, CompactRequest{Revision: rev}, &r)
	return r.CompactRevision, err
}

// Clients returns every client's last report on every namespace the
// caller controls (GET /control/clients).
func (c *Client) Clients(ctx context.Context) (*Clients, error) {
	var cs Clients
	if err := c.do(ctx, http.MethodGet, "/control/clients", nil, nil, &cs); err != nil {
		return nil, err
	}
	return &cs, nil
}

// NamespacesOptions select a page of Namespaces: the namespaces whose
// names begin with Prefix, after the name After (the previous page's
// Next), at most Limit (0: the server's default, 100; at most 1000).
type NamespacesOptions struct {
	Prefix, After string
	Limit         int
}

// Namespaces returns a page of the namespaces the caller controls, sorted
// by name, each with its revision, last change and clients (GET
// /control/namespaces).
func (c *Client) Namespaces(ctx context.Context, opts NamespacesOptions) (*Namespaces, error) {
	q := url.Values{}
	if opts.Prefix != "" {
		q.Set("prefix", opts.Prefix)
	}
	if opts.After != "" {
		q.Set("after", opts.After)
	}
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var ns Namespaces
	if err := c.do(ctx, http.MethodGet, "/control/namespaces", q, nil, &ns); err != nil {
		return nil, err
	}
	return &ns, nil
}

// CreateToken creates a token (POST /control/tokens, admin scope) and
// returns it with its secret, shown this once. A server without a token
// store answers transport.ErrNotFound.
func (c *Client) CreateToken(ctx context.Context, req TokenCreateRequest) (*TokenCreated, error) {
	var t TokenCreated
	if err := c.do(ctx, http.MethodPost, "/control/tokens", nil, req, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListTokens returns the store's tokens, sorted by name (GET
// /control/tokens, admin scope); never a secret.
func (c *Client) ListTokens(ctx context.Context) ([]TokenInfo, error) {
	var l TokenList
	if err := c.do(ctx, http.MethodGet, "/control/tokens", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Tokens, nil
}

// GetToken returns token name (GET /control/tokens/{name}, admin scope);
// transport.ErrNotFound when there is none.
func (c *Client) GetToken(ctx context.Context, name string) (*TokenInfo, error) {
	var t TokenInfo
	if err := c.do(ctx, http.MethodGet, "/control/tokens/"+url.PathEscape(name), nil, nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// RevokeToken deletes token name (DELETE /control/tokens/{name}, admin
// scope); transport.ErrNotFound when there is none.
func (c *Client) RevokeToken(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/control/tokens/"+url.PathEscape(name), nil, nil, nil)
}

// SyncTokens returns the token records once the server's are past
// req.After, or after a few seconds as they are (POST
// /control/tokens/sync, relay scope): a relay's copy of the tokens.
func (c *Client) SyncTokens(ctx context.Context, req TokenSyncRequest) (*TokenSync, error) {
	var s TokenSync
	if err := c.do(ctx, http.MethodPost, "/control/tokens/sync", nil, req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Faults injects faults into the reference server (POST /control/faults;
// holdfast server has no such route: transport.ErrNotFound) and returns
// its store's id, new after req.ResetStore.
func (c *Client) Faults(ctx context.Context, req FaultsRequest) (storeID string, err error) {
	var r FaultsReply
	err = c.do(ctx, http.MethodPost, "/control/faults", nil, req, &r)
	return r.StoreID, err
}

// StartRollout starts a staged rollout of req's change to namespace ns
// (POST /control/namespaces/{ns}/rollouts): its first stage is committed
// before it returns. A second rollout while one runs is ErrConflict; a
// change that fails the namespace's schema ErrSchemaViolation.
func (c *Client) StartRollout(ctx context.Context, ns string, req RolloutRequest) (*RolloutStarted, error) {
	var r RolloutStarted
	if err := c.do(ctx, http.MethodPost, nsPath(ns, "rollouts"), nil, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ListRollouts returns namespace ns's rollouts, newest first: the running
// one and those kept after they ended (GET
// /control/namespaces/{ns}/rollouts).
func (c *Client) ListRollouts(ctx context.Context, ns string) ([]RolloutRecord, error) {
	var l RolloutList
	if err := c.do(ctx, http.MethodGet, nsPath(ns, "rollouts"), nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Rollouts, nil
}

// GetRollout returns the record of rollout id of namespace ns, running or
// ended (GET /control/namespaces/{ns}/rollouts/{id});
// transport.ErrNotFound when there is none.
func (c *Client) GetRollout(ctx context.Context, ns, id string) (*RolloutRecord, error) {
	var r RolloutRecord
	if err := c.do(ctx, http.MethodGet, nsPath(ns, "rollouts", id), nil, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// AbortRollout reverts the running rollout id now, in one new revision
// without its change, and returns its ended record (POST
// .../rollouts/{id}/abort); an ended rollout is ErrConflict. req names
// the actor and the reason (none: no body).
func (c *Client) AbortRollout(ctx context.Context, ns, id string, req RolloutActionRequest) (*RolloutRecord, error) {
	return c.rolloutAction(ctx, ns, id, "abort", req)
}

// PromoteRollout ends the running rollout id early: its change becomes
// the base for every client, in one new revision; it returns the ended
// record (POST .../rollouts/{id}/promote), with AbortRollout's errors.
func (c *Client) PromoteRollout(ctx context.Context, ns, id string, req RolloutActionRequest) (*RolloutRecord, error) {
	return c.rolloutAction(ctx, ns, id, "promote", req)
}

func (c *Client) rolloutAction(ctx context.Context, ns, id, action string, req RolloutActionRequest) (*RolloutRecord, error) {
	var body any
	if req != (RolloutActionRequest{}) {
		body = req
	}
	var r RolloutRecord
	if err := c.do(ctx, http.MethodPost, nsPath(ns, "rollouts", id, action), nil, body, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// PutLint sets lint name (PUT /control/lints/{name}, admin scope): the
// server type-checks its expression, bounds its cost and runs its
// examples first (bad_request, lint_too_costly, lint_examples_failed with
// Error.Details). A server without lints answers transport.ErrNotFound.
func (c *Client) PutLint(ctx context.Context, name string, l Lint) (*LintInfo, error) {
	var info LintInfo
	if err := c.do(ctx, http.MethodPut, "/control/lints/"+url.PathEscape(name), nil, l, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// GetLint returns lint name (GET /control/lints/{name});
// transport.ErrNotFound when there is none.
func (c *Client) GetLint(ctx context.Context, name string) (*LintInfo, error) {
	var info LintInfo
	if err := c.do(ctx, http.MethodGet, "/control/lints/"+url.PathEscape(name), nil, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ListLints returns the store's lints, sorted by name (GET /control/lints).
func (c *Client) ListLints(ctx context.Context) ([]LintInfo, error) {
	var l LintList
	if err := c.do(ctx, http.MethodGet, "/control/lints", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Lints, nil
}

// DeleteLint deletes lint name (DELETE /control/lints/{name}, admin
// scope); transport.ErrNotFound when there is none.
func (c *Client) DeleteLint(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/control/lints/"+url.PathEscape(name), nil, nil, nil)
}

// LintTestOptions are the options of TestLint.
type LintTestOptions struct {
	// Limit is how many revisions of history it runs over, newest first
	// (0: the server's default).
	Limit int
	// Lint, when set, is the unsaved lint to test in place of the one
	// saved as name.
	Lint *Lint
}

// TestLint runs lint name (or opts.Lint) over namespace ns's history
// (POST /control/lints/{name}/test) and returns the revisions it would
// have blocked and warned of.
func (c *Client) TestLint(ctx context.Context, name, ns string, opts LintTestOptions) (*LintTestResult, error) {
	q := url.Values{"ns": {ns}}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var body any
	if opts.Lint != nil {
		body = opts.Lint
	}
	var res LintTestResult
	if err := c.do(ctx, http.MethodPost, "/control/lints/"+url.PathEscape(name)+"/test", q, body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
